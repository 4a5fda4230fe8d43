#include "server/table_shard.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "server/request_checks.h"  // LeadingPushPart

namespace osprey::server {

StatusOr<std::unique_ptr<TableShard>> TableShard::Create(
    uint32_t id, const proto::TableSpec& spec, const config::TableConfig& config,
    std::vector<uint64_t> owned_chunks, uint64_t num_chunks, Store* store,
    ServerCounters* counters, Replier* replier) {
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Updater> updater, Updater::Make(config.optimizer));
  StoreTableSpec s;
  s.id = id;
  s.config = config;
  s.state = updater->state_layout();
  s.owned_chunks = std::move(owned_chunks);
  OSPREY_RETURN_IF_ERROR(store->CreateTable(s));
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<admission::RowLifecycle> lifecycle,
                          admission::RowLifecycle::Make(id, config, store, &counters->lifecycle));
  auto shard = std::make_unique<TableShard>(id, spec, config, num_chunks, store,
                                            std::move(updater), counters, replier);
  shard->set_lifecycle(std::move(lifecycle));
  return shard;
}

TableShard::TableShard(uint32_t id, const proto::TableSpec& spec, const config::TableConfig& config,
                       uint64_t num_chunks, Store* store, std::unique_ptr<Updater> updater,
                       ServerCounters* counters, Replier* replier)
    : id_(id),
      spec_(spec),
      rules_(MakeShardRules(config)),
      num_chunks_(num_chunks),
      policy_(ConsistencyPolicy::Make(rules_)),
      store_(store),
      updater_(std::move(updater)),
      counters_(counters),
      replier_(replier),
      // Eviction deletes rows, whose ids the store reuses: such a table merges by key.
      row_ids_(spec.type() == proto::TABLE_SPARSE && store->has_row_ids(id) &&
               !config.eviction.enabled()),
      ack_on_apply_(store->acks_after_apply()),
      marks_(store->persists_push_marks()) {
  if (rules_.dc_lambda > 0) {
    dc_ = std::make_unique<DelayCompensation>(rules_.dc_lambda, sparse(),
                                              [this](uint64_t key) { return Width(key); });
  }
}

size_t TableShard::Width(uint64_t key) const {
  return sparse() ? spec_.dim() : store_->ChunkFloats(id_, key);
}

uint64_t TableShard::Staleness(const proto::Header& h) const {
  return version_ > h.version() ? version_ - h.version() : 0;
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
  if (!*any_bad || rules_.skip_non_finite) return Status::OK();
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
  if (!sparse()) return updater_->ApplyChunks(store_, id_, keys, n, g, o);
  if (row_options == nullptr && store_->applies_merged(id_)) {  // merge: redis
    std::vector<const float*> gp(n);
    for (size_t i = 0; i < n; ++i) gp[i] = g + i * spec_.dim();
    return StoreApply(keys, n, gp.data(), o, nullptr);
  }
  RowUpdate u(o);
  u.row_options = row_options;
  u.version = version_ + 1;  // the version this step creates: the rows' latest update
  return updater_->ApplyRows(store_, id_, keys, n, spec_.dim(), g, u);
}

Status TableShard::StoreApply(const uint64_t* keys, size_t n, const float* const* g,
                              const ApplyOptions& o, const ApplyOptions* row_options) {
  if (!sparse()) return updater_->ApplyChunks(store_, id_, keys, n, g, o);
  if (row_options == nullptr && store_->applies_merged(id_)) {  // merge: redis (store.h)
    return store_->ApplyMergedRows(id_, keys, n, g, o.grad_scale, o.lr_scale, version_ + 1);
  }
  RowUpdate u(o);
  u.row_options = row_options;
  u.version = version_ + 1;
  return updater_->ApplyRows(store_, id_, keys, n, spec_.dim(), g, u);
}

