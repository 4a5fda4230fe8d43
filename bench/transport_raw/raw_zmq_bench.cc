#include "bench/transport_raw/raw_zmq_bench.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "bench/transport_raw/child_server.h"
#include "common/buffer.h"

namespace osprey::bench {
namespace {

constexpr size_t kZeroCopyBytes = 64 << 10;  // same threshold as ZmqTransport

Status ZmqError(const std::string& what) {
  return Unavailable(what + ": " + zmq_strerror(zmq_errno()));
}

// Sends one frame: zero-copy from `data` (which must outlive the send) when large, else copied.
int SendFrame(void* socket, const void* data, size_t size, int flags) {
  zmq_msg_t m;
  if (size >= kZeroCopyBytes) {
    zmq_msg_init_data(&m, const_cast<void*>(data), size, nullptr, nullptr);
  } else {
    zmq_msg_init_size(&m, size);
    if (size > 0) std::memcpy(zmq_msg_data(&m), data, size);
  }
  int rc = zmq_msg_send(&m, socket, flags);
  if (rc < 0) zmq_msg_close(&m);
  return rc;
}

// Receives all parts of one message into `parts` (closing extra ones); returns the part count.
int RecvMessage(void* socket, zmq_msg_t* parts, int max_parts) {
  int n = 0;
  while (true) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, 0) < 0) {
      zmq_msg_close(&m);
      for (int i = 0; i < std::min(n, max_parts); ++i) zmq_msg_close(&parts[i]);
      return -1;
    }
    bool more = zmq_msg_more(&m);
    if (n < max_parts) {
      zmq_msg_init(&parts[n]);
      zmq_msg_move(&parts[n], &m);
    } else {
      zmq_msg_close(&m);
    }
    ++n;
    if (!more) return n;
  }
}

void ConfigureSocket(void* s) {
  int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
}

// The echo server body (child process): ROUTER, replies `reply_bytes` from a persistent buffer.
int RawEchoServe(const std::string& listen, const ChildServer::ReadyFn& ready) {
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_ROUTER);
  ConfigureSocket(s);
  if (zmq_bind(s, listen.c_str()) != 0) return 2;
  char ep[256];
  size_t ep_len = sizeof(ep);
  zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &ep_len);
  ready(ep);
  std::vector<uint8_t> reply;
  int rc = 0;
  while (true) {
    zmq_msg_t parts[4];
    int n = RecvMessage(s, parts, 4);
    if (n < 0) { rc = 3; break; }
    if (n != 4 || zmq_msg_size(&parts[1]) != sizeof(EchoHeader)) {
      for (int i = 0; i < std::min(n, 4); ++i) zmq_msg_close(&parts[i]);
      continue;
    }
    EchoHeader h;
    std::memcpy(&h, zmq_msg_data(&parts[1]), sizeof(h));
    zmq_msg_close(&parts[3]);  // the request's values: freed as soon as it is consumed
    if (reply.size() < h.reply_bytes) reply.assign(h.reply_bytes, 0x5a);
    zmq_msg_send(&parts[0], s, ZMQ_SNDMORE);  // identity, moved back
    zmq_msg_send(&parts[1], s, ZMQ_SNDMORE);  // header, echoed
    zmq_msg_send(&parts[2], s, ZMQ_SNDMORE);  // keys (empty)
    SendFrame(s, reply.data(), h.reply_bytes, 0);
    if (h.quit) break;
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  if (listen.rfind("ipc://", 0) == 0) ::unlink(listen.c_str() + 6);
  return rc;
}

class RawClient {
 public:
  ~RawClient() {
    if (s_) zmq_close(s_);
    if (ctx_) zmq_ctx_term(ctx_);
  }
  Status Connect(const std::string& endpoint) {
    ctx_ = zmq_ctx_new();
    s_ = zmq_socket(ctx_, ZMQ_DEALER);
    ConfigureSocket(s_);
    if (zmq_connect(s_, endpoint.c_str()) != 0) return ZmqError("connect " + endpoint);
    return Status::OK();
  }
  Status SendRequest(const EchoHeader& h, const void* values, size_t values_bytes) {
    if (SendFrame(s_, &h, sizeof(h), ZMQ_SNDMORE) < 0 || SendFrame(s_, nullptr, 0, ZMQ_SNDMORE) < 0 ||
        SendFrame(s_, values, values_bytes, 0) < 0) {
      return ZmqError("send");
    }
    return Status::OK();
  }
  Status RecvReply() {
    zmq_msg_t parts[3];
    int n = RecvMessage(s_, parts, 3);
    if (n != 3) return ZmqError("recv (parts: " + std::to_string(n) + ")");
    for (auto& p : parts) zmq_msg_close(&p);
    return Status::OK();
  }

