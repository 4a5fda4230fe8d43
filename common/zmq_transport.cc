#include "common/zmq_transport.h"

#include "common/zmq_curve.h"
#include "common/zmq_endpoint.h"
#include "common/zmq_seal.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace osprey {
namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

void ReleaseOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// Hands one frame to ZeroMQ without blocking. Returns 0 or the errno.
int SendFrame(void* socket, const Buffer& frame, int flags, size_t zero_copy_threshold) {
  zmq_msg_t m;
  if (frame.size() >= zero_copy_threshold) {
    auto* hold = new std::shared_ptr<const void>(frame.owner());
    if (zmq_msg_init_data(&m, const_cast<uint8_t*>(frame.data()), frame.size(), ReleaseOwner,
                          hold) != 0) {
      delete hold;
      return zmq_errno();
    }
  } else {
    if (zmq_msg_init_size(&m, frame.size()) != 0) return zmq_errno();
    if (!frame.empty()) std::memcpy(zmq_msg_data(&m), frame.data(), frame.size());
  }
  if (zmq_msg_send(&m, socket, flags | ZMQ_DONTWAIT) < 0) {
    int err = zmq_errno();
    zmq_msg_close(&m);  // runs ReleaseOwner for a zero-copy frame
    return err;
  }
  return 0;
}

// The frames of one received message (three, or four when sealed). The handler's Buffers alias
// this block, so the ZeroMQ buffers are released when the last of them goes away.
struct ReceivedFrames {
  zmq_msg_t parts[4];
  int count = 0;
  ~ReceivedFrames() {
    for (int i = 0; i < count; ++i) zmq_msg_close(&parts[i]);
  }
  Buffer View(const std::shared_ptr<ReceivedFrames>& self, int i, size_t size) const {
    const void* data = zmq_msg_data(const_cast<zmq_msg_t*>(&parts[i]));
    return Buffer(std::shared_ptr<const void>(self, data), data, size);
  }
};

}  // namespace

ZmqTransport::ZmqTransport(const TransportOptions& options) : options_(options) {
  ctx_ = zmq_ctx_new();
  zmq_ctx_set(ctx_, ZMQ_IO_THREADS, options_.io_threads > 0 ? options_.io_threads : 1);
  zmq_ctx_set(ctx_, ZMQ_BLOCKY, 0);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  receiver_wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (options_.curve.enabled) zap_ = std::make_unique<ZapHandler>(ctx_, options_.curve.allowed);
  std::random_device rd;
  rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

ZmqTransport::~ZmqTransport() {
  Stop();
  {
    MutexLock lock(&mu_);
    CloseSockets();
  }
  if (zap_ != nullptr) zap_->Stop();  // its sockets belong to ctx_
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (receiver_wake_fd_ >= 0) ::close(receiver_wake_fd_);
  zmq_ctx_term(ctx_);
}

void* ZmqTransport::NewSocket(int type, bool curve, bool fixed_identity) {
  void* s = zmq_socket(ctx_, type);
  if (s == nullptr) return nullptr;
  int linger = options_.linger_ms, sndhwm = options_.sndhwm, rcvhwm = options_.rcvhwm, one = 1;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(s, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm));
  zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
  if (type == ZMQ_ROUTER) {
    // Mandatory: a reply to a vanished peer fails (and is counted) instead of vanishing silently.
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
    zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
    if (curve && ApplyCurveServer(s, options_.curve) != 0) {
      zmq_close(s);
      return nullptr;
    }
    // The frame limit (issue #13 "Limits"): ZeroMQ refuses a larger frame from its size prefix,
    // before allocating it, and drops that connection.
    if (options_.max_message_bytes > 0) {
      const int64_t max = options_.max_message_bytes;
      zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max));
    }
  } else {
    // A fixed identity keeps this dialer's listener-side PeerId across reconnects. ZeroMQ
    // reserves identities that start with a zero byte for its own.
    uint64_t id = rng_() | 1;
    if (fixed_identity) zmq_setsockopt(s, ZMQ_ROUTING_ID, &id, sizeof(id));
    if (curve && ApplyCurveClient(s, options_.curve) != 0) {
      zmq_close(s);
      return nullptr;
    }
  }
  return s;
}

