// Transport: the narrow interface every Osprey process talks through (after ps-lite's Van).
//
// A Message is three frames -- header (a serialized proto::Header), keys, values -- each a Buffer,
// sent and received without copying the payload where the implementation allows (ZeroMQ: large
// frames are handed to zmq_msg_init_data and received frames are wrapped, not copied).
//
// One Transport object is either a listener (Listen: servers, the coordinator) or a dialer
// (Connect: workers to servers, every node to the coordinator), or both. Peers are small
// non-negative integers from one counter per transport, never reused: for a dialer the id Connect
// returned; for a listener an id the transport assigned to the remote end when its first message
// arrived (stable for the life of the remote dialer, across reconnects).
//
// Threading: Start() spawns the transport's own I/O thread; every received Message is delivered
// by calling the Handler on that thread -- or, while a caller is inside ReceiveUntil, on the
// caller's thread -- one message at a time, in arrival order per peer. The handler must not block
// for long (defer slow work and reply later with Send). Send() is thread-safe and may be called
// from any thread, including from inside the handler. Stop() joins the I/O thread; after it
// returns no handler runs. Messages queued but not yet written when Stop() is called are dropped.
// Stop() from inside the handler only requests the stop (it cannot join its own thread); a later
// Stop() or the destructor completes it. Destroying a transport Stop()s it.
//
// Implementations: ZmqTransport (zmq_transport.h), InprocTransport and the fault-injecting test
// wrapper (inproc_transport.h); MakeTransport below picks one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"

namespace osprey {

using PeerId = int32_t;

// Who an authenticated peer is (ZmqTransport with CURVE: the role its public key is listed under,
// told by the ZAP handler). kUnauthenticated: security is off, or the message came in on a
// dialer (the listener it dialed was authenticated by its server key instead). Receivers decide
// what a role may do; the transport only reports it.
enum class PeerRole : uint8_t { kUnauthenticated = 0, kCoordinator, kServer, kWorker, kAdmin };

// "coordinator", "server", "worker", "admin" (the key-file and ZAP user-id names), or
// "unauthenticated".
const char* PeerRoleName(PeerRole role);
// The role called `name` (one of the four key names); false when there is none.
bool ParsePeerRole(const std::string& name, PeerRole* role);

struct Message {
  PeerId peer = -1;  // receive: who sent it; send: where it goes
  // Receive: the sender's authenticated role (ZmqTransport: from the ZAP handler; ignored by its
  // Send). InprocTransport delivers the value the sender set, so a test gives the role itself.
  PeerRole peer_role = PeerRole::kUnauthenticated;
  Buffer header;
  Buffer keys;
  Buffer values;

  size_t bytes() const { return header.size() + keys.size() + values.size(); }
};

// Counters a transport keeps; read with Transport::stats() from any thread.
struct TransportStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t malformed_received = 0;  // messages with a frame count other than 3, dropped
  uint64_t send_failures = 0;       // Send() calls to a known peer that returned an error
  uint64_t auth_refused = 0;        // CURVE: connections refused (unknown key, no CURVE, ...)
};

class Transport {
 public:
  using Handler = std::function<void(Message&& msg)>;

  virtual ~Transport() = default;

  // Binds a listening endpoint ("tcp://127.0.0.1:7000", "tcp://127.0.0.1:0" for any free port,
  // "ipc:///tmp/x.sock") and returns the endpoint actually bound (with the real port).
  // Must be called before Start(). Errors: InvalidArgument (bad endpoint), Unavailable (in use).
  virtual StatusOr<std::string> Listen(const std::string& endpoint) = 0;

  // Opens a connection to a listener; returns the peer id to Send() to. May be called before or
  // after Start(). Connection establishment is asynchronous (messages queue until connected).
  virtual StatusOr<PeerId> Connect(const std::string& endpoint) = 0;

  // Sets the receive handler; must be called before Start().
  virtual void SetHandler(Handler handler) = 0;

  virtual Status Start() = 0;
  virtual void Stop() = 0;

  // Queues `msg` for msg.peer. Returns NotFound for an unknown peer, FailedPrecondition when the
  // transport is not running, Unavailable when a listener's peer is no longer connected,
  // ResourceExhausted when the peer's queue is at its high-water mark (TransportOptions::sndhwm).
  // Success means queued, not delivered. Never blocks. The frames' bytes must not be modified
  // after the call (large frames are sent from the caller's memory).
  virtual Status Send(Message msg) = 0;

  virtual TransportStats stats() const = 0;

  // Optional: receives on the calling thread, running the handler there, until `done()` is true,
  // `deadline` passes or Stop is called, while the I/O thread stands aside. A caller that would
  // otherwise sleep until the I/O thread wakes it (a client waiting for its replies) saves that
  // thread hop per reply. Returns false at once, having done nothing, when the transport cannot
  // (the default), is not running, or another thread is already inside ReceiveUntil; the caller
  // then waits as usual. `done` is called after each handled message: it must be cheap and must
  // not call into the transport. Not from inside the handler.
  virtual bool ReceiveUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
    (void)done;
    (void)deadline;
    return false;
  }
};

class InprocHub;  // inproc_transport.h

// ZeroMQ CURVE (kind "zmq" only). Keys are Z85 text (40 characters), as zmq_curve_keypair makes
// them. With `enabled`, every socket is encrypted and authenticated: the listener is a CURVE
// server with `secret_key` and a ZAP handler that admits only the public keys in `allowed` (and
// stamps each message with the key's role); every dialer is a CURVE client with this keypair that
// expects the listener to hold the secret of `server_key`.
struct CurveOptions {
  bool enabled = false;
  std::string public_key;
  std::string secret_key;
  std::string server_key;  // the public key of the listeners this transport Connect()s to
  std::vector<std::pair<std::string, PeerRole>> allowed;  // public key -> role
};

// What MakeTransport builds.
struct TransportOptions {
  std::string kind = "zmq";  // "zmq" or "inproc"
  int io_threads = 1;        // ZeroMQ context I/O threads
  int sndhwm = 0;            // 0 = unlimited queue (the client bounds in-flight requests itself)
  int rcvhwm = 0;
  int linger_ms = 0;
  // kind == "zmq": the largest frame a listener (ROUTER) socket accepts (ZMQ_MAXMSGSIZE); a peer
  // that sends a larger one is disconnected before the frame is read. 0 = no limit.
  int64_t max_message_bytes = 0;
  // kind == "zmq": frames of at least this many bytes are sent zero-copy (zmq_msg_init_data);
  // smaller ones are copied. Measured on the 2-core VM: 8 KiB instead of 64 KiB gains nothing for
  // 16-32 KiB frames (a copy that size costs about what the zero-copy bookkeeping does).
  size_t zero_copy_threshold = 64 << 10;
  // kind == "inproc": the hub that connects the transports of one test; required. Transports
  // find each other through "inproc://name" endpoints registered in this hub (no global state).
  std::shared_ptr<InprocHub> hub;
  CurveOptions curve;
};

// Factory: InvalidArgument for an unknown kind or an inproc transport without a hub.
StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportOptions& options);

}  // namespace osprey
