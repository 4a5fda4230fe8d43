// RpcClient: synchronous request/reply over a dialer Transport, keyed by request_id.
//
// Call() sends one control request (control_message.h framing) and blocks until the reply with the
// same request_id arrives or `timeout_ms` passes. Replies that come after their call gave up, or
// that match no call, are dropped and counted (stray_replies()). Nothing waits without a deadline.
//
// Errors of Call(): DeadlineExceeded("OP_HEARTBEAT to tcp://...: no reply within 500 ms"),
// Unavailable when the transport refused the send or the client is stopped, and for an OP_ERROR
// reply the Status the coordinator sent (its code and message). A reply whose payload does not
// parse is an InvalidArgument.
//
// Thread-safety: Call() may run concurrently from many threads. Stop() wakes every waiting call
// (they return Unavailable) and joins the transport; the destructor calls it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/transport.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

class RpcClient {
 public:
  // Takes ownership of `transport` (fresh: not started, no handler), connects it to `endpoint`
  // and starts it. Connecting is asynchronous: an unreachable endpoint shows as call timeouts.
  static StatusOr<std::unique_ptr<RpcClient>> Create(std::unique_ptr<Transport> transport,
                                                     const std::string& endpoint);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Sends `request` (null: empty values frame) as `op` and waits for the reply; on success the
  // reply's values frame is parsed into *reply (null: ignored). See the errors above.
  Status Call(proto::Op op, const google::protobuf::MessageLite* request,
              google::protobuf::MessageLite* reply, int timeout_ms);
  // Same, with a raw values frame (OP_SHUTDOWN carries its reason as text). `clock` goes into
  // the request header (OP_CHECKPOINT: the bsp clock of a checkpoint cut; 0 otherwise).
  Status CallRaw(proto::Op op, std::string payload, google::protobuf::MessageLite* reply,
                 int timeout_ms, int64_t clock = 0);

  void Stop();

  // Coordinator restart (#12): while `hold` is set, an Unavailable error reply to a call other
  // than OP_HEARTBEAT / OP_REGISTER (a restarted coordinator that this node has not re-registered
  // with yet) does not end the call: it stays pending until ResendPending or its timeout.
  void set_hold_unavailable(bool hold) { hold_unavailable_.store(hold); }
  // Starts a new send generation and returns it: calls sent from now on belong to it.
  uint64_t NextGeneration() EXCLUDES(mu_);
  // Re-sends every pending call (except OP_HEARTBEAT / OP_REGISTER) sent before `generation`,
  // with its request id, to the (restarted) coordinator; returns how many.
  size_t ResendPending(uint64_t generation) EXCLUDES(mu_);
  // Ends every pending call with `why` (the coordinator is lost for good).
  void FailPending(const Status& why) EXCLUDES(mu_);

  const std::string& endpoint() const { return endpoint_; }
  uint64_t stray_replies() const { return stray_replies_.load(); }

 private:
  struct Slot {
    bool done = false;
    Status status;
    Buffer payload;
    proto::Op op = proto::OP_UNSPECIFIED;
    Message request;          // kept for ResendPending
    uint64_t generation = 0;  // the generation it was (last) sent in
  };

  RpcClient(std::unique_ptr<Transport> transport, std::string endpoint);
  void OnMessage(Message&& msg);
  Status Roundtrip(proto::Op op, Message msg, uint64_t id, google::protobuf::MessageLite* reply,
                   int timeout_ms);

  const std::unique_ptr<Transport> transport_;
  const std::string endpoint_;
  PeerId peer_ = -1;  // set once in Create()

  Mutex mu_;
  CondVar cv_;
  std::map<uint64_t, std::shared_ptr<Slot>> pending_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  bool stopped_ GUARDED_BY(mu_) = false;
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> hold_unavailable_{false};
  std::atomic<uint64_t> stray_replies_{0};
};

}  // namespace osprey::coordinator
