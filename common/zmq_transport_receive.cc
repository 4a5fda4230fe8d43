// ZmqTransport's receive side: the I/O thread's loop and ReceiveUntil, the caller-side receiver
// (the receive lease: zmq_transport.h).
#include <poll.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>

#include "common/zmq_transport.h"

namespace osprey {
namespace {

// Receive passes take at most this many messages from one socket before moving to the next, so
// one busy peer cannot starve the others.
constexpr int kRecvBatch = 64;
// A caller in ReceiveUntil sleeps at most this long between looks at done() and Stop: a ticket
// may also finish without a message (Stop, a failover decision on another thread).
constexpr int64_t kReceiverPollMs = 20;

void DrainEventFd(int fd) {
  uint64_t count;
  ssize_t n = ::read(fd, &count, sizeof(count));
  (void)n;
}

}  // namespace

void ZmqTransport::LoadView(ReceiverView* v, int wake_fd) {
  v->generation = sockets_generation_;
  v->sockets = sockets_;
  v->entries = socket_entries_;
  v->fds.assign(1, pollfd{wake_fd, POLLIN, 0});
  for (void* s : v->sockets) {
    int fd = -1;
    size_t len = sizeof(fd);
    zmq_getsockopt(s, ZMQ_FD, &fd, &len);
    v->fds.push_back(pollfd{fd, POLLIN, 0});
  }
}

ZmqTransport::Pass ZmqTransport::DrainPass(ReceiverView* v, const std::function<bool()>& halt) {
  bool progress = false;
  for (size_t i = 0; i < v->sockets.size(); ++i) {
    for (int k = 0; k < kRecvBatch; ++k) {
      Message msg;
      bool valid = false;
      MutexLock handling(&handle_mu_);
      if (halt()) return Pass::kHalted;
      {
        MutexLock lock(&mu_);
        // A session change may have closed a socket of this list: take the new one first.
        if (sockets_generation_ != v->generation) return Pass::kReload;
        if (!ReceiveOne(v->sockets[i], v->entries[i], &msg, &valid)) break;
      }
      progress = true;
      if (valid) handler_(std::move(msg));
    }
  }
  return progress ? Pass::kProgress : Pass::kEmpty;
}

void ZmqTransport::Run() {
  io_thread_id_.store(std::this_thread::get_id());
  ReceiverView v;
  auto halt = [this] { return stop_requested_.load() || lease_.load() == kLeaseReceiver; };
  while (!stop_requested_.load()) {
    {
      MutexLock lock(&mu_);
      if (v.generation != sockets_generation_) LoadView(&v, wake_fd_);
    }
    // Take messages until every socket reports none pending: only then is it safe to sleep on
    // the ZMQ_FDs, which signal changes, not readiness.
    Pass pass = Pass::kProgress;
    while (pass == Pass::kProgress) pass = DrainPass(&v, halt);
    if (stop_requested_.load()) break;
    if (pass == Pass::kReload) continue;
    // While a caller receives, sleep on the eventfd alone (its release writes it).
    const size_t n = lease_.load() == kLeaseReceiver ? 1 : v.fds.size();
    if (::poll(v.fds.data(), n, -1) > 0 && (v.fds[0].revents & POLLIN)) DrainEventFd(wake_fd_);
  }
  io_thread_id_.store(std::thread::id());
}

bool ZmqTransport::ReceiveUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  const std::thread::id me = std::this_thread::get_id();
  if (me == io_thread_id_.load()) return false;
  int expected = kLeaseFree;
  if (!lease_.compare_exchange_strong(expected, kLeaseReceiver)) return false;
  bool running = false;
  {
    MutexLock lock(&mu_);
    running = started_ && !stopped_;
  }
  if (!running || stop_requested_.load()) {
    lease_.store(kLeaseFree);
    return false;
  }
  receiver_thread_id_.store(me);
  // The I/O thread finishes the message it may be handling and, seeing the lease, takes no more.
  { MutexLock handling(&handle_mu_); }
  ReceiverView v;
  auto halt = [&] { return stop_requested_.load() || done(); };
  while (!halt()) {
    {
      MutexLock lock(&mu_);
      if (v.generation != sockets_generation_) LoadView(&v, receiver_wake_fd_);
    }
    if (DrainPass(&v, halt) != Pass::kEmpty) continue;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const int ms = static_cast<int>(std::min<int64_t>(left.count(), kReceiverPollMs));
    if (::poll(v.fds.data(), v.fds.size(), ms) > 0 && (v.fds[0].revents & POLLIN)) DrainEventFd(receiver_wake_fd_);
  }
  receiver_thread_id_.store(std::thread::id());
  lease_.store(kLeaseFree);
  Wake();  // the I/O thread takes over (and drains what came after done())
  return true;
}

}  // namespace osprey
