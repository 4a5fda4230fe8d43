#include "server/redis/row_cache.h"

#include <algorithm>
#include <unordered_set>

namespace osprey::server::redis_store {

RowCache::Row* RowCache::Find(uint64_t key) {
  auto it = rows_.find(key);
  if (it == rows_.end()) return nullptr;
  it->second.last_use = ++tick_;
  ++it->second.uses;
  return &it->second;
}

RowCache::Row* RowCache::Insert(uint64_t key) {
  Row& r = rows_[key];
  if (free_.empty()) {
    r.record.reset(new float[row_floats_]);
  } else {
    r.record = std::move(free_.back());
    free_.pop_back();
  }
  r.last_use = ++tick_;
  r.uses = 1;
  return &r;
}

void RowCache::MarkDirty(uint64_t key, Row* row) {
  if (row->dirty_gen == 0) ++dirty_count_;
  row->dirty_gen = ++gen_;
  if (!row->listed) {
    row->listed = true;
    dirty_.push_back(key);
  }
}

std::vector<std::pair<uint64_t, uint64_t>> RowCache::TakeDirty() {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(dirty_.size());
  for (uint64_t key : dirty_) {
    Row& r = rows_.at(key);
    r.listed = false;
    out.emplace_back(key, r.dirty_gen);
  }
  dirty_.clear();
  return out;
}

void RowCache::MarkClean(uint64_t key, uint64_t gen) {
  auto it = rows_.find(key);
  if (it == rows_.end() || it->second.dirty_gen != gen) return;
  it->second.dirty_gen = 0;
  --dirty_count_;
}

void RowCache::Relist(uint64_t key) {
  auto it = rows_.find(key);
  if (it == rows_.end() || it->second.dirty_gen == 0 || it->second.listed) return;
  it->second.listed = true;
  dirty_.push_back(key);
}

void RowCache::MaybeEvict() {
  const uint64_t slack = std::max<uint64_t>(64, capacity_ / 8);
  if (rows_.size() <= capacity_ + (capacity_ == 0 ? 0 : slack)) return;
  if (rows_.size() == dirty_count_) return;
  std::vector<std::pair<uint64_t, uint64_t>> clean;  // (score, key)
  clean.reserve(rows_.size() - dirty_count_);
  for (auto& [key, r] : rows_) {
    if (r.dirty_gen != 0) continue;
    clean.emplace_back(policy_ == config::CachePolicy::kLfu ? r.uses : r.last_use, key);
    r.uses /= 2;
  }
  size_t excess = rows_.size() - std::min<uint64_t>(rows_.size(), capacity_);
  size_t evict = std::min(excess, clean.size());
  if (evict < clean.size()) {
    std::nth_element(clean.begin(), clean.begin() + evict, clean.end());
  }
  for (size_t i = 0; i < evict; ++i) {
    auto it = rows_.find(clean[i].second);
    free_.push_back(std::move(it->second.record));  // reused by the next Inserts
    rows_.erase(it);
  }
  if (free_.size() > kMaxFree) free_.resize(kMaxFree);
}

size_t RowCache::Erase(const uint64_t* keys, size_t n) {
  std::unordered_set<uint64_t> listed;
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = rows_.find(keys[i]);
    if (it == rows_.end()) continue;
    if (it->second.dirty_gen != 0) --dirty_count_;
    if (it->second.listed) listed.insert(keys[i]);
    if (free_.size() < kMaxFree) free_.push_back(std::move(it->second.record));
    rows_.erase(it);
    ++erased;
  }
  if (!listed.empty()) {
    dirty_.erase(std::remove_if(dirty_.begin(), dirty_.end(), [&](uint64_t k) { return listed.count(k) > 0; }),
                 dirty_.end());
  }
  return erased;
}

}  // namespace osprey::server::redis_store
