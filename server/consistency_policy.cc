#include "server/consistency_policy.h"

#include <algorithm>

namespace osprey::server {
namespace {

constexpr int64_t kNobody = WorkerClocks::kNobody;

class BspPolicy : public ConsistencyPolicy {
 public:
  ConsistencyMode mode() const override { return ConsistencyMode::kBsp; }
  bool tracks_progress() const override { return true; }
  bool ApplyOnArrival(bool) const override { return false; }
  // A push for a clock that is already closed goes into the oldest open window.
  int64_t WindowClock(int64_t clock, int64_t done) const override { return std::max(clock, done); }
  bool windows_per_clock() const override { return true; }
  bool WindowDue(int64_t window_clock, int, int64_t, int64_t, int64_t slowest,
                 int64_t cut) const override {
    return (slowest == kNobody || window_clock < slowest) && window_clock < cut;
  }
  int64_t DoneAfter(int64_t done, int64_t slowest, int64_t cut) const override {
    return slowest == kNobody ? done : std::max(done, std::min(slowest, cut));
  }
  bool PullReady(int64_t clock, int64_t done, int64_t) const override { return clock <= done; }
  bool Release(int64_t clock, int64_t done, int64_t slowest) const override {
    return slowest == kNobody || clock <= done;
  }
  int64_t Deadline(int, int64_t) const override { return kNoDeadline; }
};

// ssp and async: one window, closed after merge_max_pushes pushes or merge_window_us.
class WindowPolicy : public ConsistencyPolicy {
 public:
  explicit WindowPolicy(const ShardRules& r) : r_(r) {}
  bool ApplyOnArrival(bool any_bad) const override { return r_.merge_max_pushes == 1 && !any_bad; }
  int64_t WindowClock(int64_t, int64_t) const override { return 0; }
  bool windows_per_clock() const override { return false; }
  bool WindowDue(int64_t, int pushes, int64_t first_us, int64_t now_us, int64_t,
                 int64_t) const override {
    const bool full = pushes >= r_.merge_max_pushes;
    const bool late = r_.merge_window_us > 0 && pushes > 0 && now_us - first_us >= r_.merge_window_us;
    return full || late;
  }
  int64_t Deadline(int pushes, int64_t first_us) const override {
    return r_.merge_window_us > 0 && pushes > 0 ? first_us + r_.merge_window_us : kNoDeadline;
  }

 protected:
  const ShardRules r_;
};

class SspPolicy : public WindowPolicy {
 public:
  using WindowPolicy::WindowPolicy;
  ConsistencyMode mode() const override { return ConsistencyMode::kSsp; }
  bool tracks_progress() const override { return true; }
  bool PullReady(int64_t clock, int64_t, int64_t slowest) const override {
    return slowest == kNobody || clock - slowest <= r_.staleness_bound;
  }
  bool Release(int64_t clock, int64_t, int64_t slowest) const override {
    return slowest == kNobody || clock - slowest <= r_.staleness_bound;
  }
  bool ApplyBeforeRelease() const override { return true; }
};

class AsyncPolicy : public WindowPolicy {
 public:
  using WindowPolicy::WindowPolicy;
  ConsistencyMode mode() const override { return ConsistencyMode::kAsync; }
  bool tracks_progress() const override { return false; }
  bool PullReady(int64_t, int64_t, int64_t) const override { return true; }
  // Unreachable (async holds no pull); the ssp rule, as the shard always had it.
  bool Release(int64_t clock, int64_t, int64_t slowest) const override {
    return slowest == kNobody || clock - slowest <= r_.staleness_bound;
  }
};

}  // namespace

ShardRules MakeShardRules(const config::TableConfig& config) {
  const config::ConsistencyConfig& cc = config.consistency;
  ShardRules r;
  r.mode = cc.mode;
  r.staleness_bound = cc.staleness_bound;
  r.merge_window_us = cc.merge_window_us;
  r.merge_max_pushes = cc.merge_max_pushes;
  r.reduce_mean = cc.merge_reduce == config::MergeReduce::kMean;
  r.lr_inverse = cc.lr_scale == config::LrScale::kInverse;
  r.momentum_decay = cc.momentum_decay;
  r.momentum = config.optimizer.momentum;
  r.dc_lambda = cc.dc_lambda;
  r.drop_above = cc.drop_above;
  r.skip_non_finite = cc.non_finite == config::NonFinite::kSkipRow;
  return r;
}

void WorkerClocks::Advance(int worker, int64_t clock) {
  int64_t& p = progress_[worker];
  p = std::max(p, clock);
}

int64_t WorkerClocks::Slowest() const {
  int64_t slowest = kNobody;
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

void WorkerClocks::SetLive(const std::vector<int>& ranks, const std::vector<int>& left) {
  live_ = ranks;
  left_ = left;
  live_known_ = true;
}

std::unique_ptr<ConsistencyPolicy> ConsistencyPolicy::Make(const ShardRules& rules) {
  switch (rules.mode) {
    case ConsistencyMode::kBsp: return std::make_unique<BspPolicy>();
    case ConsistencyMode::kSsp: return std::make_unique<SspPolicy>(rules);
    case ConsistencyMode::kAsync: return std::make_unique<AsyncPolicy>(rules);
  }
  return std::make_unique<AsyncPolicy>(rules);
}

}  // namespace osprey::server
