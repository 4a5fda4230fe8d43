#include "common/inproc_transport.h"

namespace osprey {
namespace {

constexpr char kScheme[] = "inproc://";

Status CheckInprocEndpoint(const std::string& endpoint) {
  if (endpoint.rfind(kScheme, 0) == 0 && endpoint.size() > sizeof(kScheme) - 1) {
    return Status::OK();
  }
  return InvalidArgument("inproc transport: unsupported endpoint '" + endpoint +
                         "' (want inproc://<name>)");
}

}  // namespace

namespace inproc_internal {

bool Inbox::Push(Delivery&& d) {
  {
    MutexLock lock(&mu);
    if (closed) return false;
    queue.push_back(std::move(d));
  }
  cv.Signal();
  return true;
}

}  // namespace inproc_internal

// ---- InprocHub ----

size_t InprocHub::pending_messages() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [name, queue] : pending_) n += queue.size();
  return n;
}

Status InprocHub::Register(const std::string& endpoint, std::shared_ptr<Inbox> inbox) {
  MutexLock lock(&mu_);
  if (listeners_.count(endpoint) > 0) {
    return Unavailable("inproc transport: address in use: " + endpoint);
  }
  // Messages sent before anyone listened go first, in the order they were sent. Delivering under
  // mu_ keeps a concurrent Deliver from overtaking them.
  auto it = pending_.find(endpoint);
  if (it != pending_.end()) {
    for (Delivery& d : it->second) inbox->Push(std::move(d));
    pending_.erase(it);
  }
  listeners_.emplace(endpoint, std::move(inbox));
  return Status::OK();
}

void InprocHub::Unregister(const std::string& endpoint, const Inbox* inbox) {
  MutexLock lock(&mu_);
  auto it = listeners_.find(endpoint);
  if (it != listeners_.end() && it->second.get() == inbox) listeners_.erase(it);
}

void InprocHub::Deliver(const std::string& endpoint, Delivery&& d) {
  MutexLock lock(&mu_);
  auto it = listeners_.find(endpoint);
  if (it != listeners_.end()) {
    it->second->Push(std::move(d));  // dropped if that listener is stopping: a lost message
  } else {
    pending_[endpoint].push_back(std::move(d));
  }
}

uint64_t InprocHub::NewConnectionId() {
  MutexLock lock(&mu_);
  return next_connection_++;
}

// ---- InprocTransport ----

InprocTransport::InprocTransport(std::shared_ptr<InprocHub> hub)
    : hub_(std::move(hub)), inbox_(std::make_shared<inproc_internal::Inbox>()) {}

InprocTransport::~InprocTransport() { Stop(); }

StatusOr<std::string> InprocTransport::Listen(const std::string& endpoint) {
  OSPREY_RETURN_IF_ERROR(CheckInprocEndpoint(endpoint));
  MutexLock lock(&mu_);
  if (started_ || stopped_) {
    return FailedPrecondition("inproc transport: Listen(" + endpoint + ") after Start or Stop");
  }
  OSPREY_RETURN_IF_ERROR(hub_->Register(endpoint, inbox_));
  listening_.push_back(endpoint);
  return endpoint;
}

StatusOr<PeerId> InprocTransport::Connect(const std::string& endpoint) {
  OSPREY_RETURN_IF_ERROR(CheckInprocEndpoint(endpoint));
  uint64_t connection = hub_->NewConnectionId();
  MutexLock lock(&mu_);
  if (stopped_) return FailedPrecondition("inproc transport: Connect(" + endpoint + ") after Stop");
  Peer p;
  p.dialed = true;
  p.endpoint = endpoint;
  p.connection = connection;
  peers_.push_back(std::move(p));
  return static_cast<PeerId>(peers_.size() - 1);
}

void InprocTransport::SetHandler(Handler handler) { handler_ = std::move(handler); }

Status InprocTransport::Start() {
  MutexLock lock(&mu_);
  if (started_ || stopped_) return FailedPrecondition("inproc transport: Start called twice");
  if (!handler_) return FailedPrecondition("inproc transport: Start without a handler");
  started_ = true;
  io_thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void InprocTransport::Stop() {
  {
    MutexLock lock(&inbox_->mu);
    stop_requested_.store(true);
    inbox_->closed = true;
    inbox_->queue.clear();  // queued, not yet handled: dropped
  }
  inbox_->cv.SignalAll();
  if (std::this_thread::get_id() == io_thread_id_.load()) return;  // from the handler
  if (io_thread_.joinable()) io_thread_.join();
  std::vector<std::string> listening;
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    listening.swap(listening_);
  }
  for (const std::string& ep : listening) hub_->Unregister(ep, inbox_.get());
}

