// TableShard's merge windows: a push merged into its window (by row id on a store with row ids, by
// key otherwise) and a window's optimizer step applied once it closes (see table_shard.h).
#include <algorithm>
#include <string>

#include "server/table_shard.h"

namespace osprey::server {

TableShard::Window& TableShard::WindowFor(const proto::Header& h, int64_t now_us) {
  const int64_t clock = policy_->WindowClock(h.clock(), done_);
  auto [it, inserted] = windows_.try_emplace(clock);
  Window& w = it->second;
  if (inserted && !spare_.empty()) {  // reuse a closed window's buffer memory
    std::swap(w.buffer, spare_.back());
    spare_.pop_back();
  }
  if (inserted && !spare_rows_.empty()) {
    std::swap(w.rows, spare_rows_.back());
    spare_rows_.pop_back();
  }
  if (w.pushes == 0) w.first_us = now_us;
  return w;
}

void TableShard::MergeKeys(Window* w, const uint64_t* keys, size_t n, const float* g, bool by_ref,
                           bool any_bad, bool per_row) {
  constexpr size_t kPrefetchAhead = 16;
  for (size_t i = 0, off = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) w->buffer.Prefetch(keys[i + kPrefetchAhead]);
    size_t width = Width(keys[i]);
    if (any_bad && !AllFinite(g + off, width)) {
      counters_->rows_skipped.fetch_add(1, std::memory_order_relaxed);
    } else {
      const float lw = per_row ? static_cast<float>(LrWeight(row_s_[i])) : 1.0f;
      const float st = per_row ? static_cast<float>(row_s_[i]) : 0.0f;
      if (by_ref) {
        w->buffer.AddRef(keys[i], g + off, width, lw, st);
      } else {
        w->buffer.Add(keys[i], g + off, width, lw, st);
      }
    }
    off += width;
  }
}

Status TableShard::MergeRows(Window* w, const uint64_t* keys, size_t n, const float* g,
                             bool by_ref, bool any_bad, bool per_row, bool have_ids) {
  const size_t dim = spec_.dim();
  if (!have_ids) {
    ids_.resize(n);
    if (!any_bad) OSPREY_RETURN_IF_ERROR(store_->FindOrCreateRowIds(id_, keys, n, ids_.data()));
  }
  for (size_t i = 0; i < n; ++i) {
    const float* row_g = g + i * dim;
    if (any_bad) {  // skip_row: left-out rows are not even created
      if (!AllFinite(row_g, dim)) {
        counters_->rows_skipped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      OSPREY_RETURN_IF_ERROR(store_->FindOrCreateRowIds(id_, keys + i, 1, &ids_[i]));
    }
    const float lw = per_row ? static_cast<float>(LrWeight(row_s_[i])) : 1.0f;
    const float st = per_row ? static_cast<float>(row_s_[i]) : 0.0f;
    if (by_ref) {
      w->rows.AddRef(ids_[i], row_g, lw, st);
    } else {
      w->rows.Add(ids_[i], row_g, dim, lw, st);
    }
  }
  return Status::OK();
}

Status TableShard::ApplyMerged(Window* w) {
  // The mean is applied as the optimizer reads the gradient (ApplyOptions::grad_scale, same
  // bits as scaling the buffer first), saving a pass over the merged gradients.
  const float mean = rules_.reduce_mean && w->pushes > 1 ? 1.0f / w->pushes : 1.0f;
  // Sparse windows with a stale push: per-row options (only when a policy reads staleness).
  const bool policies = rules_.lr_inverse || (rules_.momentum_decay && rules_.momentum > 0);
  const bool row_policies = sparse() && w->any_stale && policies;
  ApplyOptions shared = Options(w->pushes, w->lr_weight_sum, w->staleness_sum);
  shared.grad_scale = mean;
  Status s;
  if (row_ids_) {
    RowMergeBuffer& b = w->rows;
    b.Merge(spec_.dim());
    RowUpdate u(shared);
    u.row_options = row_policies ? RowOptions(b.stats(), b.num_rows(), mean) : nullptr;
    u.version = version_ + 1;
    s = updater_->ApplyRowsById(store_, id_, b.rows(), b.num_rows(), spec_.dim(), b.Gradients(), u,
                               apply_pool_);
    b.Clear();
  } else {
    MergeBuffer& b = w->buffer;
    s = StoreApply(b.keys(), b.num_keys(), b.Gradients(), shared,
                   row_policies ? RowOptions(b.stats(), b.num_keys(), mean) : nullptr);
    if (s.ok() && lifecycle_) s = lifecycle_->Applied(b.keys(), b.num_keys(), version_ + 1, now_us_);
  }
  if (s.ok() && !w->marks.empty()) store_->StagePushes(id_, w->marks.data(), w->marks.size());
  w->marks.clear();
  return s.ok() ? store_->Sync(id_) : s;
}

Status TableShard::ApplyWindow(Window* w, int64_t clock) {
  // Only leading parts so far: their rows wait for a push to apply with (their own last part's).
  if (w->pushes == 0) return Status::OK();
  Status s = ApplyMerged(w);
  const int pushes = w->pushes;
  w->buffer.Clear();
  w->rows.Clear();
  w->pushes = 0;
  w->leading_parts = 0;
  w->lr_weight_sum = 0;
  w->staleness_sum = 0;
  w->any_stale = false;
  if (!s.ok()) return Fail(s, clock, pushes);
  ++version_;
  counters_->pushes_applied.fetch_add(pushes, std::memory_order_relaxed);
  counters_->windows_applied.fetch_add(1, std::memory_order_relaxed);
  for (const PendingReply& a : w->acks) {
    proto::Header reply = ReplyHeader(a.request);
    reply.set_version(version_);
    reply.set_num_keys(0);
    reply.set_value_bytes(0);
    replier_->Reply(a.peer, reply, Buffer());
    ReleaseAck(a);
  }
  w->acks.clear();
  w->marks.clear();
  return Status::OK();
}

}  // namespace osprey::server
