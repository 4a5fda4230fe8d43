// InprocTransport: the Transport inside one process, without ZeroMQ -- what tests use to run a
// whole cluster (coordinator, servers, workers) in one process. Also FaultInjectingTransport, a
// test seam that wraps any Transport and loses or fails messages on command.
//
// Endpoints are "inproc://<name>", resolved through an InprocHub that the test creates and hands
// to every transport (TransportOptions::hub); there is no global registry, so tests can run side
// by side. Semantics follow ZmqTransport so code tested here behaves the same over the network:
//   - Listen registers the name in the hub (Unavailable if taken; InvalidArgument if not
//     "inproc://<non-empty name>"); Stop unregisters it.
//   - Connect never fails for a well-formed endpoint: while no listener holds the name, messages
//     wait in the hub and are delivered, in order, when one registers (as a DEALER queues until it
//     is connected). A listener that stops and is replaced by a new one under the same name
//     receives later messages, like a ZeroMQ reconnect.
//   - Peer ids: one counter per transport; Connect takes the next id; a listener gives each
//     dialer connection the next id when its first message arrives, stable for the life of that
//     dialer transport.
//   - Send moves the Message (no copy of any frame) into the receiver's queue; the receiver's own
//     I/O thread runs its handler, in arrival order. A reply to a dialer transport that was
//     destroyed or stopped returns Unavailable (and counts in send_failures).
//   - Messages queued but not yet handled when Stop() is called are dropped.
// Threading: as for Transport. The hub is thread-safe; every transport keeps its hub alive through
// a shared_ptr, so the test may drop its own reference at any time.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/transport.h"

namespace osprey {

namespace inproc_internal {

struct Inbox;

// One message in flight to an InprocTransport, with what the receiver needs to route replies.
struct Delivery {
  Message msg;
  bool is_reply = false;          // sent by a listener to one of its dialers
  PeerId reply_peer = -1;         // is_reply: the dialer-side PeerId of the connection
  uint64_t connection = 0;        // request: hub-wide id of the dialer's connection
  PeerId dialer_peer = -1;        // request: that connection's PeerId at the dialer
  std::weak_ptr<Inbox> reply_to;  // request: the dialer's inbox
};

// The receive queue of one transport, drained by its I/O thread.
struct Inbox {
  Mutex mu;
  CondVar cv;
  std::deque<Delivery> queue GUARDED_BY(mu);
  bool closed GUARDED_BY(mu) = false;  // set by Stop: later deliveries are dropped
  // Appends and wakes the I/O thread; false (delivery dropped) once closed.
  bool Push(Delivery&& d);
};

}  // namespace inproc_internal

// Connects the InprocTransports of one test. Thread-safe.
class InprocHub {
 public:
  InprocHub() = default;
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;

  // Number of messages waiting for a listener that has not registered (for tests).
  size_t pending_messages() const;

 private:
  friend class InprocTransport;
  using Inbox = inproc_internal::Inbox;
  using Delivery = inproc_internal::Delivery;

  Status Register(const std::string& endpoint, std::shared_ptr<Inbox> inbox);
  void Unregister(const std::string& endpoint, const Inbox* inbox);
  void Deliver(const std::string& endpoint, Delivery&& d);
  uint64_t NewConnectionId();

  mutable Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Inbox>> listeners_ GUARDED_BY(mu_);
  std::unordered_map<std::string, std::deque<Delivery>> pending_ GUARDED_BY(mu_);
  uint64_t next_connection_ GUARDED_BY(mu_) = 1;
};

class InprocTransport final : public Transport {
 public:
  explicit InprocTransport(std::shared_ptr<InprocHub> hub);
  ~InprocTransport() override;  // Stop()s

  InprocTransport(const InprocTransport&) = delete;
  InprocTransport& operator=(const InprocTransport&) = delete;

  StatusOr<std::string> Listen(const std::string& endpoint) override;
  StatusOr<PeerId> Connect(const std::string& endpoint) override;
  void SetHandler(Handler handler) override;
  Status Start() override;
  // Idempotent. From inside the handler it only requests the stop (see ZmqTransport::Stop).
  void Stop() override;
  Status Send(Message msg) override;
  TransportStats stats() const override;

 private:
  struct Peer {
    bool dialed = false;
    std::string endpoint;                          // dialed: the listener's name
    uint64_t connection = 0;                       // dialed: our connection id
    std::weak_ptr<inproc_internal::Inbox> inbox;   // accepted: the dialer's inbox
    PeerId dialer_peer = -1;                       // accepted: our id at the dialer
  };

  void Run();  // the I/O thread
  PeerId ResolveSender(const inproc_internal::Delivery& d) EXCLUDES(mu_);

  const std::shared_ptr<InprocHub> hub_;
  const std::shared_ptr<inproc_internal::Inbox> inbox_;
  Handler handler_;
  std::thread io_thread_;
  std::atomic<std::thread::id> io_thread_id_{};
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0}, bytes_sent_{0},
      bytes_received_{0}, send_failures_{0};

  mutable Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::vector<std::string> listening_ GUARDED_BY(mu_);
  std::vector<Peer> peers_ GUARDED_BY(mu_);  // index = PeerId
  std::unordered_map<uint64_t, PeerId> connections_ GUARDED_BY(mu_);  // accepted connections
};

// TEST SEAM: wraps (and owns) a Transport and injects faults on command, so tests can lose or
// fail messages without a real network. Not for production builds' code paths. Thread-safe.
class FaultInjectingTransport final : public Transport {
 public:
  explicit FaultInjectingTransport(std::unique_ptr<Transport> inner);
  ~FaultInjectingTransport() override;  // stops the inner transport before the counters go

  // The next n Send() calls return OK but their messages are discarded (lost on the wire).
  void DropNextSends(int n) { drop_sends_.store(n); }
  // While on, Send() returns Unavailable and sends nothing.
  void FailSends(bool on) { fail_sends_.store(on); }
  // The next n received messages are discarded before the handler sees them.
  void DropNextReceives(int n) { drop_receives_.store(n); }
  uint64_t dropped_sends() const { return dropped_sends_.load(); }
  uint64_t dropped_receives() const { return dropped_receives_.load(); }
  Transport& inner() { return *inner_; }

  StatusOr<std::string> Listen(const std::string& endpoint) override;
  StatusOr<PeerId> Connect(const std::string& endpoint) override;
  void SetHandler(Handler handler) override;
  Status Start() override;
  void Stop() override;
  Status Send(Message msg) override;
  TransportStats stats() const override;  // the inner transport's

 private:
  const std::unique_ptr<Transport> inner_;
  std::atomic<int> drop_sends_{0};
  std::atomic<bool> fail_sends_{false};
  std::atomic<int> drop_receives_{0};
  std::atomic<uint64_t> dropped_sends_{0}, dropped_receives_{0};
};

}  // namespace osprey
