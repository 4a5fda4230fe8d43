// ZmqTransport: the Transport over ZeroMQ (tcp:// and ipc://), used between processes.
//
// Sockets: a listener is one ROUTER socket (Listen may bind it to several endpoints); a dialer
// opens one DEALER socket per Connect()ed endpoint. Every message on the wire is the routing
// identity (ROUTER side only) followed by exactly three frames: header, keys, values. A message
// with any other frame count is counted in stats().malformed_received and dropped.
//
// Peer ids: one counter per transport hands out small non-negative ids that are never reused:
// Connect() takes the next one for its DEALER; the ROUTER takes the next one the first time a
// routing identity sends a message. Osprey's DEALERs set a random 8-byte routing identity, and the
// ROUTER hands a reconnecting identity over to the new connection (ZMQ_ROUTER_HANDOVER), so the
// listener-side id of an Osprey dialer is stable for the life of that dialer, across TCP
// reconnects. Foreign DEALERs get ZeroMQ's per-connection identities (a new id per connection).
//
// Zero copy: frames of at least TransportOptions::zero_copy_threshold bytes are handed to
// ZeroMQ with zmq_msg_init_data; a heap copy of the Buffer's owner (shared_ptr) keeps the bytes
// alive until ZeroMQ's free callback runs (possibly on ZeroMQ's I/O thread, after Send returned).
// Smaller frames are copied (cheaper than the bookkeeping). Received frames are not copied: the
// Buffers of one received Message share one block that holds the zmq_msg_t's and closes them when
// the last Buffer is dropped. Callers must not modify a Buffer's bytes after sending it.
//
// Threading (why it differs from a plain "I/O thread owns the sockets" design): on this class of
// machine waking a thread on another CPU costs ~35-40 us, about one third of a 4 KB round trip,
// so Send() does not hand messages to the I/O thread. All socket calls are made under one mutex
// (ZeroMQ allows a socket to move between threads with a full memory barrier), and Send() writes
// the message to ZeroMQ itself, from whatever thread calls it. The I/O thread holds the mutex
// only while it takes one message off a socket; it runs the handler and sleeps in poll() on the
// sockets' ZMQ_FDs and an eventfd without it. Because any socket call may consume the ZMQ_FD
// wake-up, a Send from a thread other than the I/O thread checks ZMQ_EVENTS afterwards and wakes
// the I/O thread through the eventfd when input became pending.
//
// ReceiveUntil (a client's Wait): the waiting thread takes the receive lease and receives itself,
// so a reply wakes it straight from ZeroMQ instead of through the I/O thread (one cross-CPU wake
// less per reply). While the lease is held the I/O thread takes no message and sleeps on its
// eventfd alone; messages are taken and handled under handle_mu_ by whichever thread receives,
// so the handler never runs twice at once and per-peer order holds. Releasing the lease wakes
// the I/O thread, which drains what is left (zmq_transport_receive.cc).
//
// CURVE (options.curve.enabled, zmq_curve.h): the ROUTER is a CURVE server whose ZapHandler is
// started on this transport's context before the first bind (Listen fails when it cannot be), so
// only the listed keys connect, and each received message carries its sender's role
// (Message::peer_role); DEALERs are CURVE clients of options.curve.server_key. Refused connections
// are counted in stats().auth_refused.
//
// Sealed data plane (zmq_seal.h; CURVE only, tcp only): CURVE's own cipher runs at ~1 GB/s on
// one I/O thread, the bulk of a push's cost. So a CURVE listener also binds a plain ROUTER on an
// ephemeral port of the same host. Each time a CURVE DEALER completes its handshake (a monitor
// reports it) it asks over CURVE for a session; the listener answers, over CURVE, with a fresh
// random AES-256-GCM key, a session id and the data port, bound to the peer's ZAP role. The
// dialer then opens a plain DEALER to that port, and from then on both sides send that peer's
// messages sealed there (same PeerId, same peer_role); for ipc:// (the listener declines) over
// CURVE. Between the request and the answer Send holds the peer's messages (bounded by sndhwm),
// so a dialer's messages are never reordered by the switch.
// A data-port message that is not a well-formed sealed message of a live session with a verifying
// tag and a fresh counter is dropped and counted in stats().auth_refused; the first is logged.
//
// Frame limit: with options.max_message_bytes > 0 the ROUTER refuses any larger frame
// (ZMQ_MAXMSGSIZE: checked against the frame's size prefix, nothing allocated) and drops the
// connection; an Osprey DEALER reconnects by itself and is served again.
//
// Send() never blocks: it returns ResourceExhausted when the peer's ZeroMQ queue is at its
// send high-water mark (options.sndhwm; 0 = unlimited, the default), Unavailable when a listener
// peer is no longer connected (the message is counted in stats().send_failures).
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/transport.h"