Status TableShard::StoreApplyById(size_t n, const float* g, const ApplyOptions& o,
                                  const ApplyOptions* row_options) {
  const size_t dim = spec_.dim();
  gp_.resize(n);
  for (size_t i = 0; i < n; ++i) gp_[i] = g + i * dim;
  RowUpdate u(o);
  u.row_options = row_options;
  u.version = version_ + 1;
  return updater_->ApplyRowsById(store_, id_, ids_.data(), n, dim, gp_.data(), u);
}

Status TableShard::Push(const proto::Header& h, const uint64_t* keys, size_t n, const float* g,
                        int64_t now_us, Ack* ack) {
  return PushImpl(h, keys, n, g, nullptr, now_us, ack);
}

Status TableShard::Push(const proto::Header& h, const uint64_t* keys, size_t n,
                        const Buffer& values, int64_t now_us, Ack* ack) {
  return PushImpl(h, keys, n, values.as<float>(), &values, now_us, ack);
}

Status TableShard::PushImpl(const proto::Header& h, const uint64_t* keys, size_t n,
                            const float* g, const Buffer* values, int64_t now_us, Ack* ack) {
  if (!failed_.ok()) return failed_;
  now_us_ = std::max(now_us_, now_us);
  if (ack != nullptr && ack_on_apply_ && budget_ != nullptr) {
    // Refused before anything of it is merged: the ack would be held (reserved below).
    OSPREY_RETURN_IF_ERROR(budget_->Check(ack->reply.peer, AckBytes(ack->reply))
                               .WithContext("table '" + spec_.name() + "': push not taken"));
  }
  bool any_bad = false;
  OSPREY_RETURN_IF_ERROR(CheckFinite(keys, n, g, &any_bad));
  const bool leading = LeadingPushPart(h);
  if (policy_->tracks_progress() && !leading) Progress(h.worker_rank(), h.clock() + 1);
  // Admission: rows of keys not admitted yet are left out (the push still joins its window).
  if (lifecycle_) OSPREY_RETURN_IF_ERROR(lifecycle_->FilterPush(&keys, &n, &g));
  const uint64_t s = Staleness(h);
  // Sparse pushes based on an old version get per-row staleness; with s = 0 every row has 0.
  const bool per_row = sparse() && s > 0;
  // One hash probe per key: on a store with row ids, the rows read here are resolved to ids once
  // (in ids_), and the merge or the apply below goes by those ids. Not with skipped non-finite
  // rows, which must not even be created.
  bool by_id = row_ids_ && !any_bad && (dc_ != nullptr || per_row);
  if (sparse() && (dc_ || per_row)) {
    OSPREY_RETURN_IF_ERROR(ReadPushRows(h, keys, n, dc_ != nullptr, per_row, s, by_id));
  }
  // DC-ASGD: compensate against the weights now, before anything else uses g.
  if (dc_) OSPREY_RETURN_IF_ERROR(Compensate(h, keys, n, &g));
  if (per_row) {
    const size_t before = n;
    RowPolicies(&keys, &n, &g, by_id);
    // A push sent in parts is dropped as a whole only by its last part's rows (a part with rows
    // left joins its window all the same).
    if (n == 0 && before > 0 && h.push_parts() == 0) {
      counters_->pushes_dropped.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  } else {
    counters_->staleness[ServerCounters::StalenessBucket(s)].fetch_add(sparse() ? n : (leading ? 0 : 1),
                                                       std::memory_order_relaxed);
    if (rules_.drop_above >= 0 && s > static_cast<uint64_t>(rules_.drop_above)) {
      // Every part of a split push has the same staleness: all are dropped, counted once.
      if (!leading) counters_->pushes_dropped.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  // A worker that left the bsp barrier (adaptive_ratio.async_barrier) pushing a closed clock is
  // applied now, a window of its own: the oldest open window may be one nobody closes any more.
  const bool late_outside = policy_->windows_per_clock() && h.clock() < done_ && !any_bad &&
                            clocks_.LeftBarrier(h.worker_rank());
  if (late_outside || policy_->ApplyOnArrival(any_bad)) {
    if (!by_id && !any_bad && ResolveRowIds(keys, n)) by_id = true;
    return ApplyOnArrival(h, keys, n, g, per_row, s, by_id);
  }
  Window& w = WindowFor(h, now_us);
  if (marks_) w.marks.push_back(MarkOf(h));  // every part: a re-sent part is known by its own id
  w.any_stale = w.any_stale || per_row;
  if (leading) {
    ++w.leading_parts;
  } else {
    ++w.pushes;
    w.lr_weight_sum += LrWeight(s);
    w.staleness_sum += static_cast<double>(s);
  }
  if (ack != nullptr && ack_on_apply_ && !leading) {
    if (budget_ != nullptr) (void)budget_->Admit(ack->reply.peer, AckBytes(ack->reply));  // Checked above
    w.acks.push_back(ack->reply);
    ack->held = true;
  }
  // Rows are merged by reference into the push's own values frame when g still is that frame
  // (not a DC-ASGD or drop_above rewrite, which live in scratch reused by the next push): the
  // window holds the frame until it closes, and only keys pushed again are copied.
  const bool by_ref = values != nullptr && g == values->as<float>();
  if (by_ref && row_ids_) w.rows.Hold(*values);
  if (by_ref && !row_ids_) w.buffer.Hold(*values);
  if (row_ids_) return MergeRows(&w, keys, n, g, by_ref, any_bad, per_row, by_id);
  MergeKeys(&w, keys, n, g, by_ref, any_bad, per_row);
  return Status::OK();
}

bool TableShard::ResolveRowIds(const uint64_t* keys, size_t n) {
  // Below this a push applies by key in one pass (the vectors here would cost more than they save).
  constexpr size_t kMinKeys = 1024;
  // A key probe is a cache miss or two (~50 ns here): a range is worth a wake-up from 32k keys on.
  constexpr size_t kMinKeysPerRange = size_t{1} << 15;
  if (!sparse() || !row_ids_ || n < kMinKeys || !store_->concurrent_row_visits(id_)) return false;
  ids_.resize(n);
  auto find = [&](size_t begin, size_t end) {
    return store_->FindRowIds(id_, keys + begin, end - begin, ids_.data() + begin);
  };
  Status s = apply_pool_ != nullptr ? apply_pool_->Run(n, kMinKeysPerRange, find) : find(0, n);
  // Keys without a row are created on this thread in key order, as the one-thread apply would.
  std::vector<uint64_t>& missing = missing_keys_;
  missing.clear();
  for (size_t i = 0; s.ok() && i < n; ++i) {
    if (ids_[i] == Store::kNoRowId) missing.push_back(keys[i]);
  }
  if (s.ok() && !missing.empty()) {
    std::vector<uint32_t> created(missing.size());
    s = store_->FindOrCreateRowIds(id_, missing.data(), missing.size(), created.data());
    for (size_t i = 0, m = 0; s.ok() && i < n; ++i) {
      if (ids_[i] == Store::kNoRowId) ids_[i] = created[m++];
    }
  }
  return s.ok();  // else the apply goes by key, which reports the store's error itself
}

Status TableShard::ApplyOnArrival(const proto::Header& h, const uint64_t* keys, size_t n,
                                  const float* g, bool per_row, uint64_t s, bool by_id) {
  // A window of one push: apply in place, no merge buffer.
  const ApplyOptions* row_options = nullptr;
  if (per_row) {
    row_opts_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      row_opts_[i] = Options(1, LrWeight(row_s_[i]), static_cast<double>(row_s_[i]));
    }
    row_options = row_opts_.data();
  }
  const ApplyOptions o = Options(1, LrWeight(s), static_cast<double>(s));
  Status st = by_id ? StoreApplyById(n, g, o, row_options) : StoreApply(keys, n, g, o, row_options);
  if (st.ok() && lifecycle_) st = lifecycle_->Applied(keys, n, version_ + 1, now_us_);
  if (st.ok() && marks_) {
    const Store::PushMark mark = MarkOf(h);
    store_->StagePushes(id_, &mark, 1);
  }
  if (st.ok()) st = store_->Sync(id_);
  if (!st.ok()) return Fail(st, 0, 1);
  if (LeadingPushPart(h)) return Status::OK();  // its rows carry version_ + 1, as the last part's will
  ++version_;
  counters_->pushes_applied.fetch_add(1, std::memory_order_relaxed);
  counters_->windows_applied.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status TableShard::Fail(const Status& cause, int64_t clock, int pushes) {
  const std::string window = bsp() ? "the merge window of clock " + std::to_string(clock)
                                   : "merge window " + std::to_string(version_ + 1);
  failed_ = cause.WithContext("table '" + spec_.name() + "': " + window + " (" +
                              std::to_string(pushes) + " pushes) failed to apply, so none of " +
                              "its pushes is applied and the table refuses requests from now on");
  for (auto& [c, w] : windows_) {
    for (const PendingReply& a : w.acks) {
      replier_->ReplyError(a.peer, a.request, failed_);
      ReleaseAck(a);
    }
    w.acks.clear();
  }
  windows_.clear();
  ReleaseRowIdsIfIdle();
  for (const HeldPull& p : held_) {
    replier_->ReplyError(p.msg.peer, p.header, failed_);
    ReleasePull(p);
  }
  held_.clear();
  return failed_;
}

void TableShard::Rewind(int64_t clock, const Status& why) {
  for (auto& [c, w] : windows_) {
    for (const PendingReply& a : w.acks) {
      replier_->ReplyError(a.peer, a.request, why);
      ReleaseAck(a);
    }
  }
  windows_.clear();
  ReleaseRowIdsIfIdle();
  for (const HeldPull& p : held_) {
    replier_->ReplyError(p.msg.peer, p.header, why);
    ReleasePull(p);
  }
  held_.clear();
  if (bsp()) done_ = clock;
  clocks_.RewindTo(clock);
}

Status TableShard::Advance(int64_t now_us) {
  if (!failed_.ok()) return failed_;
  now_us_ = std::max(now_us_, now_us);
  const int64_t slowest = clocks_.Slowest();
  while (!windows_.empty()) {
    auto oldest = windows_.begin();
    Window& w = oldest->second;
    if (!policy_->WindowDue(oldest->first, w.pushes, w.first_us, now_us, slowest, cut_clock_)) {
      break;
    }
    OSPREY_RETURN_IF_ERROR(ApplyWindow(&w, oldest->first));
    if (!policy_->windows_per_clock()) break;  // ssp / async: the one window stays, emptied
    done_ = std::max(done_, oldest->first + 1);
    if (spare_.size() < 2) spare_.push_back(std::move(w.buffer));
    if (spare_rows_.size() < 2) spare_rows_.push_back(std::move(w.rows));
    windows_.erase(oldest);
  }
  done_ = policy_->DoneAfter(done_, slowest, cut_clock_);
  ReleaseHeld();
  ReleaseRowIdsIfIdle();
  return failed_;
}

void TableShard::ReleaseRowIdsIfIdle() {
  if (!row_ids_) return;
  for (const auto& [clock, w] : windows_) {
    if (w.pushes > 0 || w.leading_parts > 0) return;  // its rows are held by id
  }
  store_->ReleaseRowIds(id_);
}

int64_t TableShard::NextDeadlineUs() const {
  if (policy_->windows_per_clock() || windows_.empty()) return kNoDeadline;
  const Window& w = windows_.begin()->second;
  return policy_->Deadline(w.pushes, w.first_us);
}

}  // namespace osprey::server
