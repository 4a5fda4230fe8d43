// TableShard's staleness policies: the options of a step from its pushes' staleness, per-row
// staleness and drop_above, DC-ASGD compensation (see table_shard.h, "Staleness").
#include <algorithm>

#include "server/table_shard.h"

namespace osprey::server {

ApplyOptions TableShard::Options(int pushes, double lr_weight_sum, double staleness_sum) const {
  ApplyOptions o;
  if (pushes <= 0) return o;
  if (rules_.lr_inverse) o.lr_scale = static_cast<float>(lr_weight_sum / pushes);
  if (rules_.momentum_decay && rules_.momentum > 0) {
    double s_mean = staleness_sum / pushes;
    double mu_eff = std::max(0.0, rules_.momentum - s_mean / (s_mean + 1.0));
    o.momentum_scale = static_cast<float>(mu_eff / rules_.momentum);
  }
  return o;
}

Status TableShard::ReadPushRows(const proto::Header& h, const uint64_t* keys, size_t n,
                                bool weights, bool per_row, uint64_t s, bool by_id) {
  const size_t dim = spec_.dim();
  if (weights) dc_w_.resize(n * dim);
  if (per_row) row_s_.resize(n);
  const uint64_t since = h.version();
  auto read = [&](const RowBlock& b) {
    constexpr size_t kAhead = 8;  // by id the rows come unprefetched: ask ahead for them
    for (size_t j = 0; j < b.n; ++j) {
      if (by_id && j + kAhead < b.n) {
        if (per_row) __builtin_prefetch(b.history[j + kAhead]);
        if (weights) __builtin_prefetch(b.rows[j + kAhead]);
      }
      if (weights) std::copy(b.rows[j], b.rows[j] + dim, dc_w_.data() + (b.begin + j) * dim);
      if (!per_row) continue;
      row_s_[b.begin + j] = Updater::RowStaleness(b.history[j], since, s);
    }
    return Status::OK();
  };
  if (by_id) {
    // The rows are created here, before the merge or apply that would create them anyway: a new
    // row has no history (staleness 0), as a missing one would have. A visit by id counts as an
    // update (store.h): on the redis store a row drop_above then leaves out is written back once
    // unchanged.
    ids_.resize(n);
    OSPREY_RETURN_IF_ERROR(store_->FindOrCreateRowIds(id_, keys, n, ids_.data()));
    return store_->VisitRowsById(id_, ids_.data(), n, read);
  }
  // DC-ASGD reads (and, as a pull would, creates) the rows; staleness alone creates nothing.
  const RowAccess access = weights ? RowAccess::kReadOrCreate : RowAccess::kRead;
  return store_->VisitRows(id_, keys, n, access, read);
}

Status TableShard::Compensate(const proto::Header& h, const uint64_t* keys, size_t n,
                              const float** g) {
  size_t floats = 0;
  for (size_t i = 0; i < n; ++i) floats += Width(keys[i]);
  dc_g_.resize(floats);
  if (!sparse()) {
    dc_w_.resize(floats);
    OSPREY_RETURN_IF_ERROR(store_->PullChunks(id_, keys, n, dc_w_.data()));
  }
  const DelayCompensation::Counts before = dc_->counts();
  dc_->Compensate(h.worker_rank(), keys, n, *g, dc_w_.data(), dc_g_.data());
  counters_->dc_compensated.fetch_add(dc_->counts().compensated - before.compensated,
                                      std::memory_order_relaxed);
  counters_->dc_uncompensated.fetch_add(dc_->counts().uncompensated - before.uncompensated,
                                        std::memory_order_relaxed);
  *g = dc_g_.data();
  return Status::OK();
}

void TableShard::RowPolicies(const uint64_t** keys, size_t* n, const float** g, bool by_id) {
  uint64_t hist[ServerCounters::kStalenessBuckets] = {};
  size_t dropped = 0;
  for (size_t i = 0; i < *n; ++i) {
    ++hist[ServerCounters::StalenessBucket(row_s_[i])];
    if (rules_.drop_above >= 0 && row_s_[i] > static_cast<uint64_t>(rules_.drop_above)) ++dropped;
  }
  for (int b = 0; b < ServerCounters::kStalenessBuckets; ++b) {
    if (hist[b] > 0) counters_->staleness[b].fetch_add(hist[b], std::memory_order_relaxed);
  }
  if (dropped == 0) return;
  counters_->rows_dropped.fetch_add(dropped, std::memory_order_relaxed);
  const size_t dim = spec_.dim();
  kept_keys_.clear();
  kept_g_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < *n; ++i) {
    if (row_s_[i] > static_cast<uint64_t>(rules_.drop_above)) continue;
    kept_keys_.push_back((*keys)[i]);
    kept_g_.insert(kept_g_.end(), *g + i * dim, *g + (i + 1) * dim);
    if (by_id) ids_[kept] = ids_[i];
    row_s_[kept++] = row_s_[i];
  }
  row_s_.resize(kept);
  if (by_id) ids_.resize(kept);
  *keys = kept_keys_.data();
  *g = kept_g_.data();
  *n = kept;
}

const ApplyOptions* TableShard::RowOptions(const MergeBuffer::EntryStats* st, size_t n,
                                           float grad_scale) {
  row_opts_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    row_opts_[i] = Options(static_cast<int>(st[i].adds), st[i].lr_weight_sum, st[i].staleness_sum);
    row_opts_[i].grad_scale = grad_scale;
  }
  return row_opts_.data();
}

}  // namespace osprey::server