namespace osprey {

class ZapHandler;
class SealedSession;

class ZmqTransport final : public Transport {
 public:
  // Creates the ZeroMQ context (options.io_threads I/O threads); no socket yet.
  explicit ZmqTransport(const TransportOptions& options);
  // Stops (if running) and closes every socket and the context.
  ~ZmqTransport() override;

  ZmqTransport(const ZmqTransport&) = delete;
  ZmqTransport& operator=(const ZmqTransport&) = delete;

  // Errors: InvalidArgument (not tcp:// or ipc://, malformed, address not local), Unavailable
  // (address in use; for ipc also a live listener on that path), FailedPrecondition (started).
  StatusOr<std::string> Listen(const std::string& endpoint) override;
  // Errors: InvalidArgument (scheme or syntax), FailedPrecondition (stopped).
  StatusOr<PeerId> Connect(const std::string& endpoint) override;
  void SetHandler(Handler handler) override;
  // Errors: FailedPrecondition (no handler, already started, or stopped).
  Status Start() override;
  // Joins the I/O thread, then closes the sockets (options.linger_ms) and removes the ipc socket
  // files it bound; the destructor closes the context. Idempotent.
  // Must not be called from the handler (it would wait for itself); from there it only requests
  // the stop, and a later Stop() or the destructor completes it.
  void Stop() override;
  // Thread-safe; see the header comment for errors beyond the interface's.
  Status Send(Message msg) override;
  TransportStats stats() const override;
  // See the header comment; false while another thread receives this way, before Start and
  // after Stop, and on the I/O thread.
  bool ReceiveUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) override;

  // Sealed data plane: the port of the plain ROUTER ("" when none: no CURVE, or no tcp Listen),
  // and how many sealed messages opened (tests and benchmarks check that it is in use).
  std::string sealed_data_port() const;
  uint64_t sealed_received() const { return counters_.sealed_received.load(); }

 private:
  struct Peer {
    void* socket = nullptr;   // the DEALER, or the ROUTER for a listener peer
    std::string routing_id;   // listener peers only
    std::string endpoint;     // dialer peers: what Connect dialed
    // Sealed data plane: the session, and the dialer's plain DEALER or the listener's routing id
    // of the peer's plain DEALER (known once one of its sealed messages opened).
    std::shared_ptr<SealedSession> session;
    void* data_socket = nullptr;
    std::string data_routing_id;
    PeerRole role = PeerRole::kUnauthenticated;  // listener peers: the ZAP role of the session
    // Dialer peers: a session was requested and not yet answered; Send holds messages here.
    bool awaiting_session = false;
    std::vector<Message> pending;
  };
  enum class SocketKind { kRouter, kDealer, kDataRouter, kDataDealer, kMonitor };
  struct SocketEntry {
    SocketKind kind;
    PeerId peer;  // the dialer's PeerId for kDealer, kDataDealer and kMonitor; else -1
  };
  struct Counters {
    std::atomic<uint64_t> messages_sent{0}, messages_received{0}, bytes_sent{0},
        bytes_received{0}, malformed_received{0}, send_failures{0}, sealed_refused{0},
        sealed_received{0};
    std::atomic<bool> sealed_refusal_logged{false};
  };

