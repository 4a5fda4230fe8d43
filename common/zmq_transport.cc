#include "common/zmq_transport.h"

#include "common/zmq_curve.h"
#include "common/zmq_endpoint.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace osprey {
namespace {

// Receive passes take at most this many messages from one socket before moving to the next, so
// one busy peer cannot starve the others.
constexpr int kRecvBatch = 64;

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

// The three frames of one received message. The handler's Buffers alias this block, so the
// ZeroMQ buffers are released when the last of them goes away.
struct ReceivedFrames {
  zmq_msg_t parts[3];
  int count = 0;
  ~ReceivedFrames() {
    for (int i = 0; i < count; ++i) zmq_msg_close(&parts[i]);
  }
  Buffer View(const std::shared_ptr<ReceivedFrames>& self, int i) const {
    zmq_msg_t* m = const_cast<zmq_msg_t*>(&parts[i]);
    const void* data = zmq_msg_data(m);
    return Buffer(std::shared_ptr<const void>(self, data), data, zmq_msg_size(m));
  }
};

}  // namespace

ZmqTransport::ZmqTransport(const TransportOptions& options) : options_(options) {
  ctx_ = zmq_ctx_new();
  zmq_ctx_set(ctx_, ZMQ_IO_THREADS, options_.io_threads > 0 ? options_.io_threads : 1);
  zmq_ctx_set(ctx_, ZMQ_BLOCKY, 0);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
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
  zmq_ctx_term(ctx_);
}

void* ZmqTransport::NewSocket(int type) {
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
    if (options_.curve.enabled && ApplyCurveServer(s, options_.curve) != 0) {
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
    zmq_setsockopt(s, ZMQ_ROUTING_ID, &id, sizeof(id));
    if (options_.curve.enabled && ApplyCurveClient(s, options_.curve) != 0) {
      zmq_close(s);
      return nullptr;
    }
  }
  return s;
}

void ZmqTransport::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: the I/O thread is awake anyway
}

