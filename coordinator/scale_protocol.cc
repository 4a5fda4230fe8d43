#include "coordinator/scale_protocol.h"

#include <algorithm>

namespace osprey::coordinator {

const char* ScalePhaseName(ScaleProtocol::Phase phase) {
  switch (phase) {
    case ScaleProtocol::Phase::kIdle: return "idle";
    case ScaleProtocol::Phase::kJoining: return "joining";
    case ScaleProtocol::Phase::kPausing: return "pausing";
    case ScaleProtocol::Phase::kTransferring: return "transferring";
  }
  return "?";
}

std::string ScaleRefusal(const config::PsConfig& config) {
  for (const config::TableConfig& t : config.tables) {
    if (t.admission.enabled() || t.eviction.enabled()) {
      return "scale: table '" + t.name + "' has feature admission / eviction, whose sketch and row "
             "ages a scale step does not move yet";
    }
  }
  return "";
}

Status ScaleProtocol::Begin(int from, int to, int timeout_ms, Clock::time_point now) {
  if (phase_ != Phase::kIdle) {
    return FailedPrecondition(std::string("scale: a step from ") + std::to_string(from_) + " to " +
                              std::to_string(to_) + " servers is in progress (" +
                              ScalePhaseName(phase_) + ")");
  }
  if (to < 1) return InvalidArgument("scale: a job needs at least 1 server, asked for " + std::to_string(to));
  if (to == from) return InvalidArgument("scale: the job has " + std::to_string(from) + " servers already");
  Reset();
  from_ = from;
  to_ = to;
  timeout_ms_ = timeout_ms;
  begun_ = now;
  phase_ = to > from ? Phase::kJoining : Phase::kPausing;
  return Status::OK();
}

Status ScaleProtocol::OnPause(int worker, int64_t clock, Clock::time_point now) {
  if (phase_ != Phase::kPausing) {
    return FailedPrecondition(std::string("scale: worker ") + std::to_string(worker) +
                              " paused while the step is " + ScalePhaseName(phase_));
  }
  paused_[worker] = clock;
  paused_at_[worker] = now;
  return Status::OK();
}

Status ScaleProtocol::OnServerDone(int rank, uint64_t records, Clock::time_point now) {
  if (phase_ != Phase::kTransferring) {
    return FailedPrecondition(std::string("scale: server ") + std::to_string(rank) +
                              " reported its transfer while the step is " + ScalePhaseName(phase_));
  }
  if (rank < 0 || rank >= from_) {
    return InvalidArgument("scale: server " + std::to_string(rank) + " is not one of the " +
                           std::to_string(from_) + " servers that transfer");
  }
  if (done_.insert(rank).second) records_ += records;
  return Status::OK();
}

ScaleProtocol::Events ScaleProtocol::Advance(const std::map<int, int64_t>& live_workers,
                                             size_t joiners, Clock::time_point now) {
  Events ev;
  const bool late = now - begun_ >= std::chrono::milliseconds(timeout_ms_);
  if (phase_ == Phase::kJoining) {
    if (joiners >= static_cast<size_t>(to_ - from_)) {
      phase_ = Phase::kPausing;
    } else if (late) {
      ev.failure = "scale to " + std::to_string(to_) + " servers: " + std::to_string(joiners) +
                   " of " + std::to_string(to_ - from_) + " joining servers registered within " +
                   std::to_string(timeout_ms_) + " ms (start them with osprey-server --join)";
    }
  }
  if (phase_ == Phase::kPausing && ev.failure.empty()) {
    // The boundary to meet at: no paused worker's step is behind it, nor the step a worker still
    // training has reached (its heartbeat's completed steps; it is in that step or draining at
    // that boundary). So a worker blocked in a bsp pull of step s, which waits for a paused
    // worker's push of step s-1, releases that worker up to s; and a worker draining at its
    // boundary does not move the target past where it is about to pause (no release ping-pong).
    int64_t target = 0;
    int missing = -1;
    size_t num_missing = 0;
    for (const auto& [w, heartbeat_clock] : live_workers) {
      auto it = paused_.find(w);
      if (it != paused_.end()) {
        target = std::max(target, it->second);
      } else {
        target = std::max(target, heartbeat_clock);
        if (missing < 0) missing = w;
        ++num_missing;
      }
    }
    clock_ = target;
    for (const auto& [w, heartbeat_clock] : live_workers) {
      auto it = paused_.find(w);
      if (it != paused_.end() && it->second < target) ev.run_to.push_back(w);
    }
    for (int w : ev.run_to) paused_.erase(w);
    if (num_missing == 0 && ev.run_to.empty()) {
      // The pause: from the first of the final arrivals at the meeting boundary (a worker
      // released to train further was not standing still before).
      first_pause_ = now;
      for (const auto& [w, c] : paused_) first_pause_ = std::min(first_pause_, paused_at_[w]);
      any_pause_ = true;
      phase_ = Phase::kTransferring;
      transfer_begun_ = now;
      ev.transfer_begins = true;
    } else if (late) {
      ev.failure = "scale to " + std::to_string(to_) + " servers: the workers did not all pause at one "
                   "step boundary within " + std::to_string(timeout_ms_) + " ms" +
                   (missing >= 0 ? " (worker " + std::to_string(missing) + " and " +
                                       std::to_string(num_missing - 1) + " more never paused)"
                                 : "");
    }
  }
  if (phase_ == Phase::kTransferring && !ev.transfer_begins &&
      done_.size() == static_cast<size_t>(from_)) {
    committed_ = now;
    ev.commit = true;
  }
  if (!ev.failure.empty()) phase_ = Phase::kIdle;
  return ev;
}

void ScaleProtocol::Reset() {
  phase_ = Phase::kIdle;
  any_pause_ = false;
  clock_ = 0;
  paused_.clear();
  paused_at_.clear();
  done_.clear();
  records_ = 0;
}

double ScaleProtocol::pause_seconds() const {
  return any_pause_ ? std::chrono::duration<double>(committed_ - first_pause_).count() : 0;
}

double ScaleProtocol::transfer_seconds() const {
  return std::chrono::duration<double>(committed_ - transfer_begun_).count();
}

}  // namespace osprey::coordinator