  // `fixed_identity` (DEALERs): a random routing identity kept across reconnects; without it
  // ZeroMQ's per-connection one (the sealed data DEALER: its identity travels in clear, so a
  // fixed one would let an eavesdropper take over its route with ZMQ_ROUTER_HANDOVER).
  void* NewSocket(int type, bool curve, bool fixed_identity = true) REQUIRES(mu_);
  // Sends one message to `p` now (sealed when its session is up); returns 0 or the errno, and
  // in *used the socket it went to.
  int SendNow(const Peer& p, const Message& msg, void** used) REQUIRES(mu_);
  void FlushPending(Peer* p) REQUIRES(mu_);
  void AddSocket(void* socket, SocketKind kind, PeerId peer) REQUIRES(mu_);
  void RemoveSocket(void* socket) REQUIRES(mu_);
  // Sealed data plane (zmq_transport_seal.cc).
  Status BindDataRouter(const std::string& endpoint) REQUIRES(mu_);
  void RequestSession(PeerId peer) REQUIRES(mu_);                  // dialer, after a handshake
  // Listener: a CURVE peer's request; dialer: the listener's offer. False when the one-frame
  // message is neither (counted as malformed).
  bool OfferSession(const std::string& routing_id, PeerRole role, const uint8_t* request,
                    size_t size) REQUIRES(mu_);
  bool AcceptSession(PeerId peer, const uint8_t* offer, size_t size) REQUIRES(mu_);
  void OnMonitorEvent(void* monitor, PeerId peer) REQUIRES(mu_);
  // Opens a received sealed message in place; false (counted, first one logged) if refused.
  bool OpenSealed(SocketKind kind, PeerId dealer_peer, const std::string& routing_id,
                  void* const* parts, size_t* sizes, PeerId* peer) REQUIRES(mu_);
  void RefuseSealed(const Status& why);
  PeerId ListenerPeer(const std::string& routing_id, void* socket) REQUIRES(mu_);
  // The sockets as one receiver (the I/O thread, or a caller in ReceiveUntil) polls them: rebuilt
  // when sockets_generation_ moved. fds[0] is the receiver's eventfd.
  struct ReceiverView {
    uint64_t generation = ~uint64_t{0};
    std::vector<void*> sockets;
    std::vector<SocketEntry> entries;
    std::vector<pollfd> fds;
  };
  enum class Pass { kEmpty, kProgress, kHalted, kReload };
  // The receive lease (lease_): free, held by a caller in ReceiveUntil, or taken by Stop for good.
  static constexpr int kLeaseFree = 0, kLeaseReceiver = 1, kLeaseStopped = 2;

  void Wake();  // the I/O thread
  static void WakeFd(int fd);
  void Run();  // the I/O thread
  void LoadView(ReceiverView* v, int wake_fd) REQUIRES(mu_);
  // One pass over v's sockets: takes and handles up to kRecvBatch messages of each, in order.
  // kHalted as soon as `halt()` is true (checked under handle_mu_ before each take), kReload
  // when the socket list changed, else whether any message was taken.
  Pass DrainPass(ReceiverView* v, const std::function<bool()>& halt);
  // Takes at most one message off `socket`; dealer_peer is the DEALER's PeerId, or
  // -1 for the ROUTER. Returns false when none is pending; true otherwise, with *valid telling
  // whether *out holds a well-formed message (a malformed one is counted and dropped).
  bool ReceiveOne(void* socket, SocketEntry entry, Message* out, bool* valid) REQUIRES(mu_);
  void CloseSockets() REQUIRES(mu_);  // the I/O thread is gone

  const TransportOptions options_;
  void* ctx_ = nullptr;
  int wake_fd_ = -1;  // eventfd: Stop, a new socket, input pending after a Send
  int receiver_wake_fd_ = -1;  // eventfd of the caller in ReceiveUntil: the same, and Stop
  Handler handler_;   // set before Start, then read only by the I/O thread
  std::unique_ptr<ZapHandler> zap_;  // CURVE only; set in the constructor, started by Listen
  std::thread io_thread_;
  std::atomic<std::thread::id> io_thread_id_{};
  std::atomic<bool> stop_requested_{false};
  std::atomic<int> lease_{kLeaseFree};
  std::atomic<std::thread::id> receiver_thread_id_{};  // the caller in ReceiveUntil
  Counters counters_;

  // Held by the receiving thread from taking a message until its handler returned.
  Mutex handle_mu_;  // taken before mu_

  mutable Mutex mu_;  // guards every ZeroMQ socket call and the fields below
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  uint64_t sockets_generation_ GUARDED_BY(mu_) = 0;  // moves when sockets_ changes
  void* router_ GUARDED_BY(mu_) = nullptr;
  std::vector<void*> sockets_ GUARDED_BY(mu_);  // router first (if any), then DEALERs
  std::vector<SocketEntry> socket_entries_ GUARDED_BY(mu_);  // per sockets_ entry
  void* data_router_ GUARDED_BY(mu_) = nullptr;  // sealed data plane: the plain ROUTER
  std::string data_port_ GUARDED_BY(mu_);        // its port, offered to dialers
  std::unordered_map<uint64_t, PeerId> sessions_ GUARDED_BY(mu_);  // listener: session id -> peer
  uint64_t monitors_ GUARDED_BY(mu_) = 0;       // names the monitors' inproc endpoints
  std::vector<Peer> peers_ GUARDED_BY(mu_);  // index = PeerId
  std::unordered_map<std::string, PeerId> routing_ids_ GUARDED_BY(mu_);
  std::mt19937_64 rng_ GUARDED_BY(mu_);  // DEALER routing identities
  // ipc socket files this transport created (path, inode): ZeroMQ 4.3 leaves them behind, so
  // Stop removes them -- unless another listener has replaced the file since.
  std::vector<std::pair<std::string, uint64_t>> ipc_files_ GUARDED_BY(mu_);
};

}  // namespace osprey
