// ThrottledTransport: a Transport decorator that makes the link slow, for tests and benchmarks of
// code that must react to a slow node (the adaptive per-node ratio, worker/adaptive_ratio.h).
//
// Every message that carries a values frame (pushes, dense or sparse) holds the calling thread
// until the link, modelled as one wire of `bytes_per_second` shared by all peers, has carried its
// bytes() and the messages before it; then it goes to the inner transport. Messages without
// values (pull requests, control) pass at once, as they would overtake bulk data on a real NIC's
// priority queue. This deliberately breaks Transport::Send's "never blocks": the sending thread
// stands for a socket whose send buffer is full. Only the worker uses it, and only when the
// test-only keys worker.debug_throttle_rank / debug_throttle_bytes_per_sec say so.
//
// Ownership: owns the inner transport. Thread-safety: as Transport; concurrent senders queue on
// the one wire in the order they reserved it.
#pragma once

#include <chrono>
#include <memory>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace osprey {

class ThrottledTransport final : public Transport {
 public:
  // bytes_per_second > 0.
  ThrottledTransport(std::unique_ptr<Transport> inner, double bytes_per_second);

  StatusOr<std::string> Listen(const std::string& endpoint) override { return inner_->Listen(endpoint); }
  StatusOr<PeerId> Connect(const std::string& endpoint) override { return inner_->Connect(endpoint); }
  void SetHandler(Handler handler) override { inner_->SetHandler(std::move(handler)); }
  Status Start() override { return inner_->Start(); }
  void Stop() override { inner_->Stop(); }
  // Waits for the wire (see above), then the inner Send.
  Status Send(Message msg) override EXCLUDES(mu_);
  TransportStats stats() const override { return inner_->stats(); }

  // Seconds senders spent waiting for the wire so far.
  double throttled_seconds() const EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  const std::unique_ptr<Transport> inner_;
  const double bytes_per_second_;
  mutable Mutex mu_;
  Clock::time_point wire_free_ GUARDED_BY(mu_);  // when the bytes reserved so far are through
  double throttled_seconds_ GUARDED_BY(mu_) = 0;
};

}  // namespace osprey
