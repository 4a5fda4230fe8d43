#include "server/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/placement.h"
#include "server/row_init.h"

namespace osprey::server {
namespace {

// Two-stage prefetch: the hash slot of key i+kSlotDistance, then the row of key i+kRowDistance
// (whose slot was fetched kSlotDistance-kRowDistance iterations earlier).
constexpr size_t kSlotDistance = 16;
constexpr size_t kRowDistance = 8;

}  // namespace

SparseTable::SparseTable(uint32_t table_id, int dim, const config::InitConfig& init,
                         StateLayout state)
    : table_id_(table_id),
      dim_(dim),
      row_floats_(dim + state.floats(dim)),
      init_(init),
      state_(std::move(state)) {
  slots_.assign(1024, Slot{0, kEmpty});
  mask_ = slots_.size() - 1;
}

namespace {
StateLayout LayoutOf(std::unique_ptr<Optimizer> optimizer) {
  std::shared_ptr<const Optimizer> opt(std::move(optimizer));
  return StateLayout{[opt](size_t w) { return opt->state_floats(w); },
                     [opt](float* s, size_t w) { opt->InitState(s, w); }};
}
}  // namespace

SparseTable::SparseTable(uint32_t table_id, int dim, const config::InitConfig& init,
                         std::unique_ptr<Optimizer> optimizer)
    : SparseTable(table_id, dim, init, LayoutOf(std::move(optimizer))) {}

uint64_t SparseTable::Hash(uint64_t key) { return Mix64(key); }

void SparseTable::InitialWeights(uint64_t key, float* w) const {
  InitialRowWeights(init_, table_id_, key, dim_, w);
}

uint32_t SparseTable::NewRow(uint64_t key, bool init) {
  uint32_t row;
  if (!free_rows_.empty()) {  // a deleted row's storage (EraseRows), history cleared
    row = free_rows_.back();
    free_rows_.pop_back();
    std::memset(HistoryPtr(row), 0, kRowHistory * sizeof(uint64_t));
  } else {
    row = static_cast<uint32_t>(next_row_++);
    if (row % kRowsPerBlock == 0 && row / kRowsPerBlock == blocks_.size()) {
      const size_t row_bytes = kRowsPerBlock * row_floats_ * sizeof(float);
      const size_t hist_bytes = kRowsPerBlock * kRowHistory * sizeof(uint64_t);
      blocks_.emplace_back(static_cast<float*>(HugeAlloc(row_bytes)), HugeDeleter{row_bytes});
      history_.emplace_back(static_cast<uint64_t*>(HugeAlloc(hist_bytes)), HugeDeleter{hist_bytes});
      std::memset(history_.back().get(), 0, hist_bytes);
    }
  }
  if (init) {
    float* p = RowPtr(row);
    InitialWeights(key, p);
    state_.init(p + dim_, dim_);
  }
  ++num_rows_;
  return row;
}

bool SparseTable::Erase(uint64_t key) {
  size_t i = SlotOf(key);
  while (true) {
    if (slots_[i].row == kEmpty) return false;
    if (slots_[i].key == key) break;
    i = (i + 1) & mask_;
  }
  free_rows_.push_back(slots_[i].row);
  --num_rows_;
  // Backward-shift deletion (linear probing keeps no tombstones): move later entries of the
  // probe run into the hole unless their home slot lies cyclically in (hole, j].
  size_t j = i;
  while (true) {
    j = (j + 1) & mask_;
    if (slots_[j].row == kEmpty) break;
    const size_t home = SlotOf(slots_[j].key);
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = Slot{0, kEmpty};
  return true;
}

void SparseTable::Grow() {
  std::vector<Slot, HugePageAllocator<Slot>> old;
  old.swap(slots_);
  slots_.assign(old.size() * 2, Slot{0, kEmpty});
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.row == kEmpty) continue;
    size_t i = SlotOf(s.key);
    while (slots_[i].row != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void SparseTable::Reserve(uint64_t rows) {
  while (rows * 10 > slots_.size() * 7) Grow();
}

uint32_t SparseTable::FindOrCreateIndex(uint64_t key, bool init) {
  size_t i = SlotOf(key);
  while (true) {
    Slot& s = slots_[i];
    if (s.row == kEmpty) break;
    if (s.key == key) return s.row;
    i = (i + 1) & mask_;
  }
  if ((num_rows_ + 1) * 10 > slots_.size() * 7) {
    Grow();
    return FindOrCreateIndex(key, init);
  }
  uint32_t row = NewRow(key, init);
  slots_[i] = Slot{key, row};
  return row;
}

float* SparseTable::FindOrCreate(uint64_t key) { return RowPtr(FindOrCreateIndex(key)); }

uint32_t SparseTable::FindIndex(uint64_t key) const {
  size_t i = SlotOf(key);
  while (true) {
    const Slot& s = slots_[i];
    if (s.row == kEmpty || s.key == key) return s.row;
    i = (i + 1) & mask_;
  }
}

float* SparseTable::Find(uint64_t key) const {
  uint32_t row = FindIndex(key);
  return row == kEmpty ? nullptr : RowPtr(row);
}

void SparseTable::Pull(const uint64_t* keys, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotDistance < n) Prefetch(keys[i + kSlotDistance]);
    if (i + kRowDistance < n) PrefetchRow(keys[i + kRowDistance]);
    std::memcpy(out + i * dim_, FindOrCreate(keys[i]), sizeof(float) * dim_);
  }
}

Status SparseTable::Visit(const uint64_t* keys, size_t n, RowAccess access,
                          const RowBlockFn& fn) {
  const bool create = access != RowAccess::kRead;
  float* rows[kRowBlockRows];
  uint64_t* hist[kRowBlockRows];
  for (size_t b = 0; b < n; b += kRowBlockRows) {
    const size_t m = std::min(kRowBlockRows, n - b);
    for (size_t j = 0; j < m; ++j) {
      const size_t i = b + j;
      if (i + kSlotDistance < n) Prefetch(keys[i + kSlotDistance]);
      if (i + kRowDistance < n) PrefetchRow(keys[i + kRowDistance]);
      const uint32_t row = create ? FindOrCreateIndex(keys[i]) : FindIndex(keys[i]);
      rows[j] = row == kEmpty ? nullptr : RowPtr(row);
      hist[j] = row == kEmpty ? nullptr : HistoryPtr(row);
    }
    OSPREY_RETURN_IF_ERROR(fn(RowBlock{b, m, rows, hist}));
  }
  return Status::OK();
}

void SparseTable::FindOrCreateIds(const uint64_t* keys, size_t n, uint32_t* ids) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotDistance < n) Prefetch(keys[i + kSlotDistance]);
    ids[i] = FindOrCreateIndex(keys[i]);
  }
}

void SparseTable::FindIds(const uint64_t* keys, size_t n, uint32_t* ids) const {
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotDistance < n) Prefetch(keys[i + kSlotDistance]);
    ids[i] = FindIndex(keys[i]);
  }
}

Status SparseTable::VisitIds(const uint32_t* ids, size_t n, const RowBlockFn& fn) {
  float* rows[kRowBlockRows];
  uint64_t* hist[kRowBlockRows];
  for (size_t b = 0; b < n; b += kRowBlockRows) {
    const size_t m = std::min(kRowBlockRows, n - b);
    for (size_t j = 0; j < m; ++j) {
      rows[j] = RowPtr(ids[b + j]);
      hist[j] = HistoryPtr(ids[b + j]);
    }
    OSPREY_RETURN_IF_ERROR(fn(RowBlock{b, m, rows, hist}));
  }
  return Status::OK();
}

}  // namespace osprey::server
