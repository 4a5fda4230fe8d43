#include "server/table_shard.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace osprey::server {
namespace {

enum Mode { kBsp = 0, kSsp = 1, kAsync = 2 };

int ParseMode(config::ConsistencyMode m) { return m == config::ConsistencyMode::kBsp ? kBsp : m == config::ConsistencyMode::kSsp ? kSsp : kAsync; }

int StalenessBucket(uint64_t s) {
  if (s == 0) return 0;
  int b = 64 - __builtin_clzll(s);  // s in [2^(b-1), 2^b)
  return std::min(b, ServerCounters::kStalenessBuckets - 1);
}

}  // namespace

TableShard::TableShard(uint32_t id, const proto::TableSpec& spec, const config::TableConfig& config,
                       uint64_t num_chunks, Store* store, ServerCounters* counters)
    : id_(id),
      spec_(spec),
      cc_(config.consistency),
      momentum_(config.optimizer.momentum),
      num_chunks_(num_chunks),
      mode_(ParseMode(config.consistency.mode)),
      store_(store),
      counters_(counters),
      row_ids_(spec.type() == proto::TABLE_SPARSE && store->has_row_ids(id)) {
  if (cc_.dc_lambda > 0) {
    dc_ = std::make_unique<DelayCompensation>(cc_.dc_lambda, sparse(),
                                              [this](uint64_t key) { return Width(key); });
  }
}

size_t TableShard::Width(uint64_t key) const {
  return sparse() ? spec_.dim() : store_->ChunkFloats(id_, key);
}

uint64_t TableShard::Staleness(const proto::Header& h) const {
  return version_ > h.version() ? version_ - h.version() : 0;
}

ApplyOptions TableShard::Options(int pushes, double lr_weight_sum, double staleness_sum) const {
  ApplyOptions o;
  if (pushes <= 0) return o;
  if (cc_.lr_scale == config::LrScale::kInverse) o.lr_scale = static_cast<float>(lr_weight_sum / pushes);
  if (cc_.momentum_decay && momentum_ > 0) {
    double s_mean = staleness_sum / pushes;
    double mu_eff = std::max(0.0, momentum_ - s_mean / (s_mean + 1.0));
    o.momentum_scale = static_cast<float>(mu_eff / momentum_);
  }
  return o;
}

Status TableShard::CheckFinite(const uint64_t* keys, size_t n, const float* g,
                               bool* any_bad) const {
  size_t total = 0;
  if (sparse()) {
    total = n * spec_.dim();
  } else {
    for (size_t i = 0; i < n; ++i) total += Width(keys[i]);
  }
  *any_bad = !AllFinite(g, total);
  if (!*any_bad || cc_.non_finite == config::NonFinite::kSkipRow) return Status::OK();
  for (size_t i = 0, off = 0; i < n; ++i) {
    size_t w = Width(keys[i]);
    if (!AllFinite(g + off, w)) {
      return InvalidArgument("table '" + spec_.name() + "': non-finite gradient at " +
                             (sparse() ? "key " : "chunk ") + std::to_string(keys[i]) +
                             "; push rejected, nothing applied");
    }
    off += w;
  }
  return Status::OK();
}

Status TableShard::StoreApply(const uint64_t* keys, size_t n, const float* g,
                              const ApplyOptions& o, const ApplyOptions* row_options) {
  if (!sparse()) return store_->PushChunks(id_, keys, n, g, o);
  RowUpdate u(o);
  u.row_options = row_options;
  u.version = version_ + 1;  // the version this step creates: the rows' latest update
  return store_->PushRows(id_, keys, n, g, u);
}

Status TableShard::StoreApply(const uint64_t* keys, size_t n, const float* const* g,
                              const ApplyOptions& o, const ApplyOptions* row_options) {
  if (!sparse()) return store_->PushChunks(id_, keys, n, g, o);
  RowUpdate u(o);
  u.row_options = row_options;
  u.version = version_ + 1;
  return store_->PushRows(id_, keys, n, g, u);
}