StatusOr<std::string> ZmqTransport::Listen(const std::string& endpoint) {
  OSPREY_RETURN_IF_ERROR(CheckZmqEndpoint(endpoint));
  MutexLock lock(&mu_);
  if (started_ || stopped_) {
    return FailedPrecondition("zmq transport: Listen(" + endpoint + ") after Start or Stop");
  }
  if (StartsWith(endpoint, "ipc://")) OSPREY_RETURN_IF_ERROR(CheckIpcPathFree(endpoint));
  if (router_ == nullptr) {
    router_ = NewSocket(ZMQ_ROUTER);
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
    socket_peers_.insert(socket_peers_.begin(), -1);
    sockets_changed_ = true;
  }
  if (zmq_bind(router_, endpoint.c_str()) != 0) return ZmqBindError(endpoint, zmq_errno());
  struct stat st;
  if (StartsWith(endpoint, "ipc://") && ::stat(endpoint.c_str() + 6, &st) == 0) {
    ipc_files_.emplace_back(endpoint.substr(6), static_cast<uint64_t>(st.st_ino));
  }
  char bound[1024];
  size_t len = sizeof(bound);
  if (zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, bound, &len) != 0) return endpoint;
  return std::string(bound);
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
    void* s = NewSocket(ZMQ_DEALER);
    if (s == nullptr) return Internal(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
    if (zmq_connect(s, endpoint.c_str()) != 0) {
      int err = zmq_errno();
      zmq_close(s);
      return InvalidArgument("zmq transport: cannot connect to '" + endpoint + "': " +
                             zmq_strerror(err));
    }
    id = static_cast<PeerId>(peers_.size());
    peers_.push_back(Peer{s, std::string()});
    sockets_.push_back(s);
    socket_peers_.push_back(id);
    sockets_changed_ = true;
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
  if (ctx_ == nullptr || wake_fd_ < 0) return Internal("zmq transport: no context or eventfd");
  started_ = true;
  io_thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ZmqTransport::Stop() {
  stop_requested_.store(true);
  if (std::this_thread::get_id() == io_thread_id_.load()) return;  // from the handler
  Wake();
  if (io_thread_.joinable()) io_thread_.join();
  MutexLock lock(&mu_);
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
  socket_peers_.clear();
  peers_.clear();
  routing_ids_.clear();
  router_ = nullptr;
}

Status ZmqTransport::Send(Message msg) {
  const bool on_io_thread = std::this_thread::get_id() == io_thread_id_.load();
  const size_t threshold = options_.zero_copy_threshold;
  bool wake = false;
  int err = 0;
  {
    MutexLock lock(&mu_);
    if (!started_ || stopped_) return FailedPrecondition("zmq transport: Send while not running");
    if (msg.peer < 0 || static_cast<size_t>(msg.peer) >= peers_.size()) {
      return NotFound("zmq transport: unknown peer " + std::to_string(msg.peer));
    }
    const Peer& p = peers_[msg.peer];
    if (!p.routing_id.empty()) {
      err = SendFrame(p.socket, Buffer(nullptr, p.routing_id.data(), p.routing_id.size()),
                      ZMQ_SNDMORE, SIZE_MAX);
    }
    // ZeroMQ checks the high-water mark and the route on the first frame only; once it is
    // accepted the rest of the message is too.
    if (err == 0) err = SendFrame(p.socket, msg.header, ZMQ_SNDMORE, threshold);
    if (err == 0) err = SendFrame(p.socket, msg.keys, ZMQ_SNDMORE, threshold);
    if (err == 0) err = SendFrame(p.socket, msg.values, 0, threshold);
    if (!on_io_thread) {
      // This call may have consumed the wake-up the I/O thread sleeps on (see the header).
      int events = 0;
      size_t len = sizeof(events);
      if (zmq_getsockopt(p.socket, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN)) {
        wake = true;
      }
    }
  }
  if (wake) Wake();
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

bool ZmqTransport::ReceiveOne(void* socket, PeerId dealer_peer, Message* out, bool* valid) {
  zmq_msg_t first;
  zmq_msg_init(&first);
  if (zmq_msg_recv(&first, socket, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&first);
    return false;
  }
  const bool is_router = dealer_peer < 0;
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
    if (total < 3) {
      zmq_msg_init(&frames->parts[total]);
      zmq_msg_move(&frames->parts[total], &m);
      frames->count = total + 1;
    }
    zmq_msg_close(&m);
    ++total;
  }
  *valid = total == 3;
  if (!*valid) {
    counters_.malformed_received.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  PeerId peer = dealer_peer;
  if (is_router) {
    auto it = routing_ids_.find(routing_id);
    if (it == routing_ids_.end()) {
      peer = static_cast<PeerId>(peers_.size());
      peers_.push_back(Peer{socket, routing_id});
      routing_ids_.emplace(std::move(routing_id), peer);
    } else {
      peer = it->second;
    }
  }
  out->peer = peer;
  if (is_router && zap_ != nullptr) out->peer_role = CurvePeerRole(&frames->parts[0]);
  out->header = frames->View(frames, 0);
  out->keys = frames->View(frames, 1);
  out->values = frames->View(frames, 2);
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_received.fetch_add(out->bytes(), std::memory_order_relaxed);
  return true;
}

void ZmqTransport::Run() {
  io_thread_id_.store(std::this_thread::get_id());
  std::vector<void*> sockets;
  std::vector<PeerId> socket_peers;
  std::vector<pollfd> fds;
  while (!stop_requested_.load()) {
    {
      MutexLock lock(&mu_);
      if (sockets_changed_ || fds.empty()) {
        sockets = sockets_;
        socket_peers = socket_peers_;
        fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
        for (void* s : sockets) {
          int fd = -1;
          size_t len = sizeof(fd);
          zmq_getsockopt(s, ZMQ_FD, &fd, &len);
          fds.push_back(pollfd{fd, POLLIN, 0});
        }
        sockets_changed_ = false;
      }
    }
    // Take messages until every socket reports none pending: only then is it safe to sleep on
    // the ZMQ_FDs, which signal changes, not readiness.
    bool progress = true;
    while (progress && !stop_requested_.load()) {
      progress = false;
      for (size_t i = 0; i < sockets.size(); ++i) {
        for (int k = 0; k < kRecvBatch && !stop_requested_.load(); ++k) {
          Message msg;
          bool valid = false;
          {
            MutexLock lock(&mu_);
            if (!ReceiveOne(sockets[i], socket_peers[i], &msg, &valid)) break;
          }
          progress = true;
          if (valid) handler_(std::move(msg));
        }
      }
    }
    if (stop_requested_.load()) break;
    if (::poll(fds.data(), fds.size(), -1) > 0 && (fds[0].revents & POLLIN)) {
      uint64_t count;
      ssize_t n = ::read(wake_fd_, &count, sizeof(count));
      (void)n;
    }
  }
  io_thread_id_.store(std::thread::id());
}

TransportStats ZmqTransport::stats() const {
  TransportStats s;
  s.messages_sent = counters_.messages_sent.load();
  s.messages_received = counters_.messages_received.load();
  s.bytes_sent = counters_.bytes_sent.load();
  s.bytes_received = counters_.bytes_received.load();
  s.malformed_received = counters_.malformed_received.load();
  s.send_failures = counters_.send_failures.load();
  s.auth_refused = zap_ != nullptr ? zap_->refused() : 0;
  return s;
}

}  // namespace osprey
