// ProgressMeter: turns the ClusterStates `osprey launch` polls into a one-line progress display
// and tells the launcher whether the job is still moving (for its stall guard).
//
//   [#####...............] step 120/500  23.5k samples/s  loss 0.4812
//   waiting for nodes: 2/2 servers, 1/2 workers
//
// The step is the slowest live worker's clock; samples/s is measured over the last ~5 s of polls;
// loss is the mean over live workers that reported one. Pure computation on values: not
// thread-safe, no I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "osprey.pb.h"
#include "tools/report.h"

namespace osprey::tools {

class ProgressMeter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ProgressMeter(int64_t total_steps) : total_steps_(total_steps) {}

  // Feeds one polled state taken at `now`. Returns true when the job moved since the previous
  // state: a clock advanced, a node registered or died, a report arrived, or a flag changed.
  bool Update(const proto::ClusterState& state, Clock::time_point now);

  // The line for the last state ("" before any state).
  std::string Line() const;

  int64_t step() const { return step_; }
  double samples_per_sec() const { return rate_; }
  // One point per poll where the step advanced (at most kMaxCurvePoints: beyond, every other
  // point is dropped and the spacing doubles).
  const std::vector<CurvePoint>& curve() const { return curve_; }
  static constexpr size_t kMaxCurvePoints = 4096;

 private:
  std::string Signature(const proto::ClusterState& state) const;
  void RecordCurve(Clock::time_point now);

  const int64_t total_steps_;
  bool have_state_ = false;
  proto::ClusterState last_;
  std::string signature_;
  int64_t step_ = 0;
  double loss_ = 0;
  bool have_loss_ = false;
  double rate_ = 0;
  std::deque<std::pair<Clock::time_point, uint64_t>> samples_;  // (time, total samples) window
  Clock::time_point first_poll_{};
  std::vector<CurvePoint> curve_;
  int64_t curve_every_ = 1;  // keep a point only when step advanced by at least this much
};

// "950", "23.5k", "1.20M", "3.4G".
std::string FormatCount(double value);

}  // namespace osprey::tools