Status TableShard::RowPolicies(const proto::Header& h, uint64_t s, const uint64_t** keys,
                               size_t* n, const float** g) {
  row_s_.resize(*n);
  OSPREY_RETURN_IF_ERROR(store_->RowStaleness(id_, *keys, *n, h.version(), s, row_s_.data()));
  uint64_t hist[ServerCounters::kStalenessBuckets] = {};
  size_t dropped = 0;
  for (size_t i = 0; i < *n; ++i) {
    ++hist[StalenessBucket(row_s_[i])];
    if (cc_.drop_above >= 0 && row_s_[i] > static_cast<uint64_t>(cc_.drop_above)) ++dropped;
  }
  for (int b = 0; b < ServerCounters::kStalenessBuckets; ++b) {
    if (hist[b] > 0) counters_->staleness[b].fetch_add(hist[b], std::memory_order_relaxed);
  }
  if (dropped == 0) return Status::OK();
  counters_->rows_dropped.fetch_add(dropped, std::memory_order_relaxed);
  const size_t dim = spec_.dim();
  kept_keys_.clear();
  kept_g_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < *n; ++i) {
    if (row_s_[i] > static_cast<uint64_t>(cc_.drop_above)) continue;
    kept_keys_.push_back((*keys)[i]);
    kept_g_.insert(kept_g_.end(), *g + i * dim, *g + (i + 1) * dim);
    row_s_[kept++] = row_s_[i];
  }
  row_s_.resize(kept);
  *keys = kept_keys_.data();
  *g = kept_g_.data();
  *n = kept;
  return Status::OK();
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

void TableShard::RecordPull(const proto::Header& h, const uint64_t* keys, size_t n,
                            const float* values) {
  if (dc_) dc_->RecordPull(h.worker_rank(), keys, n, values);
}

Status TableShard::Push(const proto::Header& h, const uint64_t* keys, size_t n, const float* g,
                        int64_t now_us) {
  return PushImpl(h, keys, n, g, nullptr, now_us);
}

Status TableShard::Push(const proto::Header& h, const uint64_t* keys, size_t n,
                        const Buffer& values, int64_t now_us) {
  return PushImpl(h, keys, n, values.as<float>(), &values, now_us);
}

