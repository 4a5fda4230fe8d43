#include "server/server.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/placement.h"
#include "server/checkpoint.h"
#include "server/codec_decode.h"
#include "server/request_checks.h"

namespace osprey::server {
namespace {

Buffer AlignedFrame(const Buffer& b) {
  if (reinterpret_cast<uintptr_t>(b.data()) % alignof(uint64_t) == 0) return b;
  return Buffer::Copy(b.data(), b.size());
}

}  // namespace

int64_t Server::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Server::Server(std::unique_ptr<Transport> transport, std::unique_ptr<Store> store)
    : transport_(std::move(transport)),
      budget_(std::make_unique<HoldBudget>(limits_)),
      store_(std::move(store)) {}

void Server::SetLimits(const config::LimitsConfig& limits) {
  limits_ = limits;
  budget_ = std::make_unique<HoldBudget>(limits_);
}

void Server::SetApplyThreads(int threads) {
  apply_pool_ = threads > 1 ? std::make_unique<ApplyPool>(threads) : nullptr;
}

Server::~Server() { Stop(); }

StatusOr<std::string> Server::Listen(const std::string& endpoint) {
  OSPREY_ASSIGN_OR_RETURN(std::string bound, transport_->Listen(endpoint));
  transport_->SetHandler([this](Message&& m) { OnMessage(std::move(m)); });
  OSPREY_RETURN_IF_ERROR(transport_->Start());
  return bound;
}

std::vector<uint64_t> Server::restored_versions() {
  MutexLock work(&work_mu_);
  return restored_versions_;
}


size_t Server::num_early_requests() {
  MutexLock lock(&mu_);
  return held_.size();
}

void Server::SetLiveWorkers(std::vector<int> ranks, std::vector<int> left) {
  std::sort(ranks.begin(), ranks.end());
  std::sort(left.begin(), left.end());
  {
    // Every heartbeat reply calls this: an unchanged set must not wait for the work lock (a long
    // push or checkpoint would delay the next heartbeat past the coordinator's timeout).
    MutexLock live(&live_mu_);
    if (live_seen_ && ranks == live_seen_ranks_ && left == live_seen_left_) return;
    live_seen_ = true;
    live_seen_ranks_ = ranks;
    live_seen_left_ = left;
  }
  MutexLock work(&work_mu_);
  if (live_known_ && ranks == live_ && left == left_) return;
  live_ = std::move(ranks);
  left_ = std::move(left);
  live_known_ = true;
  for (auto& t : tables_) {
    t->SetLiveWorkers(live_, left_);
    Release(t.get());
  }
  if (scheduler_) scheduler_->AfterLiveChange(NowUs());
}

void Server::SetCheckpointConfig(const config::CheckpointConfig& checkpoint) {
  MutexLock work(&work_mu_);
  checkpoint_ = checkpoint;
}

void Server::SetRestoreDir(const std::string& dir) {
  MutexLock work(&work_mu_);
  restore_dir_ = dir;
}

StatusOr<std::string> Server::Checkpoint(const std::string& dir) {
  MutexLock work(&work_mu_);
  return CheckpointLocked(dir);
}

StatusOr<std::string> Server::CheckpointLocked(const std::string& dir, int64_t clock) {
  if (dir.empty()) return FailedPrecondition("no checkpoint directory (checkpoint.dir is empty)");
  if (tables_.empty()) return FailedPrecondition("server is not active yet");
  CheckpointMeta meta;
  meta.epoch = epoch_;
  meta.rank = rank();
  meta.num_servers = num_servers_;
  for (size_t i = 0; i < tables_.size(); ++i) {
    meta.tables.push_back(tables_[i]->spec());
    meta.versions.push_back(tables_[i]->version());
    meta.optimizers.push_back(OptimizerTypeName(table_configs_[i].optimizer.type));
    const admission::RowLifecycle* l = tables_[i]->lifecycle();
    meta.table_states.push_back(l != nullptr ? l->SaveState(NowUs()) : std::string());
  }
  meta.clock = clock;
  const int64_t start_us = NowUs();
  StatusOr<std::string> written = WriteCheckpoint(dir, meta, *store_);
  if (written.ok() && metrics_ != nullptr) {
    const double unix_now = std::chrono::duration<double>(
        std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_->OnCheckpoint(static_cast<double>(NowUs() - start_us) * 1e-6, unix_now);
  }
  return written;
}

std::vector<std::pair<std::string, uint64_t>> Server::rows_per_table() const {
  MutexLock work(&work_mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < tables_.size() && i < table_configs_.size(); ++i) {
    out.emplace_back(table_configs_[i].name, store_->num_rows(static_cast<uint32_t>(i)));
  }
  return out;
}

uint64_t Server::unflushed_rows() const {
  MutexLock work(&work_mu_);
  return store_->unflushed_rows();
}

void Server::TimerLoop() {
  MutexLock lock(&work_mu_);
  while (!stopping_) {
    int64_t next = TableShard::kNoDeadline;
    for (auto& t : tables_) next = std::min(next, t->NextDeadlineUs());
    int64_t wait_us = next == TableShard::kNoDeadline ? 50000 : next - NowUs();
    if (wait_us > 0) timer_cv_.WaitFor(&lock, std::chrono::microseconds(wait_us));
    if (stopping_) break;
    for (auto& t : tables_) Release(t.get());
  }
}

void Server::Release(TableShard* t) {
  const bool failed_before = !t->failure().ok();
  Status s = t->Advance(NowUs());
  if (!s.ok() && !failed_before) OSPREY_LOG_ERROR("{}", s.ToString());  // once, not per tick
  if (t->version() > max_version_.load(std::memory_order_relaxed)) {
    max_version_.store(t->version(), std::memory_order_relaxed);
  }
}

void Server::Stop() {
  transport_->Stop();
  {
    MutexLock work(&work_mu_);
    stopping_ = true;
  }
  timer_cv_.SignalAll();
  if (timer_.joinable()) timer_.join();
}

ServerStatsSnapshot Server::stats() const {
  ServerStatsSnapshot s;
  s.requests = requests_.load();
  s.bad_requests = bad_requests_.load();
  s.refused = refusals_.total();
  s.auth_refused = transport_->stats().auth_refused;
  s.bytes_in = bytes_in_.load();
  s.bytes_out = bytes_out_.load();
  s.pushes_applied = counters_.pushes_applied.load();
  s.pushes_dropped = counters_.pushes_dropped.load();
  s.rows_dropped = counters_.rows_dropped.load();
  s.dc_compensated = counters_.dc_compensated.load();
  s.dc_uncompensated = counters_.dc_uncompensated.load();
  s.rows_skipped = counters_.rows_skipped.load();
  s.windows_applied = counters_.windows_applied.load();
  s.windows_split = apply_pool_ ? apply_pool_->split_runs() : 0;
  s.apply_threads = apply_pool_ ? apply_pool_->threads() : 1;
  s.pulls_held = counters_.pulls_held.load();
  s.rows_admitted = counters_.lifecycle.admitted.load();
  s.gradients_not_admitted = counters_.lifecycle.gradients_dropped.load();
  s.rows_evicted_ttl = counters_.lifecycle.evicted_ttl.load();
  s.rows_evicted_cap = counters_.lifecycle.evicted_cap.load();
  s.pushes_deduplicated = pushes_deduplicated_.load();
  s.bad_headers = bad_headers_.load();
  s.limit_refusals = limit_refusals_.load();
  s.held_bytes = budget_->held_bytes();
  s.held_requests = budget_->held_requests();
  for (const auto& b : counters_.staleness) s.staleness.push_back(b.load());
  return s;
}

void Server::OnMessage(Message&& msg) {
  {
    MutexLock lock(&mu_);
    if (!active_) {
      // Held until Activate, within the same budget as held pulls (released when served).
      Status s = budget_->Admit(msg.peer, msg.bytes());
      if (s.ok()) {
        held_.push_back(std::move(msg));
        return;
      }
      proto::Header raw;
      if (!raw.ParseFromArray(msg.header.data(), static_cast<int>(msg.header.size()))) raw.Clear();
      ReplyBad(msg.peer, raw, s.WithContext("request before activation not held"), BadKind::kLimit);
      return;
    }
  }
  Handle(std::move(msg));
}

void Server::Handle(Message&& msg) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(msg.bytes(), std::memory_order_relaxed);
  // Limits first: nothing is parsed or sized from a frame or a count beyond them.
  if (Status s = CheckFrameLimits(msg, limits_); !s.ok()) {
    ReplyBad(msg.peer, proto::Header(), s, BadKind::kLimit);
    return;
  }
  auto header = ParseHeader(msg.header);
  if (!header.ok()) {
    // Echo the request id when the header parses at all (e.g. only the version is wrong).
    proto::Header raw;
    if (!raw.ParseFromArray(msg.header.data(), static_cast<int>(msg.header.size()))) raw.Clear();
    ReplyBad(msg.peer, raw, header.status(), BadKind::kHeader);
    return;
  }
  if (Status s = CheckKeyLimit(*header, limits_); !s.ok()) {
    ReplyBad(msg.peer, *header, s, BadKind::kLimit);
    return;
  }
  // ZeroMQ may hand small frames back at any offset of its receive buffer; the store reads keys and
  // floats in place, so a misaligned frame is copied once (large frames are always aligned).
  Refusal kind = Refusal::kUnauthenticated;
  Status allowed = AuthorizeServerOp(header->op(), msg.peer_role, roles_required_.load(), &kind);
  if (!allowed.ok()) return Refuse(msg, *header, allowed, kind);
  msg.keys = AlignedFrame(msg.keys);
  msg.values = AlignedFrame(msg.values);
  proto::Header reply = ReplyHeader(*header);
  Buffer values;
  bool answered_later = false;
  MutexLock work(&work_mu_);
  const int64_t start_us = metrics_ != nullptr ? NowUs() : 0;
  Status s = Execute(*header, msg, &reply, &values, &answered_later);
  if (metrics_ != nullptr) {
    metrics_->OnRequest(header->op(), header->table(), static_cast<double>(NowUs() - start_us) * 1e-6);
  }
  if (s.code() == StatusCode::kPermissionDenied) {
    Refuse(msg, *header, s, Refusal::kCheckpointDir);
  } else if (!s.ok()) {
    ReplyError(msg.peer, *header, s);
  } else if (!answered_later) {
    Reply(msg.peer, reply, std::move(values));
  }
}

Status Server::Execute(const proto::Header& h, const Message& msg, proto::Header* reply,
                       Buffer* values, bool* answered_later) {
  if (h.op() == proto::OP_SERVER_STATS) return ExecuteStats(values);
  if (h.op() == proto::OP_MIGRATE_ROWS) return ExecuteMigrate(h, msg);
  if (h.op() == proto::OP_ROWS_DIGEST) return ExecuteDigest(values);
  if (h.op() == kOpAppliedClocks) {  // a restarted worker asks (worker/resume_plan.h)
    applied_.Fence(h.worker_rank(), h.worker_incarnation());
    *values = applied_.Encode(h.worker_rank(), tables_.size(), !replacement_);
    reply->set_value_bytes(values->size());
    return Status::OK();
  }
  if (h.op() == proto::OP_CHECKPOINT) {
    return ExecuteCheckpoint(h, msg, reply, values, answered_later);
  }
  DataRequest r;
  OSPREY_RETURN_IF_ERROR(ValidateData(h, msg, &r));
  OSPREY_RETURN_IF_ERROR(CheckGeneration(h));  // bsp rollback (server_rollback.cc)
  if (r.is_pull) {
    // The shard answers the pull itself, now or when its clock is ready.
    *answered_later = true;
    const bool failed_before = !r.table->failure().ok();
    Status s = r.table->Pull(h, msg, NowUs());
    if (!s.ok() && !failed_before) OSPREY_LOG_ERROR("{}", s.ToString());
    return Status::OK();
  }
  const bool push = h.op() == proto::OP_PUSH_SPARSE || h.op() == proto::OP_PUSH_DENSE;
  if (push && applied_.Barred(h.worker_rank(), h.worker_incarnation())) {
    // A push of a killed process that arrived after its restart asked what was applied.
    return FailedPrecondition("push of worker " + std::to_string(h.worker_rank()) + " (incarnation " +
                              std::to_string(h.worker_incarnation()) +
                              "): a restarted process has taken its rank over; not applied");
  }
  if (push && dedup_.Seen(h.table(), h.worker_rank(), h.worker_incarnation(), h.request_id())) {
    // A re-send of a push already applied (server failover): acknowledged, not applied again.
    pushes_deduplicated_.fetch_add(1, std::memory_order_relaxed);
    reply->set_version(r.table->version());
    reply->set_num_keys(0);
    reply->set_value_bytes(0);
    return Status::OK();
  }
  if (h.op() == proto::OP_INIT_DENSE) {
    OSPREY_RETURN_IF_ERROR(store_->InitChunks(h.table(), msg.keys.as<uint64_t>(), h.num_keys(),
                                              r.values.as<float>()));
  } else {
    OSPREY_RETURN_IF_ERROR(ExecutePush(h, msg, r, reply, answered_later));
    dedup_.Record(h.table(), h.worker_rank(), h.worker_incarnation(), h.request_id());
    // A leading part of a push sent in parts: the push is the worker's once its last part is in.
    if (!LeadingPushPart(h)) {
      applied_.Record(h.table(), h.worker_rank(), h.worker_incarnation(), h.clock());
    }
  }
  reply->set_version(r.table->version());
  reply->set_num_keys(0);
  reply->set_value_bytes(0);
  return Status::OK();
}

Status Server::ExecutePush(const proto::Header& h, const Message& msg, const DataRequest& r,
                           proto::Header* reply, bool* answered_later) {
  TableShard& t = *r.table;
  const bool had_deadline = t.NextDeadlineUs() != TableShard::kNoDeadline;
  TableShard::Ack ack{PendingReply{msg.peer, h}};
  OSPREY_RETURN_IF_ERROR(t.Push(h, msg.keys.as<uint64_t>(), h.num_keys(), r.values, NowUs(), &ack));
  *answered_later = ack.held;
  Release(&t);
  // The window this push closed failed: its pusher learns it now (under kOnApply the shard has
  // already answered it).
  if (!t.failure().ok() && !ack.held) return t.failure();
  if (!had_deadline && t.NextDeadlineUs() != TableShard::kNoDeadline) timer_cv_.Signal();
  scheduler_->AfterPush(NowUs());
  return Status::OK();
}

Status Server::ExecuteStats(Buffer* values) {
  proto::ServerStats st;
  ServerStatsSnapshot s = stats();
  st.set_requests(s.requests);
  st.set_bad_requests(s.bad_requests);
  st.set_bytes_in(s.bytes_in);
  st.set_bytes_out(s.bytes_out);
  st.set_pushes_applied(s.pushes_applied);
  st.set_pushes_dropped(s.pushes_dropped);
  st.set_rows_dropped(s.rows_dropped);
  st.set_dc_compensated(s.dc_compensated);
  st.set_dc_uncompensated(s.dc_uncompensated);
  st.set_has_bsp(scheduler_ != nullptr && scheduler_->has_bsp());
  st.set_bsp_clock(scheduler_ != nullptr ? scheduler_->BspClock() : 0);
  st.set_rows_skipped(s.rows_skipped);
  st.set_windows_applied(s.windows_applied);
  st.set_pulls_held(s.pulls_held);
  st.set_refused(s.refused);
  st.set_auth_refused(s.auth_refused);
  st.set_limit_refusals(s.limit_refusals);
  st.set_bad_headers(s.bad_headers);
  st.set_rows_admitted(s.rows_admitted);
  st.set_gradients_not_admitted(s.gradients_not_admitted);
  st.set_rows_evicted_ttl(s.rows_evicted_ttl);
  st.set_rows_evicted_cap(s.rows_evicted_cap);
  for (uint64_t b : s.staleness) st.add_staleness_histogram(b);
  uint64_t rows = 0;
  for (size_t i = 0; i < tables_.size(); ++i) rows += store_->num_rows(static_cast<uint32_t>(i));
  st.set_rows(rows);
  st.set_redis_unflushed_rows(store_->unflushed_rows());
  *values = SerializeMessage(st);
  return Status::OK();
}

Status Server::ExecuteCheckpoint(const proto::Header& h, const Message& msg, proto::Header* reply,
                                 Buffer* values, bool* answered_later) {
  std::string dir(reinterpret_cast<const char*>(msg.values.data()), msg.values.size());
  if (!dir.empty()) OSPREY_RETURN_IF_ERROR(CheckCheckpointDir(dir, checkpoint_.dir));
  if (dir.empty()) dir = checkpoint_.dir;
  if (h.clock() > 0 && scheduler_ != nullptr && scheduler_->has_bsp()) {
    // A bsp cut: the scheduler answers when it is taken.
    OSPREY_RETURN_IF_ERROR(scheduler_->RequestCut(h, msg.peer, dir, NowUs()));
    *answered_later = true;
    return Status::OK();
  }
  OSPREY_ASSIGN_OR_RETURN(std::string path, CheckpointLocked(dir));
  *values = Buffer::Copy(path.data(), path.size());
  reply->set_value_bytes(values->size());
  return Status::OK();
}

Status Server::ValidateData(const proto::Header& h, const Message& msg, DataRequest* r) {
  bool sparse_op = h.op() == proto::OP_PULL_SPARSE || h.op() == proto::OP_PUSH_SPARSE;
  bool dense_op = h.op() == proto::OP_PULL_DENSE || h.op() == proto::OP_PUSH_DENSE ||
                  h.op() == proto::OP_INIT_DENSE;
  if (!sparse_op && !dense_op) {
    return InvalidArgument("op " + std::to_string(h.op()) + " is not a server request");
  }
  if (h.table() >= tables_.size()) {
    return InvalidArgument("table id " + std::to_string(h.table()) + " does not exist (" +
                           std::to_string(tables_.size()) + " tables)");
  }
  TableShard& t = *tables_[h.table()];
  if (sparse_op != (t.spec().type() == proto::TABLE_SPARSE)) {
    return InvalidArgument("table '" + t.spec().name() + "' is " +
                           (sparse_op ? "dense" : "sparse") + " but the op is for " +
                           (sparse_op ? "sparse" : "dense") + " tables");
  }
  // A server replacement bumps the epoch without moving rows (ShardMap.placement_epoch): a
  // request routed with any epoch since the placement began is served.
  // A map without placement_epoch (0) accepts its own epoch only.
  if (h.epoch() < placement_epoch_ || (!placement_known_ && h.epoch() != epoch_)) {
    return FailedPrecondition("shard-map epoch " + std::to_string(h.epoch()) +
                              " is not the current epoch " + std::to_string(epoch_));
  }
  const bool encoded = h.codec() != proto::CODEC_NONE;
  const bool pull_cast = encoded && h.op() == proto::OP_PULL_SPARSE;  // reply rows as fp16 / bf16
  if (encoded && !pull_cast && h.op() != proto::OP_PUSH_DENSE && h.op() != proto::OP_PUSH_SPARSE) {
    return InvalidArgument("codec " + std::to_string(h.codec()) + " on table '" + t.spec().name() +
                           "': only pushes and sparse pulls (fp16 / bf16 rows) may carry a codec");
  }
  OSPREY_RETURN_IF_ERROR(ValidatePushPart(h));
  OSPREY_RETURN_IF_ERROR(ValidateKeys(h, msg, t, rank(), num_servers_));
  if (pull_cast) OSPREY_RETURN_IF_ERROR(ValidatePullCast(h, t));
  const uint64_t* keys = msg.keys.as<uint64_t>();
  size_t n = h.num_keys();
  size_t floats = sparse_op ? n * t.spec().dim() : 0;
  if (dense_op) {
    for (size_t i = 0; i < n; ++i) floats += store_->ChunkFloats(h.table(), keys[i]);
  }
  r->table = &t;
  r->is_pull = h.op() == proto::OP_PULL_SPARSE || h.op() == proto::OP_PULL_DENSE;
  // The fp32 values a request makes the server allocate (a pull's reply, a compressed push
  // decoded) are bounded like a frame: a small request must not buy a huge allocation.
  if (floats * sizeof(float) > limits_.max_frame_bytes) {
    return ResourceExhausted("table '" + t.spec().name() + "': " + std::to_string(n) + " keys need " +
                             std::to_string(floats * sizeof(float)) + " bytes of fp32 values (" +
                             (r->is_pull ? "the reply" : "the push decoded") +
                             "): limits.max_frame_bytes is " + std::to_string(limits_.max_frame_bytes));
  }
  size_t want_bytes = r->is_pull ? 0 : floats * sizeof(float);
  // A compressed push is decoded to fp32 first (the whole frame is validated, nothing of a bad
  // one is applied) and from here on handled exactly like an fp32 push.
  r->values = msg.values;
  if (encoded && !r->is_pull) {
    Status ds = DecodePushValues(h, msg.values, floats, &r->values, &decode_stats_);
    if (!ds.ok()) return ds.WithContext("table '" + t.spec().name() + "'");
  }
  if (r->values.size() != want_bytes || (!encoded && h.value_bytes() != want_bytes)) {
    return InvalidArgument("table '" + t.spec().name() + "': values frame has " +
                           std::to_string(msg.values.size()) + " bytes (header says " +
                           std::to_string(h.value_bytes()) + ") but " + std::to_string(n) +
                           " keys need " + std::to_string(want_bytes));
  }
  return Status::OK();
}

void Server::Reply(PeerId peer, const proto::Header& header, Buffer values) {
  Message m;
  m.peer = peer;
  m.header = SerializeHeader(header);
  m.values = std::move(values);
  bytes_out_.fetch_add(m.bytes(), std::memory_order_relaxed);
  Status s = transport_->Send(std::move(m));
  if (!s.ok()) OSPREY_LOG_WARN("reply to peer {} failed: {}", peer, s.ToString());
}

void Server::ReplyError(PeerId peer, const proto::Header& request, const Status& status) {
  ReplyBad(peer, request, status,
           status.code() == StatusCode::kResourceExhausted ? BadKind::kLimit : BadKind::kInvalid);
}

void Server::ReplyBad(PeerId peer, const proto::Header& request, const Status& status, BadKind kind) {
  bad_requests_.fetch_add(1, std::memory_order_relaxed);
  if (kind == BadKind::kHeader) bad_headers_.fetch_add(1, std::memory_order_relaxed);
  if (kind == BadKind::kLimit) limit_refusals_.fetch_add(1, std::memory_order_relaxed);
  uint64_t suppressed = 0;
  bool log = false;
  {
    MutexLock lock(&log_mu_);
    log = log_limiter_.Admit(peer, static_cast<int>(kind), NowUs(), &suppressed);
  }
  if (log && suppressed > 0) {
    OSPREY_LOG_WARN("bad request {} from peer {}: {} ({} more of this kind from this peer not logged)",
                    request.request_id(), peer, status.ToString(), suppressed);
  } else if (log) {
    OSPREY_LOG_WARN("bad request {} from peer {}: {}", request.request_id(), peer, status.ToString());
  }
  Reply(peer, ErrorHeader(request, status), Buffer());
}

void Server::Refuse(const Message& msg, const proto::Header& request, const Status& why,
                    Refusal kind) {
  bad_requests_.fetch_add(1, std::memory_order_relaxed);
  refusals_.Record(static_cast<unsigned>(kind), msg.peer, msg.peer_role, why);
  Reply(msg.peer, ErrorHeader(request, why), Buffer());
}

}  // namespace osprey::server
