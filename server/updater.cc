#include "server/updater.h"

#include <algorithm>

namespace osprey::server {
namespace {

constexpr size_t kMinFloatsPerRange = size_t{1} << 18;

// Records that a row was updated at table version `version` (0: versions are not tracked).
inline void RecordUpdate(uint64_t* h, uint64_t version) {
  if (version == 0) return;
  for (int k = kRowHistory - 1; k > 0; --k) h[k] = h[k - 1];
  h[0] = version;
}

// The block's step: gradient of block row j at g[begin + j] (gp) or g + (begin + j) * dim.
Status StepBlock(const Optimizer& opt, const RowBlock& b, size_t dim, const float* g,
                 const float* const* gp, const RowUpdate& u) {
  for (size_t j = 0; j < b.n; ++j) RecordUpdate(b.history[j], u.version);
  const ApplyOptions* per_row = u.row_options ? u.row_options + b.begin : nullptr;
  if (gp != nullptr) {
    opt.ApplyRows(b.rows, gp + b.begin, b.n, dim, u.options, per_row);
  } else {
    opt.ApplyRows(b.rows, g + b.begin * dim, b.n, dim, u.options, per_row);
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<Updater>> Updater::Make(const OptimizerConfig& config) {
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Make(config));
  return std::unique_ptr<Updater>(new Updater(std::shared_ptr<const Optimizer>(std::move(opt))));
}

StateLayout Updater::state_layout() const {
  std::shared_ptr<const Optimizer> opt = optimizer_;
  StateLayout l;
  l.floats = [opt](size_t width) { return opt->state_floats(width); };
  l.init = [opt](float* state, size_t width) { opt->InitState(state, width); };
  return l;
}

Status Updater::ApplyRows(Store* store, uint32_t table, const uint64_t* keys, size_t n,
                          size_t dim, const float* grads, const RowUpdate& update) const {
  return store->VisitRows(table, keys, n, RowAccess::kUpdate, [&](const RowBlock& b) {
    return StepBlock(*optimizer_, b, dim, grads, nullptr, update);
  });
}

Status Updater::ApplyRows(Store* store, uint32_t table, const uint64_t* keys, size_t n,
                          size_t dim, const float* const* gp, const RowUpdate& update) const {
  return store->VisitRows(table, keys, n, RowAccess::kUpdate, [&](const RowBlock& b) {
    return StepBlock(*optimizer_, b, dim, nullptr, gp, update);
  });
}

Status Updater::ApplyRowsById(Store* store, uint32_t table, const uint32_t* ids, size_t n,
                              size_t dim, const float* const* gp, const RowUpdate& update,
                              ApplyPool* pool) const {
  auto range = [&](size_t begin, size_t end) {
    RowUpdate u = update;
    if (u.row_options != nullptr) u.row_options += begin;
    return store->VisitRowsById(table, ids + begin, end - begin, [&](const RowBlock& b) {
      return StepBlock(*optimizer_, b, dim, nullptr, gp + begin, u);
    });
  };
  if (pool == nullptr || pool->threads() == 1 || !store->concurrent_row_visits(table)) {
    return range(0, n);
  }
  // A range is worth a thread's wake-up (tens of us) from about 256k floats of rows on.
  return pool->Run(n, ApplyPool::RowGrain(kMinFloatsPerRange, dim), range);
}

Status Updater::ApplyChunks(Store* store, uint32_t table, const uint64_t* chunks, size_t n,
                            const float* grads, const ApplyOptions& options) const {
  return store->VisitChunks(table, chunks, n, [&](const ChunkBlock& b) {
    const float* g = grads;
    for (size_t i = 0; i < b.n; ++i) {
      optimizer_->Apply(b.weights[i], b.state[i], g, b.floats[i], options);
      g += b.floats[i];
    }
    return Status::OK();
  });
}

Status Updater::ApplyChunks(Store* store, uint32_t table, const uint64_t* chunks, size_t n,
                            const float* const* gp, const ApplyOptions& options) const {
  return store->VisitChunks(table, chunks, n, [&](const ChunkBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      optimizer_->Apply(b.weights[i], b.state[i], gp[i], b.floats[i], options);
    }
    return Status::OK();
  });
}

}  // namespace osprey::server