Status TableShard::PushImpl(const proto::Header& h, const uint64_t* keys, size_t n,
                            const float* g, const Buffer* values, int64_t now_us) {
  bool any_bad = false;
  OSPREY_RETURN_IF_ERROR(CheckFinite(keys, n, g, &any_bad));
  if (mode_ != kAsync) Progress(h.worker_rank(), h.clock() + 1);
  if (dc_) {  // DC-ASGD: compensate against the weights now, before anything else uses g
    size_t floats = 0;
    for (size_t i = 0; i < n; ++i) floats += Width(keys[i]);
    dc_w_.resize(floats);
    dc_g_.resize(floats);
    OSPREY_RETURN_IF_ERROR(sparse() ? store_->PullRows(id_, keys, n, dc_w_.data())
                                    : store_->PullChunks(id_, keys, n, dc_w_.data()));
    const DelayCompensation::Counts before = dc_->counts();
    dc_->Compensate(h.worker_rank(), keys, n, g, dc_w_.data(), dc_g_.data());
    counters_->dc_compensated.fetch_add(dc_->counts().compensated - before.compensated,
                                        std::memory_order_relaxed);
    counters_->dc_uncompensated.fetch_add(dc_->counts().uncompensated - before.uncompensated,
                                          std::memory_order_relaxed);
    g = dc_g_.data();
  }
  const uint64_t s = Staleness(h);
  // Sparse pushes based on an old version get per-row staleness; with s = 0 every row has 0.
  const bool per_row = sparse() && s > 0;
  if (per_row) {
    OSPREY_RETURN_IF_ERROR(RowPolicies(h, s, &keys, &n, &g));
    if (n == 0) {
      counters_->pushes_dropped.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  } else {
    counters_->staleness[StalenessBucket(s)].fetch_add(sparse() ? n : 1,
                                                       std::memory_order_relaxed);
    if (cc_.drop_above >= 0 && s > static_cast<uint64_t>(cc_.drop_above)) {
      counters_->pushes_dropped.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  auto weight = [](uint64_t st) { return 1.0 / std::max<double>(1.0, static_cast<double>(st)); };
  const double lr_weight = weight(s);
  if (mode_ != kBsp && cc_.merge_max_pushes == 1 && !any_bad) {
    // A window of one push: apply in place, no merge buffer.
    const ApplyOptions* row_options = nullptr;
    if (per_row) {
      row_opts_.resize(n);
      for (size_t i = 0; i < n; ++i) {
        row_opts_[i] = Options(1, weight(row_s_[i]), static_cast<double>(row_s_[i]));
      }
      row_options = row_opts_.data();
    }
    OSPREY_RETURN_IF_ERROR(
        StoreApply(keys, n, g, Options(1, lr_weight, static_cast<double>(s)), row_options));
    ++version_;
    counters_->pushes_applied.fetch_add(1, std::memory_order_relaxed);
    counters_->windows_applied.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  int64_t clock = 0;
  if (mode_ == kBsp) clock = std::max(h.clock(), done_);
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
  ++w.pushes;
  w.lr_weight_sum += lr_weight;
  w.staleness_sum += static_cast<double>(s);
  w.any_stale = w.any_stale || per_row;
  // Rows are merged by reference into the push's own values frame when g still is that frame
  // (not a DC-ASGD or drop_above rewrite, which live in scratch reused by the next push): the
  // window holds the frame until it closes, and only keys pushed again are copied.
  const bool by_ref = values != nullptr && g == values->as<float>();
  if (by_ref && row_ids_) w.rows.Hold(*values);
  if (by_ref && !row_ids_) w.buffer.Hold(*values);
  if (row_ids_) return MergeRows(&w, keys, n, g, by_ref, any_bad, per_row);
  constexpr size_t kPrefetchAhead = 16;
  for (size_t i = 0, off = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) w.buffer.Prefetch(keys[i + kPrefetchAhead]);
    size_t width = Width(keys[i]);
    if (any_bad && !AllFinite(g + off, width)) {
      counters_->rows_skipped.fetch_add(1, std::memory_order_relaxed);
    } else {
      const float lw = per_row ? static_cast<float>(weight(row_s_[i])) : 1.0f;
      const float st = per_row ? static_cast<float>(row_s_[i]) : 0.0f;
      if (by_ref) {
        w.buffer.AddRef(keys[i], g + off, width, lw, st);
      } else {
        w.buffer.Add(keys[i], g + off, width, lw, st);
      }
    }
    off += width;
  }
  return Status::OK();
}

Status TableShard::MergeRows(Window* w, const uint64_t* keys, size_t n, const float* g,
                             bool by_ref, bool any_bad, bool per_row) {
  auto weight = [](uint64_t st) { return 1.0 / std::max<double>(1.0, static_cast<double>(st)); };
  const size_t dim = spec_.dim();
  ids_.resize(n);
  if (!any_bad) OSPREY_RETURN_IF_ERROR(store_->FindOrCreateRowIds(id_, keys, n, ids_.data()));
  for (size_t i = 0; i < n; ++i) {
    const float* row_g = g + i * dim;
    if (any_bad) {  // skip_row: left-out rows are not even created
      if (!AllFinite(row_g, dim)) {
        counters_->rows_skipped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      OSPREY_RETURN_IF_ERROR(store_->FindOrCreateRowIds(id_, keys + i, 1, &ids_[i]));
    }
    const float lw = per_row ? static_cast<float>(weight(row_s_[i])) : 1.0f;
    const float st = per_row ? static_cast<float>(row_s_[i]) : 0.0f;
    if (by_ref) {
      w->rows.AddRef(ids_[i], row_g, lw, st);
    } else {
      w->rows.Add(ids_[i], row_g, dim, lw, st);
    }
  }
  return Status::OK();
}

Status TableShard::ApplyWindow(Window* w) {
  if (w->pushes == 0) return Status::OK();
  // The mean is applied as the optimizer reads the gradient (ApplyOptions::grad_scale, same
  // bits as scaling the buffer first), saving a pass over the merged gradients.
  const float mean = cc_.merge_reduce == config::MergeReduce::kMean && w->pushes > 1 ? 1.0f / w->pushes : 1.0f;
  // Sparse windows with a stale push: per-row options (only when a policy reads staleness).
  const bool policies = cc_.lr_scale == config::LrScale::kInverse || (cc_.momentum_decay && momentum_ > 0);
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
    s = store_->PushRowsById(id_, b.rows(), b.num_rows(), b.Gradients(), u);
    b.Clear();
  } else {
    MergeBuffer& b = w->buffer;
    s = StoreApply(b.keys(), b.num_keys(), b.Gradients(), shared,
                   row_policies ? RowOptions(b.stats(), b.num_keys(), mean) : nullptr);
  }
  ++version_;
  counters_->pushes_applied.fetch_add(w->pushes, std::memory_order_relaxed);
  counters_->windows_applied.fetch_add(1, std::memory_order_relaxed);
  w->buffer.Clear();
  w->pushes = 0;
  w->lr_weight_sum = 0;
  w->staleness_sum = 0;
  w->any_stale = false;
  return s;
}

void TableShard::Progress(int worker, int64_t clock) {
  int64_t& p = progress_[worker];
  p = std::max(p, clock);
}

int64_t TableShard::Slowest() const {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  if (live_known_) {
    for (int r : live_) {
      auto it = progress_.find(r);
      slowest = std::min(slowest, it == progress_.end() ? int64_t{0} : it->second);
    }
  } else {
    for (const auto& [rank, p] : progress_) slowest = std::min(slowest, p);
  }
  return slowest;
}

bool TableShard::PullReady(const proto::Header& h) {
  if (mode_ == kAsync || h.clock() <= 0) return true;
  Progress(h.worker_rank(), h.clock());
  if (mode_ == kBsp) return h.clock() <= done_;
  int64_t slowest = Slowest();
  return slowest == std::numeric_limits<int64_t>::max() ||
         h.clock() - slowest <= cc_.staleness_bound;
}

Status TableShard::Advance(int64_t now_us, std::vector<HeldPull>* ready) {
  Status first;
  if (mode_ == kBsp) {
    int64_t target = Slowest();
    bool nobody = target == std::numeric_limits<int64_t>::max();
    // A checkpoint cut at clock cut_clock_ keeps windows from that clock on open.
    while (!windows_.empty() && (nobody || windows_.begin()->first < target) &&
           windows_.begin()->first < cut_clock_) {
      Status s = ApplyWindow(&windows_.begin()->second);
      if (first.ok()) first = s;
      done_ = std::max(done_, windows_.begin()->first + 1);
      if (spare_.size() < 2) spare_.push_back(std::move(windows_.begin()->second.buffer));
      if (spare_rows_.size() < 2) spare_rows_.push_back(std::move(windows_.begin()->second.rows));
      windows_.erase(windows_.begin());
    }
    if (!nobody) done_ = std::max(done_, std::min(target, cut_clock_));
  } else if (!windows_.empty()) {
    Window& w = windows_.begin()->second;
    bool full = w.pushes >= cc_.merge_max_pushes;
    bool late = cc_.merge_window_us > 0 && w.pushes > 0 && now_us - w.first_us >= cc_.merge_window_us;
    if (full || late) first = ApplyWindow(&w);
  }
  if (held_.empty()) return first;
  size_t before = ready->size();
  // With no live worker left nothing can advance the clocks: every held pull is answered.
  int64_t slowest = Slowest();
  bool nobody = slowest == std::numeric_limits<int64_t>::max();
  size_t kept = 0;
  for (size_t i = 0; i < held_.size(); ++i) {
    int64_t c = held_[i].header.clock();
    bool ok = nobody || (mode_ == kBsp ? c <= done_ : c - slowest <= cc_.staleness_bound);
    if (ok) {
      ready->push_back(std::move(held_[i]));
    } else {
      if (kept != i) held_[kept] = std::move(held_[i]);
      ++kept;
    }
  }
  held_.resize(kept);
  if (mode_ == kSsp && ready->size() > before && !windows_.empty()) {
    Status s = ApplyWindow(&windows_.begin()->second);  // released pulls see every push received
    if (first.ok()) first = s;
  }
  return first;
}

int64_t TableShard::NextDeadlineUs() const {
  if (mode_ == kBsp || cc_.merge_window_us <= 0 || windows_.empty()) return kNoDeadline;
  const Window& w = windows_.begin()->second;
  return w.pushes > 0 ? w.first_us + cc_.merge_window_us : kNoDeadline;
}

void TableShard::SetLiveWorkers(const std::vector<int>& ranks) {
  live_ = ranks;
  live_known_ = true;
}

}  // namespace osprey::server
