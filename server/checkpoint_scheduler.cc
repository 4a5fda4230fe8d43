#include "server/checkpoint_scheduler.h"

#include <algorithm>

#include "common/logging.h"

namespace osprey::server {

void CheckpointScheduler::Start(const config::CheckpointConfig& config,
                                const std::vector<std::unique_ptr<TableShard>>* tables,
                                int64_t now_us) {
  config_ = config;
  tables_ = tables;
  for (const auto& t : *tables_) has_bsp_ = has_bsp_ || t->bsp();
  // Periodic checkpoints count from the (restored) versions; bsp cuts from clock 0 (bsp clocks
  // start at 0 in every job).
  uint64_t steps = 0;
  for (const auto& t : *tables_) steps = std::max(steps, t->version());
  if (config_.every_steps > 0) {
    next_step_ = (steps / config_.every_steps + 1) * config_.every_steps;
    if (has_bsp_ && !config_.dir.empty()) {
      // From the tables' clock: 0, or a replacement's restored cut (server failover).
      cuts_[(BspClock() / config_.every_steps + 1) * config_.every_steps].periodic = true;
      ArmCut();
    }
  }
  last_us_ = now_us;
}

int64_t CheckpointScheduler::BspClock() const {
  int64_t clock = 0;
  if (tables_ == nullptr) return clock;
  for (const auto& t : *tables_) {
    if (t->bsp()) clock = std::max(clock, t->done());
  }
  return clock;
}

void CheckpointScheduler::ArmCut() {
  for (const auto& t : *tables_) {
    if (!t->bsp()) continue;
    if (cuts_.empty()) {
      t->ClearCutClock();
    } else {
      t->SetCutClock(cuts_.begin()->first);
    }
  }
}

bool CheckpointScheduler::CutReached(int64_t clock, bool periodic) const {
  bool any_active = false;
  for (const auto& t : *tables_) {
    if (!t->bsp() || !t->active()) continue;
    any_active = true;
    if (t->done() < clock) return false;
  }
  return any_active || !periodic;
}

Status CheckpointScheduler::RequestCut(const proto::Header& h, PeerId peer, const std::string& dir,
                                       int64_t now_us) {
  if (dir.empty()) {
    return FailedPrecondition("no checkpoint directory (checkpoint.dir is empty and none given)");
  }
  const int64_t now = BspClock();
  if (now > h.clock()) {
    return FailedPrecondition("checkpoint cut at bsp clock " + std::to_string(h.clock()) +
                              ": server " + std::to_string(rank_) + " already closed " +
                              std::to_string(now) + " clocks; pick a later clock");
  }
  cuts_[h.clock()].waiters.push_back(Waiter{peer, h, dir});
  ArmCut();
  TakeDueCuts(now_us);
  return Status::OK();
}

void CheckpointScheduler::TakeDueCuts(int64_t now_us) {
  if (tables_ == nullptr) return;
  while (!cuts_.empty() && CutReached(cuts_.begin()->first, cuts_.begin()->second.periodic)) {
    const int64_t clock = cuts_.begin()->first;
    Cut cut = std::move(cuts_.begin()->second);
    cuts_.erase(cuts_.begin());
    TakeCut(clock, cut);
    if (cut.periodic) cuts_[clock + config_.every_steps].periodic = true;
    ArmCut();
    for (const auto& t : *tables_) {
      if (!t->bsp()) continue;
      const bool failed_before = !t->failure().ok();
      Status s = t->Advance(now_us);  // close the windows the cut kept open
      if (!s.ok() && !failed_before) OSPREY_LOG_ERROR("{}", s.ToString());
    }
  }
}

void CheckpointScheduler::TakeCut(int64_t clock, const Cut& cut) {
  std::map<std::string, StatusOr<std::string>> written;  // by directory
  if (cut.periodic) written.emplace(config_.dir, write_(config_.dir, clock));
  for (const Waiter& w : cut.waiters) {
    if (written.count(w.dir) == 0) written.emplace(w.dir, write_(w.dir, clock));
  }
  for (const auto& [dir, path] : written) {
    if (path.ok()) {
      OSPREY_LOG_INFO("server {}: checkpoint cut at bsp clock {} written to {}", rank_, clock,
                      *path);
    } else {
      OSPREY_LOG_ERROR("checkpoint cut at bsp clock {} failed: {}", clock,
                       path.status().ToString());
    }
  }
  for (const Waiter& w : cut.waiters) {
    const StatusOr<std::string>& path = written.at(w.dir);
    if (!path.ok()) {
      replier_->ReplyError(w.peer, w.request, path.status());
      continue;
    }
    proto::Header reply = ReplyHeader(w.request);
    reply.set_value_bytes(path->size());
    replier_->Reply(w.peer, reply, Buffer::Copy(path->data(), path->size()));
  }
}

void CheckpointScheduler::AfterPush(int64_t now_us) {
  TakeDueCuts(now_us);
  MaybeCheckpoint(now_us);
}

void CheckpointScheduler::MaybeCheckpoint(int64_t now_us) {
  if (config_.dir.empty() || tables_ == nullptr) return;
  bool due = false;
  if (config_.every_steps > 0 && !has_bsp_) {  // with bsp tables: cuts (TakeDueCuts)
    // The busiest table: a table this server owns no part of (a small dense one) never steps.
    uint64_t steps = 0;
    for (const auto& t : *tables_) steps = std::max(steps, t->version());
    if (steps >= next_step_) {
      due = true;
      next_step_ = (steps / config_.every_steps + 1) * config_.every_steps;
    }
  }
  if (config_.every_seconds > 0 &&
      now_us - last_us_ >= int64_t{config_.every_seconds} * 1000000) {
    due = true;
  }
  if (!due) return;
  last_us_ = now_us;
  auto path = write_(config_.dir, 0);
  if (!path.ok()) OSPREY_LOG_ERROR("periodic checkpoint failed: {}", path.status().ToString());
}

}  // namespace osprey::server
