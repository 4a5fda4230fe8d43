#include "bench/transport_raw/transport_echo_bench.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "bench/transport_raw/child_server.h"
#include "common/zmq_transport.h"

namespace osprey::bench {
namespace {

Buffer HeaderBuffer(const EchoHeader& h) { return Buffer::Copy(&h, sizeof(h)); }

// The child's body: a ZmqTransport listener that echoes until told to quit.
int TransportEchoServe(const std::string& listen, const TransportOptions& options,
                       const ChildServer::ReadyFn& ready) {
  ZmqTransport t(options);
  auto ep = t.Listen(listen);
  if (!ep.ok()) return 2;
  std::mutex mu;
  std::condition_variable cv;
  bool quit = false;
  Buffer reply;  // grown on demand; only the I/O thread touches it
  t.SetHandler([&](Message&& m) {
    if (m.header.size() != sizeof(EchoHeader)) return;
    EchoHeader h;
    std::memcpy(&h, m.header.data(), sizeof(h));
    if (reply.size() < h.reply_bytes) {
      reply = Buffer::Allocate(h.reply_bytes);
      std::memset(reply.mutable_data(), 0x5a, reply.size());
    }
    Message r;
    r.peer = m.peer;
    r.header = std::move(m.header);
    r.values = reply.Slice(0, h.reply_bytes);
    (void)t.Send(std::move(r));
    if (h.quit) {
      std::lock_guard<std::mutex> lock(mu);
      quit = true;
      cv.notify_all();
    }
  });
  if (!t.Start().ok()) return 3;
  ready(*ep);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return quit; });
  lock.unlock();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the last reply leave
  t.Stop();
  return 0;
}

// Client-side state shared between the driving thread and the handler.
struct EchoClient {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;     // replies seen; guarded by mu
  int target = 0;   // kHandler: requests to send in this run
  int sent = 0;     // kHandler: requests sent so far (I/O thread after the first window)
  Status error;     // first Send error
};

}  // namespace

StatusOr<RawZmqResult> RunTransportEchoBench(const EchoBenchConfig& c,
                                             const TransportOptions& options, EchoDriver driver) {
  OSPREY_RETURN_IF_ERROR(ValidateEchoConfig(c));
  OSPREY_ASSIGN_OR_RETURN(std::string listen, BenchListenEndpoint(c.transport));
  OSPREY_ASSIGN_OR_RETURN(
      auto server, ChildServer::Start([listen, options](const ChildServer::ReadyFn& ready) {
        return TransportEchoServe(listen, options, ready);
      }, !c.server_in_child_process));

  const double cpu0 = SelfCpuSeconds();
  ZmqTransport t(options);
  OSPREY_ASSIGN_OR_RETURN(PeerId peer, t.Connect(server->endpoint()));
  Buffer payload = Buffer::Allocate(c.shape == EchoShape::kPush ? c.bytes : 0);
  if (!payload.empty()) std::memset(payload.mutable_data(), 0xa5, payload.size());
  EchoHeader h;
  h.reply_bytes = c.shape == EchoShape::kPull ? c.bytes : 0;
  const Buffer header = HeaderBuffer(h);
  auto request = [&] {
    Message m;
    m.peer = peer;
    m.header = header;
    m.values = payload;
    return m;
  };

  EchoClient st;
  t.SetHandler([&](Message&& reply) {
    std::lock_guard<std::mutex> lock(st.mu);
    ++st.done;
    if (driver == EchoDriver::kHandler && st.sent < st.target) {
      ++st.sent;
      Status s = t.Send(request());
      if (!s.ok() && st.error.ok()) st.error = s;
    }
    // Wake the driving thread only when it has something to do, as a real client would.
    if (driver == EchoDriver::kCallerThread || st.done == st.target || !st.error.ok()) {
      st.cv.notify_one();
    }
  });
  OSPREY_RETURN_IF_ERROR(t.Start());

  // Runs `count` operations with up to c.window in flight.
  auto run = [&](int count) -> Status {
    std::unique_lock<std::mutex> lock(st.mu);
    st.done = 0;
    st.sent = 0;
    st.target = count;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (st.done < count) {
      while (st.sent < count && st.sent - st.done < c.window &&
             (driver == EchoDriver::kCallerThread || st.sent < c.window)) {
        ++st.sent;
        lock.unlock();
        Status s = t.Send(request());
        lock.lock();
        if (!s.ok()) return s;
      }
      if (!st.error.ok()) return st.error;
      if (!st.cv.wait_until(lock, deadline, [&] {
            return st.done == count || !st.error.ok() ||
                   (driver == EchoDriver::kCallerThread && st.sent - st.done < c.window &&
                    st.sent < count);
          })) {
        return DeadlineExceeded("transport echo bench: no reply in 60 s");
      }
    }
    return Status::OK();
  };
  Status status = run(c.warmup);
  std::vector<double> seconds;
  for (int r = 0; status.ok() && r < c.runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    status = run(c.iters);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  EchoHeader quit;
  quit.quit = 1;
  Message q;
  q.peer = peer;
  q.header = HeaderBuffer(quit);
  (void)t.Send(std::move(q));
  double server_cpu = 0;
  Status wait = server->Wait(&server_cpu);
  t.Stop();
  const double cpu = SelfCpuSeconds() - cpu0 + server_cpu;
  OSPREY_RETURN_IF_ERROR(status);
  OSPREY_RETURN_IF_ERROR(wait);
  return SummarizeRuns(std::move(seconds), cpu, c);
}

}  // namespace osprey::bench
