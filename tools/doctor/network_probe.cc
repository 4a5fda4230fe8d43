// `osprey doctor --network`: the small-message curve against a running server (see checks.h).
// A synchronous round-trip client over one dialer Transport (the transport the workers use).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "proto/wire.h"
#include "tools/doctor/checks.h"

namespace osprey::tools::doctor {
namespace {

constexpr int kMaxProbeKeys = 256;

class RoundTripper {
 public:
  static StatusOr<std::unique_ptr<RoundTripper>> Create(const std::string& endpoint,
                                                        const TransportOptions& options) {
    StatusOr<std::unique_ptr<Transport>> t = MakeTransport(options);
    if (!t.ok()) return t.status();
    std::unique_ptr<RoundTripper> rt(new RoundTripper(std::move(t).value()));
    rt->transport_->SetHandler([p = rt.get()](Message&& m) { p->OnMessage(std::move(m)); });
    StatusOr<PeerId> peer = rt->transport_->Connect(endpoint);
    if (!peer.ok()) return peer.status();
    rt->peer_ = *peer;
    OSPREY_RETURN_IF_ERROR(rt->transport_->Start());
    return rt;
  }
  ~RoundTripper() { transport_->Stop(); }

  // Sends a sparse pull of `keys` and waits for its reply: OK with *reply_bytes, or the error
  // the server sent, or DeadlineExceeded.
  Status Pull(uint32_t table, uint64_t epoch, const Buffer& keys, int timeout_ms,
              size_t* reply_bytes) {
    proto::Header h;
    h.set_op(proto::OP_PULL_SPARSE);
    h.set_table(table);
    h.set_request_id(++next_id_);
    h.set_worker_rank(-1);
    h.set_num_keys(keys.size() / sizeof(uint64_t));
    h.set_epoch(epoch);
    Message msg;
    msg.peer = peer_;
    msg.header = SerializeHeader(h);
    msg.keys = keys;
    OSPREY_RETURN_IF_ERROR(transport_->Send(std::move(msg)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    MutexLock lock(&mu_);
    while (true) {
      if (!cv_.WaitUntil(&lock, deadline, [&]() REQUIRES(mu_) { return !replies_.empty(); })) {
        return DeadlineExceeded("no reply within " + std::to_string(timeout_ms) + " ms");
      }
      Message r = std::move(replies_.front());
      replies_.pop_front();
      StatusOr<proto::Header> rh = ParseHeader(r.header);
      if (!rh.ok() || rh->request_id() != h.request_id()) continue;  // a late reply
      if (rh->op() == proto::OP_ERROR) return StatusFromHeader(*rh);
      *reply_bytes = r.values.size();
      return Status::OK();
    }
  }

 private:
  explicit RoundTripper(std::unique_ptr<Transport> t) : transport_(std::move(t)) {}
  void OnMessage(Message&& m) {
    MutexLock lock(&mu_);
    replies_.push_back(std::move(m));
    cv_.SignalAll();
  }

  const std::unique_ptr<Transport> transport_;
  PeerId peer_ = -1;
  uint64_t next_id_ = 0;
  Mutex mu_;
  CondVar cv_;
  std::deque<Message> replies_ GUARDED_BY(mu_);
};

Buffer RepeatedKey(uint64_t key, size_t n) {
  return Buffer::FromVector(std::vector<uint64_t>(n, key));
}

// The epoch a "shard-map epoch E is not the current epoch N" refusal names, or 0.
uint64_t CurrentEpochFrom(const Status& s) {
  const std::string& m = s.message();
  const size_t at = m.find("current epoch ");
  return at == std::string::npos ? 0 : std::strtoull(m.c_str() + at + 14, nullptr, 10);
}

}  // namespace

StatusOr<std::vector<NetworkPoint>> MeasureNetwork(const std::string& endpoint,
                                                   const TransportOptions& options, uint32_t table,
                                                   const std::vector<uint64_t>& sizes,
                                                   int timeout_ms) {
  auto rt = RoundTripper::Create(endpoint, options);
  if (!rt.ok()) return rt.status().WithContext(endpoint);
  // Find the epoch and a key this server owns with one-key pulls; the reply's size is the row's.
  uint64_t epoch = 1, key = 0;
  size_t row_bytes = 0;
  Status last;
  for (int tries = 0; tries < kMaxProbeKeys + 2 && row_bytes == 0; ++tries) {
    last = (*rt)->Pull(table, epoch, RepeatedKey(key, 1), timeout_ms, &row_bytes);
    if (last.ok()) break;
    if (last.code() == StatusCode::kDeadlineExceeded) {
      return last.WithContext("osprey doctor --network " + endpoint +
                              " (is an osprey-server listening there? under security: curve "
                              "pass --keys DIR)");
    }
    if (const uint64_t e = CurrentEpochFrom(last); e != 0 && e != epoch) {
      epoch = e;
      continue;
    }
    if (++key >= kMaxProbeKeys) break;
  }
  if (row_bytes == 0) {
    return FailedPrecondition("osprey doctor --network " + endpoint + ": table " +
                              std::to_string(table) + " refused every probe pull (last: " +
                              last.ToString() + "); --network-table names a sparse table");
  }
  std::vector<NetworkPoint> out;
  for (uint64_t size : sizes) {
    const size_t n = std::max<size_t>(1, size / row_bytes);
    const Buffer keys = RepeatedKey(key, n);
    std::vector<double> times;
    // Warm up once, then runs until 7 runs or ~1 s (at least 3).
    size_t reply = 0;
    Status s = (*rt)->Pull(table, epoch, keys, timeout_ms, &reply);
    if (!s.ok()) return s.WithContext("pull of " + std::to_string(n) + " keys");
    const auto start = std::chrono::steady_clock::now();
    while (times.size() < 7 &&
           (times.size() < 3 || std::chrono::steady_clock::now() - start < std::chrono::seconds(1))) {
      const auto t0 = std::chrono::steady_clock::now();
      s = (*rt)->Pull(table, epoch, keys, timeout_ms, &reply);
      if (!s.ok()) return s.WithContext("pull of " + std::to_string(n) + " keys");
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    NetworkPoint p;
    p.reply_bytes = reply;
    p.request_bytes = n * sizeof(uint64_t);
    const double median = times[times.size() / 2];
    p.median_us = median * 1e6;
    p.gbps = static_cast<double>(p.reply_bytes + p.request_bytes) / median / 1e9;
    p.runs = static_cast<int>(times.size());
    out.push_back(p);
  }
  return out;
}

}  // namespace osprey::tools::doctor