Status InprocTransport::Send(Message msg) {
  Peer route;
  {
    MutexLock lock(&mu_);
    if (!started_ || stopped_) return FailedPrecondition("inproc transport: Send while not running");
    if (msg.peer < 0 || static_cast<size_t>(msg.peer) >= peers_.size()) {
      return NotFound("inproc transport: unknown peer " + std::to_string(msg.peer));
    }
    route = peers_[msg.peer];
  }
  const size_t bytes = msg.bytes();
  if (route.dialed) {
    inproc_internal::Delivery d;
    d.dialer_peer = msg.peer;
    d.msg = std::move(msg);
    d.connection = route.connection;
    d.reply_to = inbox_;
    hub_->Deliver(route.endpoint, std::move(d));
  } else {
    std::shared_ptr<inproc_internal::Inbox> target = route.inbox.lock();
    PeerId peer = msg.peer;
    inproc_internal::Delivery d;
    d.msg = std::move(msg);
    d.is_reply = true;
    d.reply_peer = route.dialer_peer;
    if (target == nullptr || !target->Push(std::move(d))) {
      send_failures_.fetch_add(1, std::memory_order_relaxed);
      return Unavailable("inproc transport: peer " + std::to_string(peer) + " is not connected");
    }
  }
  messages_sent_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::OK();
}

PeerId InprocTransport::ResolveSender(const inproc_internal::Delivery& d) {
  if (d.is_reply) return d.reply_peer;
  MutexLock lock(&mu_);
  auto it = connections_.find(d.connection);
  if (it != connections_.end()) return it->second;
  Peer p;
  p.inbox = d.reply_to;
  p.dialer_peer = d.dialer_peer;
  peers_.push_back(std::move(p));
  PeerId id = static_cast<PeerId>(peers_.size() - 1);
  connections_.emplace(d.connection, id);
  return id;
}

void InprocTransport::Run() {
  io_thread_id_.store(std::this_thread::get_id());
  std::deque<inproc_internal::Delivery> batch;
  while (true) {
    {
      MutexLock lock(&inbox_->mu);
      inbox_->cv.Wait(&lock, [&]() REQUIRES(inbox_->mu) {
        return stop_requested_.load() || !inbox_->queue.empty();
      });
      if (stop_requested_.load()) break;
      batch.swap(inbox_->queue);
    }
    while (!batch.empty() && !stop_requested_.load()) {
      inproc_internal::Delivery d = std::move(batch.front());
      batch.pop_front();
      d.msg.peer = ResolveSender(d);
      messages_received_.fetch_add(1, std::memory_order_relaxed);
      bytes_received_.fetch_add(d.msg.bytes(), std::memory_order_relaxed);
      handler_(std::move(d.msg));
    }
    batch.clear();
  }
  io_thread_id_.store(std::thread::id());
}

TransportStats InprocTransport::stats() const {
  TransportStats s;
  s.messages_sent = messages_sent_.load();
  s.messages_received = messages_received_.load();
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.send_failures = send_failures_.load();
  return s;
}

// ---- FaultInjectingTransport ----

namespace {

// Decrements `counter` if positive; true when it did (this event is to be dropped).
bool TakeOne(std::atomic<int>* counter) {
  int n = counter->load();
  while (n > 0 && !counter->compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

}  // namespace

FaultInjectingTransport::FaultInjectingTransport(std::unique_ptr<Transport> inner)
    : inner_(std::move(inner)) {}

FaultInjectingTransport::~FaultInjectingTransport() { inner_->Stop(); }

StatusOr<std::string> FaultInjectingTransport::Listen(const std::string& endpoint) {
  return inner_->Listen(endpoint);
}

StatusOr<PeerId> FaultInjectingTransport::Connect(const std::string& endpoint) {
  return inner_->Connect(endpoint);
}

void FaultInjectingTransport::SetHandler(Handler handler) {
  inner_->SetHandler([this, handler = std::move(handler)](Message&& msg) {
    if (TakeOne(&drop_receives_)) {
      dropped_receives_.fetch_add(1);
      return;
    }
    handler(std::move(msg));
  });
}

Status FaultInjectingTransport::Start() { return inner_->Start(); }
void FaultInjectingTransport::Stop() { inner_->Stop(); }

Status FaultInjectingTransport::Send(Message msg) {
  if (fail_sends_.load()) {
    return Unavailable("fault injection: send to peer " + std::to_string(msg.peer) + " failed");
  }
  if (TakeOne(&drop_sends_)) {
    dropped_sends_.fetch_add(1);
    return Status::OK();
  }
  return inner_->Send(std::move(msg));
}

TransportStats FaultInjectingTransport::stats() const { return inner_->stats(); }

}  // namespace osprey