 private:
  void* ctx_ = nullptr;
  void* s_ = nullptr;
};

}  // namespace

Status ValidateEchoConfig(const EchoBenchConfig& c) {
  if (c.transport != "tcp" && c.transport != "ipc") {
    return InvalidArgument("bench transport must be tcp or ipc, got '" + c.transport + "'");
  }
  if (c.iters <= 0 || c.runs <= 0 || c.window <= 0 || c.warmup < 0) {
    return InvalidArgument("bench iters, runs and window must be positive");
  }
  return Status::OK();
}

StatusOr<std::string> BenchListenEndpoint(const std::string& transport) {
  static std::atomic<int> counter{0};
  if (transport == "tcp") return std::string("tcp://127.0.0.1:0");
  if (transport == "ipc") {
    return "ipc:///tmp/osprey-bench-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++) + ".sock";
  }
  return InvalidArgument("bench transport must be tcp or ipc, got '" + transport + "'");
}

RawZmqResult SummarizeRuns(std::vector<double> run_seconds, double cpu_seconds,
                           const EchoBenchConfig& c) {
  std::sort(run_seconds.begin(), run_seconds.end());
  double per_op = run_seconds[run_seconds.size() / 2] / c.iters;
  RawZmqResult r;
  r.median_us = per_op * 1e6;
  r.gbps = static_cast<double>(c.bytes) / per_op / 1e9;
  r.msgs_per_sec = 1.0 / per_op;
  r.cpu_us = cpu_seconds * 1e6 / (static_cast<double>(c.iters) * c.runs + c.warmup);
  return r;
}

StatusOr<RawZmqResult> RunRawZmqBench(const EchoBenchConfig& c) {
  OSPREY_RETURN_IF_ERROR(ValidateEchoConfig(c));
  OSPREY_ASSIGN_OR_RETURN(std::string listen, BenchListenEndpoint(c.transport));
  OSPREY_ASSIGN_OR_RETURN(
      auto server, ChildServer::Start([listen](const ChildServer::ReadyFn& ready) {
        return RawEchoServe(listen, ready);
      }, !c.server_in_child_process));
  const double cpu0 = SelfCpuSeconds();
  RawClient client;
  OSPREY_RETURN_IF_ERROR(client.Connect(server->endpoint()));

  Buffer payload = Buffer::Allocate(c.shape == EchoShape::kPush ? c.bytes : 0);
  if (!payload.empty()) std::memset(payload.mutable_data(), 0xa5, payload.size());
  EchoHeader h;
  h.reply_bytes = c.shape == EchoShape::kPull ? c.bytes : 0;
  // Runs `count` operations with up to c.window in flight.
  auto run = [&](int count) -> Status {
    int sent = 0, done = 0;
    while (done < count) {
      while (sent < count && sent - done < c.window) {
        OSPREY_RETURN_IF_ERROR(client.SendRequest(h, payload.data(), payload.size()));
        ++sent;
      }
      OSPREY_RETURN_IF_ERROR(client.RecvReply());
      ++done;
    }
    return Status::OK();
  };
  Status st = run(c.warmup);
  std::vector<double> seconds;
  for (int r = 0; st.ok() && r < c.runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    st = run(c.iters);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  EchoHeader quit;
  quit.quit = 1;
  if (client.SendRequest(quit, nullptr, 0).ok()) (void)client.RecvReply();
  double server_cpu = 0;
  Status wait = server->Wait(&server_cpu);
  const double cpu = SelfCpuSeconds() - cpu0 + server_cpu;
  OSPREY_RETURN_IF_ERROR(st);
  OSPREY_RETURN_IF_ERROR(wait);
  return SummarizeRuns(std::move(seconds), cpu, c);
}

StatusOr<RawZmqResult> RawZmqRoundTrip(const std::string& transport, size_t bytes,
                                       EchoShape shape, int iters, int runs) {
  EchoBenchConfig c;
  c.transport = transport;
  c.bytes = bytes;
  c.shape = shape;
  c.iters = iters;
  c.runs = runs;
  return RunRawZmqBench(c);
}

StatusOr<RawZmqResult> RawZmqPipelined(const std::string& transport, size_t bytes, int window,
                                       int iters, int runs) {
  EchoBenchConfig c;
  c.transport = transport;
  c.bytes = bytes;
  c.window = window;
  c.iters = iters;
  c.runs = runs;
  return RunRawZmqBench(c);
}

}  // namespace osprey::bench
