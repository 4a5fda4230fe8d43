// ScalePause: a worker's part of a scale step (osprey scale; coordinator/scale_protocol.h). The
// training loop asks it at every step boundary whether to pause (StepBoundary); when a step is
// pending the loop first drains its requests (every push answered), then Pause reports the step
// to the coordinator and blocks until the coordinator answers: go on with the same map, train up
// to a later step and pause again there, or switch to the committed new map -- for which Pause
// builds a new Client (nothing is in flight, so no request can be lost or sent twice; the old
// client is stopped and kept until this object dies, since others may still hold its pointer).
//
// Threading: OnState runs on the heartbeat thread; Pending, Pause and current() on the training
// thread (current() from any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "osprey.pb.h"
#include "worker/client/client.h"

namespace osprey::worker {

// What a training loop calls at its step boundaries (Trainer::Run).
class StepBoundary {
 public:
  virtual ~StepBoundary() = default;
  // Cheap; whether the loop must drain and call Pause before step `step`.
  virtual bool Pending(int64_t step) const = 0;
  // With every request of the loop answered: blocks until the job may go on; returns the client
  // to use from now on (the same one, or a new one for a new shard map). Errors: the
  // coordinator's (the loop then fails).
  virtual StatusOr<Client*> Pause(int64_t step) = 0;
};

class ScalePause final : public StepBoundary {
 public:
  // Sends one OP_SCALE request and waits for its reply (CoordinatorClient::Scale in the main).
  using Call = std::function<StatusOr<proto::ScaleReply>(const proto::ScaleRequest&)>;
  // A started Client for `map`.
  using MakeClient = std::function<StatusOr<std::unique_ptr<Client>>(const proto::ShardMap& map)>;

  // `first` is borrowed (the main's client of the registration map).
  ScalePause(int rank, Client* first, Call call, MakeClient make_client);
  ~ScalePause() override;

  // From every heartbeat reply: a step is pending while the coordinator is pausing the map this
  // worker trains with.
  void OnState(const proto::ClusterState& state);

  bool Pending(int64_t step) const override;
  StatusOr<Client*> Pause(int64_t step) override;

  Client* current() const { return current_.load(); }
  // Seconds spent in Pause, all steps together (the worker's view of the scale pauses).
  double paused_seconds() const { return paused_seconds_; }

 private:
  const int rank_;
  const Call call_;
  const MakeClient make_client_;
  std::atomic<Client*> current_;
  std::atomic<bool> pending_{false};
  int64_t run_to_ = -1;  // released to train up to this step (training thread only)
  double paused_seconds_ = 0;
  std::vector<std::unique_ptr<Client>> owned_;  // the clients Pause made
};

}  // namespace osprey::worker
