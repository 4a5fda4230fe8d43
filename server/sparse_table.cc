#include "server/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/placement.h"

namespace osprey::server {
namespace {

// Two-stage prefetch: the hash slot of key i+kSlotDistance, then the row of key i+kRowDistance
// (whose slot was fetched kSlotDistance-kRowDistance iterations earlier).
constexpr size_t kSlotDistance = 16;
constexpr size_t kRowDistance = 8;

// Uniform in [0, 1) from the top 24 bits of a 64-bit hash.
inline float UnitFloat(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

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
  uint64_t base = Mix64(init_.seed ^ Mix64(key ^ (uint64_t{table_id_} << 56)));
  if (init_.type == config::InitType::kZeros) {
    std::memset(w, 0, sizeof(float) * dim_);
  } else if (init_.type == config::InitType::kNormal) {
    for (int i = 0; i < dim_; ++i) {
      // Box-Muller from two independent hashes of (row, i).
      float u1 = UnitFloat(Mix64(base + 2 * i)) + 1e-7f;
      float u2 = UnitFloat(Mix64(base + 2 * i + 1));
      w[i] = init_.scale * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
  } else {
    for (int i = 0; i < dim_; ++i) w[i] = init_.scale * (2.0f * UnitFloat(Mix64(base + i)) - 1.0f);
  }
}

uint32_t SparseTable::NewRow(uint64_t key) {
  uint32_t row = static_cast<uint32_t>(num_rows_);
  if (row % kRowsPerBlock == 0 && row / kRowsPerBlock == blocks_.size()) {
    const size_t row_bytes = kRowsPerBlock * row_floats_ * sizeof(float);
    const size_t hist_bytes = kRowsPerBlock * kRowHistory * sizeof(uint64_t);
    blocks_.emplace_back(static_cast<float*>(HugeAlloc(row_bytes)), HugeDeleter{row_bytes});
    history_.emplace_back(static_cast<uint64_t*>(HugeAlloc(hist_bytes)), HugeDeleter{hist_bytes});
    std::memset(history_.back().get(), 0, hist_bytes);
  }
  float* p = RowPtr(row);
  InitialWeights(key, p);
  state_.init(p + dim_, dim_);
  ++num_rows_;
  return row;
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

uint32_t SparseTable::FindOrCreateIndex(uint64_t key) {
  size_t i = SlotOf(key);
  while (true) {
    Slot& s = slots_[i];
    if (s.row == kEmpty) break;
    if (s.key == key) return s.row;
    i = (i + 1) & mask_;
  }
  if ((num_rows_ + 1) * 10 > slots_.size() * 7) {
    Grow();
    return FindOrCreateIndex(key);
  }
  uint32_t row = NewRow(key);
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
      if (create && i + kRowDistance < n) PrefetchRow(keys[i + kRowDistance]);
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
