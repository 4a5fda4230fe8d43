#include "server/redis/row_cache.h"

#include <algorithm>

namespace osprey::server::redis_store {

RowCache::RowCache(size_t row_floats, uint64_t capacity, config::CachePolicy policy)
    : row_floats_(row_floats), capacity_(capacity), policy_(policy) {
  size_t slots = 64;
  const uint64_t expect = std::min<uint64_t>(capacity + capacity / 8, 1u << 20);
  while (slots < 2 * expect) slots *= 2;
  index_.assign(slots, Slot{0, kNone});
  mask_ = slots - 1;
}

void RowCache::Grow() {
  std::vector<Slot> old(index_.size() * 2, Slot{0, kNone});
  old.swap(index_);
  mask_ = index_.size() - 1;
  for (const Slot& s : old) {
    if (s.id == kNone) continue;
    size_t i = Home(s.key);
    while (index_[i].id != kNone) i = (i + 1) & mask_;
    index_[i] = s;
  }
}

RowCache::Row* RowCache::Insert(uint64_t key) {
  if (Row* r = Peek(key)) return r;
  if (2 * (size_ + 1) > index_.size()) Grow();
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = next_id_++;
    if ((id >> kChunkShift) == row_chunks_.size()) {
      row_chunks_.emplace_back(new Row[kChunkRows]);
      record_chunks_.emplace_back(new float[static_cast<size_t>(kChunkRows) * row_floats_]);
      for (uint32_t j = 0; j < kChunkRows; ++j) {
        Row& r = row_chunks_.back()[j];
        r.record = record_chunks_.back().get() + static_cast<size_t>(j) * row_floats_;
        r.id = id + j;
      }
    }
  }
  size_t i = Home(key);
  while (index_[i].id != kNone) i = (i + 1) & mask_;
  index_[i] = Slot{key, id};
  Row* r = RowAt(id);
  std::fill(std::begin(r->history), std::end(r->history), 0);
  r->key = key;
  r->dirty_gen = 0;
  r->listed = false;
  r->live = true;
  r->last_use = ++tick_;
  r->uses = 1;
  ++size_;
  return r;
}

void RowCache::RemoveFromIndex(uint64_t key) {
  size_t i = Home(key);
  while (index_[i].key != key || index_[i].id == kNone) {
    if (index_[i].id == kNone) return;
    i = (i + 1) & mask_;
  }
  // Backward shift: move up every later entry of the run whose home is not in (i, j].
  for (size_t j = (i + 1) & mask_; index_[j].id != kNone; j = (j + 1) & mask_) {
    const size_t home = Home(index_[j].key);
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    index_[i] = index_[j];
    i = j;
  }
  index_[i].id = kNone;
}

void RowCache::Drop(Row* r) {
  RemoveFromIndex(r->key);
  if (r->dirty_gen != 0) --dirty_count_;
  r->live = false;
  r->dirty_gen = 0;
  r->listed = false;
  free_ids_.push_back(r->id);
  --size_;
}

void RowCache::MarkDirty(Row* row) {
  if (row->dirty_gen == 0) ++dirty_count_;
  row->dirty_gen = ++gen_;
  if (!row->listed) {
    row->listed = true;
    dirty_.push_back(row->id);
  }
}

std::vector<std::pair<uint64_t, uint64_t>> RowCache::TakeDirty() {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(dirty_.size());
  for (uint32_t id : dirty_) {
    Row* r = RowAt(id);
    r->listed = false;
    out.emplace_back(r->key, r->dirty_gen);
  }
  dirty_.clear();
  return out;
}

void RowCache::MarkClean(uint64_t key, uint64_t gen) {
  Row* r = Peek(key);
  if (r == nullptr || r->dirty_gen != gen) return;
  r->dirty_gen = 0;
  --dirty_count_;
}

void RowCache::Relist(uint64_t key) {
  Row* r = Peek(key);
  if (r == nullptr || r->dirty_gen == 0 || r->listed) return;
  r->listed = true;
  dirty_.push_back(r->id);
}

void RowCache::MaybeEvict() {
  const uint64_t slack = std::max<uint64_t>(64, capacity_ / 8);
  if (size_ <= capacity_ + (capacity_ == 0 ? 0 : slack)) return;
  if (size_ == dirty_count_) return;
  std::vector<std::pair<uint64_t, uint32_t>> clean;  // (score, id)
  clean.reserve(size_ - dirty_count_);
  for (uint32_t id = 0; id < next_id_; ++id) {
    Row* r = RowAt(id);
    if (!r->live || r->dirty_gen != 0) continue;
    clean.emplace_back(policy_ == config::CachePolicy::kLfu ? r->uses : r->last_use, id);
    r->uses /= 2;
  }
  const size_t excess = size_ - std::min<uint64_t>(size_, capacity_);
  const size_t evict = std::min(excess, clean.size());
  if (evict < clean.size()) std::nth_element(clean.begin(), clean.begin() + evict, clean.end());
  for (size_t i = 0; i < evict; ++i) Drop(RowAt(clean[i].second));
}

size_t RowCache::Erase(const uint64_t* keys, size_t n) {
  bool any_listed = false;
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    Row* r = Peek(keys[i]);
    if (r == nullptr) continue;
    any_listed |= r->listed;
    Drop(r);
    ++erased;
  }
  if (any_listed) {
    dirty_.erase(std::remove_if(dirty_.begin(), dirty_.end(),
                                [&](uint32_t id) { return !RowAt(id)->live; }),
                 dirty_.end());
  }
  return erased;
}

}  // namespace osprey::server::redis_store