void ZmqTransport::AddSocket(void* socket, SocketKind kind, PeerId peer) {
  sockets_.push_back(socket);
  socket_entries_.push_back(SocketEntry{kind, peer});
  ++sockets_generation_;
}

void ZmqTransport::RemoveSocket(void* socket) {
  for (size_t i = 0; i < sockets_.size(); ++i) {
    if (sockets_[i] != socket) continue;
    sockets_.erase(sockets_.begin() + i);
    socket_entries_.erase(socket_entries_.begin() + i);
    ++sockets_generation_;
    zmq_close(socket);
    return;
  }
}

void ZmqTransport::Wake() { WakeFd(wake_fd_); }

void ZmqTransport::WakeFd(int fd) {
  uint64_t one = 1;
  ssize_t n = ::write(fd, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: the thread is awake anyway
}

StatusOr<std::string> ZmqTransport::Listen(const std::string& endpoint) {
  OSPREY_RETURN_IF_ERROR(CheckZmqEndpoint(endpoint));
  MutexLock lock(&mu_);
  if (started_ || stopped_) {
    return FailedPrecondition("zmq transport: Listen(" + endpoint + ") after Start or Stop");
  }
  if (StartsWith(endpoint, "ipc://")) OSPREY_RETURN_IF_ERROR(CheckIpcPathFree(endpoint));
  if (router_ == nullptr) {
    router_ = NewSocket(ZMQ_ROUTER, options_.curve.enabled);
    if (router_ == nullptr) return Internal(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
    if (zap_ != nullptr) {
      // Before the first bind: a CURVE server without its ZAP handler admits any key.
      Status zap = zap_->Start(router_);
      if (!zap.ok()) {
        zmq_close(router_);
        router_ = nullptr;
        return zap;
      }
    }
    sockets_.insert(sockets_.begin(), router_);
    socket_entries_.insert(socket_entries_.begin(), SocketEntry{SocketKind::kRouter, -1});
    ++sockets_generation_;
  }
  if (zmq_bind(router_, endpoint.c_str()) != 0) return ZmqBindError(endpoint, zmq_errno());
  struct stat st;
  if (StartsWith(endpoint, "ipc://") && ::stat(endpoint.c_str() + 6, &st) == 0) {
    ipc_files_.emplace_back(endpoint.substr(6), static_cast<uint64_t>(st.st_ino));
  }
  char bound[1024];
  size_t len = sizeof(bound);
  const std::string result =
      zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, bound, &len) == 0 ? bound : endpoint;
  if (zap_ != nullptr && data_router_ == nullptr && StartsWith(result, "tcp://")) {
    OSPREY_RETURN_IF_ERROR(BindDataRouter(result));
  }
  return result;
}

StatusOr<PeerId> ZmqTransport::Connect(const std::string& endpoint) {
  OSPREY_RETURN_IF_ERROR(CheckZmqEndpoint(endpoint));
  PeerId id;
  bool running;
  {
    MutexLock lock(&mu_);
    if (stopped_) return FailedPrecondition("zmq transport: Connect(" + endpoint + ") after Stop");
    if (options_.curve.enabled && options_.curve.server_key.empty()) {
      return InvalidArgument("zmq transport: CURVE Connect(" + endpoint + ") without a server key");
    }
    void* s = NewSocket(ZMQ_DEALER, options_.curve.enabled);
    if (s == nullptr) return Internal(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
    // Each completed CURVE handshake asks the listener for a sealed data-plane session, and Send
    // holds the peer's messages until it is answered. The monitor that reports the handshake is
    // in place before zmq_connect: ZeroMQ's I/O thread may finish the handshake before this
    // thread runs again, and an event with no monitor listening is lost -- the peer's messages
    // would then be held forever (a CURVE worker that never registered, under load).
    void* monitor = nullptr;
    if (options_.curve.enabled && StartsWith(endpoint, "tcp://")) {
      const std::string name = "inproc://osprey-seal-monitor-" +
                               std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                               std::to_string(monitors_++);
      monitor = zmq_socket(ctx_, ZMQ_PAIR);
      if (monitor != nullptr &&
          (zmq_socket_monitor(s, name.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0 ||
           zmq_connect(monitor, name.c_str()) != 0)) {
        zmq_socket_monitor(s, nullptr, 0);
        zmq_close(monitor);  // no monitor: this peer stays on CURVE, which is still secure
        monitor = nullptr;
      }
    }
    if (zmq_connect(s, endpoint.c_str()) != 0) {
      int err = zmq_errno();
      if (monitor != nullptr) {
        zmq_socket_monitor(s, nullptr, 0);
        zmq_close(monitor);
      }
      zmq_close(s);
      return InvalidArgument("zmq transport: cannot connect to '" + endpoint + "': " +
                             zmq_strerror(err));
    }
    id = static_cast<PeerId>(peers_.size());
    Peer peer;
    peer.socket = s;
    peer.endpoint = endpoint;
    peer.awaiting_session = monitor != nullptr;
    peers_.push_back(std::move(peer));
    AddSocket(s, SocketKind::kDealer, id);
    if (monitor != nullptr) AddSocket(monitor, SocketKind::kMonitor, id);
    running = started_;
  }
  if (running) Wake();  // the I/O thread must add the socket to its poll set
  return id;
}

void ZmqTransport::SetHandler(Handler handler) { handler_ = std::move(handler); }

Status ZmqTransport::Start() {
  MutexLock lock(&mu_);
  if (started_ || stopped_) return FailedPrecondition("zmq transport: Start called twice");
  if (!handler_) return FailedPrecondition("zmq transport: Start without a handler");
  if (ctx_ == nullptr || wake_fd_ < 0 || receiver_wake_fd_ < 0) return Internal("zmq transport: no context or eventfd");
  started_ = true;
  io_thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ZmqTransport::Stop() {
  stop_requested_.store(true);
  const std::thread::id me = std::this_thread::get_id();
  if (me == io_thread_id_.load() || me == receiver_thread_id_.load()) return;  // from the handler
  // A caller inside ReceiveUntil leaves at its next check; Stop then keeps the lease for good,
  // so none enters again and the sockets can be closed.
  for (int expected = kLeaseFree; !lease_.compare_exchange_strong(expected, kLeaseStopped); expected = kLeaseFree) {
    if (expected == kLeaseStopped) break;
    WakeFd(receiver_wake_fd_);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Wake();
  if (io_thread_.joinable()) io_thread_.join();
  MutexLock lock(&mu_);
  // Messages held for a session that was not answered yet go over CURVE, so that linger
  // delivers them as it would have without the sealed data plane.
  for (Peer& p : peers_) {
    if (p.awaiting_session) FlushPending(&p);
  }
  stopped_ = true;
  CloseSockets();
}

void ZmqTransport::CloseSockets() {
  for (void* s : sockets_) zmq_close(s);  // linger (options.linger_ms) applies from here
  for (const auto& [path, inode] : ipc_files_) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == inode) {
      ::unlink(path.c_str());
    }
  }
  ipc_files_.clear();
  sockets_.clear();
  socket_entries_.clear();
  sessions_.clear();
  data_router_ = nullptr;
  peers_.clear();
  routing_ids_.clear();
  router_ = nullptr;
}

int ZmqTransport::SendNow(const Peer& p, const Message& msg, void** used) {
  Buffer frames[4] = {msg.header, msg.keys, msg.values, Buffer()};
  int count = 3;
  void* socket = p.socket;
  const std::string* routing_id = p.routing_id.empty() ? nullptr : &p.routing_id;
  const bool dialer = p.routing_id.empty();
  if (p.session != nullptr && (dialer ? p.data_socket != nullptr : !p.data_routing_id.empty())) {
    Buffer plain[3] = {msg.header, msg.keys, msg.values};
    if (!p.session->Seal(dialer ? SealDirection::kToListener : SealDirection::kToDialer, plain,
                         frames).ok()) {
      return EPROTO;
    }
    count = 4;
    socket = dialer ? p.data_socket : data_router_;
    if (!dialer) routing_id = &p.data_routing_id;
  }
  *used = socket;
  int err = 0;
  if (routing_id != nullptr) {
    err = SendFrame(socket, Buffer(nullptr, routing_id->data(), routing_id->size()), ZMQ_SNDMORE,
                    SIZE_MAX);
  }
  if (err == EHOSTUNREACH && count == 4) {
    // The peer's data connection is gone (it reconnects with a new identity, learnt from its
    // next sealed message): this one goes over its CURVE route, which survives reconnects.
    count = 3;
    frames[0] = msg.header;
    frames[1] = msg.keys;
    frames[2] = msg.values;
    socket = p.socket;
    *used = socket;
    err = SendFrame(socket, Buffer(nullptr, p.routing_id.data(), p.routing_id.size()),
                    ZMQ_SNDMORE, SIZE_MAX);
  }
  // ZeroMQ checks the high-water mark and the route on the first frame only; once it is
  // accepted the rest of the message is too.
  for (int i = 0; i < count && err == 0; ++i) {
    err = SendFrame(socket, frames[i], i + 1 < count ? ZMQ_SNDMORE : 0,
                    options_.zero_copy_threshold);
  }
  return err;
}

void ZmqTransport::FlushPending(Peer* p) {
  p->awaiting_session = false;
  for (const Message& m : p->pending) {
    void* used = nullptr;
    if (SendNow(*p, m, &used) != 0) counters_.send_failures.fetch_add(1, std::memory_order_relaxed);
  }
  p->pending.clear();
}

Status ZmqTransport::Send(Message msg) {
  const bool on_io_thread = std::this_thread::get_id() == io_thread_id_.load();
  bool wake = false;
  int err = 0;
  {
    MutexLock lock(&mu_);
    if (!started_ || stopped_) return FailedPrecondition("zmq transport: Send while not running");
    if (msg.peer < 0 || static_cast<size_t>(msg.peer) >= peers_.size()) {
      return NotFound("zmq transport: unknown peer " + std::to_string(msg.peer));
    }
    Peer& p = peers_[msg.peer];
    if (p.awaiting_session) {
      // Held (in order) until the listener has answered the session request, so that no
      // message sent over CURVE can overtake, or be overtaken by, a sealed one.
      if (options_.sndhwm > 0 && p.pending.size() >= static_cast<size_t>(options_.sndhwm)) {
        err = EAGAIN;
      } else {
        counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_sent.fetch_add(msg.bytes(), std::memory_order_relaxed);
        p.pending.push_back(std::move(msg));
        return Status::OK();
      }
    } else {
      void* socket = nullptr;
      err = SendNow(p, msg, &socket);
      if (!on_io_thread && socket != nullptr) {
        // This call may have consumed the wake-up the I/O thread sleeps on (see the header).
        int events = 0;
        size_t len = sizeof(events);
        if (zmq_getsockopt(socket, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN)) {
          wake = true;
        }
      }
    }
  }
  if (wake) {  // whoever receives now: a caller inside ReceiveUntil, else the I/O thread
    if (lease_.load() == kLeaseReceiver) WakeFd(receiver_wake_fd_);
    if (lease_.load() != kLeaseReceiver) Wake();
  }
  if (err != 0) {
    counters_.send_failures.fetch_add(1, std::memory_order_relaxed);
    std::string where = "zmq transport: send to peer " + std::to_string(msg.peer) + ": ";
    if (err == EAGAIN) return ResourceExhausted(where + "queue full (sndhwm)");
    if (err == EHOSTUNREACH) return Unavailable(where + "peer is not connected");
    return Unavailable(where + zmq_strerror(err));
  }
  counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_sent.fetch_add(msg.bytes(), std::memory_order_relaxed);
  return Status::OK();
}

PeerId ZmqTransport::ListenerPeer(const std::string& routing_id, void* socket) {
  auto it = routing_ids_.find(routing_id);
  if (it != routing_ids_.end()) return it->second;
  const PeerId peer = static_cast<PeerId>(peers_.size());
  Peer p;
  p.socket = socket;
  p.routing_id = routing_id;
  peers_.push_back(std::move(p));
  routing_ids_.emplace(routing_id, peer);
  return peer;
}

bool ZmqTransport::ReceiveOne(void* socket, SocketEntry entry, Message* out, bool* valid) {
  *valid = false;
  if (entry.kind == SocketKind::kMonitor) {
    OnMonitorEvent(socket, entry.peer);
    return false;  // events are not messages; the monitor is drained each pass
  }
  zmq_msg_t first;
  zmq_msg_init(&first);
  if (zmq_msg_recv(&first, socket, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&first);
    return false;
  }
  const bool is_router =
      entry.kind == SocketKind::kRouter || entry.kind == SocketKind::kDataRouter;
  const bool sealed =
      entry.kind == SocketKind::kDataRouter || entry.kind == SocketKind::kDataDealer;
  const int want = sealed ? 4 : 3;
  auto frames = std::make_shared<ReceivedFrames>();
  std::string routing_id;
  int total = 0;  // frames after the routing identity
  bool more = zmq_msg_more(&first);
  if (is_router) {
    routing_id.assign(static_cast<const char*>(zmq_msg_data(&first)), zmq_msg_size(&first));
    zmq_msg_close(&first);
  } else {
    zmq_msg_init(&frames->parts[0]);
    zmq_msg_move(&frames->parts[0], &first);
    zmq_msg_close(&first);
    frames->count = total = 1;
  }
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    // The parts of a multipart message arrive together, so this does not wait.
    if (zmq_msg_recv(&m, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (total < 4) {
      zmq_msg_init(&frames->parts[total]);
      zmq_msg_move(&frames->parts[total], &m);
      frames->count = total + 1;
    }
    zmq_msg_close(&m);
    ++total;
  }
  if (!sealed && total == 1 && zap_ != nullptr) {
    // A sealed data-plane session request (listener) or offer (dialer), over CURVE.
    const auto* data = static_cast<const uint8_t*>(zmq_msg_data(&frames->parts[0]));
    const size_t size = zmq_msg_size(&frames->parts[0]);
    const bool handled = is_router ? OfferSession(routing_id, CurvePeerRole(&frames->parts[0]),
                                                  data, size)
                                   : AcceptSession(entry.peer, data, size);
    if (!handled) counters_.malformed_received.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (total != want) {
    if (sealed) {
      RefuseSealed(PermissionDenied("sealed data plane: " + std::to_string(total) +
                                    " frames, not 4"));
    } else {
      counters_.malformed_received.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }
  size_t sizes[4];
  for (int i = 0; i < want; ++i) sizes[i] = zmq_msg_size(&frames->parts[i]);
  PeerId peer = entry.peer;
  if (sealed) {
    void* parts[4];
    for (int i = 0; i < 4; ++i) parts[i] = zmq_msg_data(&frames->parts[i]);
    if (!OpenSealed(entry.kind, entry.peer, routing_id, parts, sizes, &peer)) return true;
    out->peer_role = peers_[peer].role;
  } else if (is_router) {
    peer = ListenerPeer(routing_id, socket);
    if (zap_ != nullptr) out->peer_role = CurvePeerRole(&frames->parts[0]);
  }
  const int base = sealed ? 1 : 0;
  *valid = true;
  out->peer = peer;
  out->header = frames->View(frames, base, sizes[base]);
  out->keys = frames->View(frames, base + 1, sizes[base + 1]);
  out->values = frames->View(frames, base + 2, sizes[base + 2]);
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_received.fetch_add(out->bytes(), std::memory_order_relaxed);
  return true;
}

TransportStats ZmqTransport::stats() const {
  TransportStats s;
  s.messages_sent = counters_.messages_sent.load();
  s.messages_received = counters_.messages_received.load();
  s.bytes_sent = counters_.bytes_sent.load();
  s.bytes_received = counters_.bytes_received.load();
  s.malformed_received = counters_.malformed_received.load();
  s.send_failures = counters_.send_failures.load();
  s.auth_refused = (zap_ != nullptr ? zap_->refused() : 0) + counters_.sealed_refused.load();
  return s;
}

}  // namespace osprey
