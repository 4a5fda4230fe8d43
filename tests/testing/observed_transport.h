// ObservedTransport: a TEST SEAM that wraps (and owns) a Transport and lets a test see what goes
// through it, so client tests can wait on events instead of sleeping:
//   - every sent message's header, and its frames by address and size (SentFrame), to prove a
//     frame is the caller's own memory (zero-copy);
//   - sends can be held back (HoldSends) and let go later (ReleaseHeld), to prove the client
//     keeps a caller's Buffers alive until the transport sent them;
//   - the number of received messages the handler has finished with (handled()), and a bounded
//     wait for it (WaitForHandled).
// Thread-safety: every method is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace osprey::testing {

struct SentFrame {
  Buffer header;  // the serialized header (proto/wire.h ParseHeader reads it)
  const uint8_t* keys = nullptr;
  size_t keys_size = 0;
  const uint8_t* values = nullptr;
  size_t values_size = 0;
};

class ObservedTransport final : public Transport {
 public:
  explicit ObservedTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  ~ObservedTransport() override { inner_->Stop(); }

  StatusOr<std::string> Listen(const std::string& endpoint) override { return inner_->Listen(endpoint); }
  StatusOr<PeerId> Connect(const std::string& endpoint) override { return inner_->Connect(endpoint); }
  void SetHandler(Handler handler) override {
    inner_->SetHandler([this, handler = std::move(handler)](Message&& m) {
      handler(std::move(m));
      MutexLock lock(&mu_);
      ++handled_;
      cv_.SignalAll();
    });
  }
  Status Start() override { return inner_->Start(); }
  void Stop() override { inner_->Stop(); }
  Status Send(Message msg) override {
    MutexLock lock(&mu_);
    sent_.push_back({msg.header, msg.keys.data(), msg.keys.size(), msg.values.data(), msg.values.size()});
    if (hold_) {
      held_.push_back(std::move(msg));
      return Status::OK();
    }
    lock.Unlock();
    return inner_->Send(std::move(msg));
  }
  TransportStats stats() const override { return inner_->stats(); }

  // While on, sent messages are kept here (Send returns OK) until ReleaseHeld.
  void HoldSends(bool on) {
    MutexLock lock(&mu_);
    hold_ = on;
  }
  // Sends the held messages, in order; the first error, if any.
  Status ReleaseHeld() {
    std::deque<Message> held;
    {
      MutexLock lock(&mu_);
      held.swap(held_);
    }
    Status first;
    for (Message& m : held) {
      Status s = inner_->Send(std::move(m));
      if (first.ok()) first = s;
    }
    return first;
  }
  size_t held() const {
    MutexLock lock(&mu_);
    return held_.size();
  }
  std::vector<SentFrame> sent() const {
    MutexLock lock(&mu_);
    return sent_;
  }
  uint64_t handled() const {
    MutexLock lock(&mu_);
    return handled_;
  }
  // True once the handler has finished with at least n received messages; false after `timeout`.
  bool WaitForHandled(uint64_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&lock, timeout, [&]() REQUIRES(mu_) { return handled_ >= n; });
  }

 private:
  const std::unique_ptr<Transport> inner_;
  mutable Mutex mu_;
  CondVar cv_;
  bool hold_ GUARDED_BY(mu_) = false;
  std::deque<Message> held_ GUARDED_BY(mu_);
  std::vector<SentFrame> sent_ GUARDED_BY(mu_);
  uint64_t handled_ GUARDED_BY(mu_) = 0;
};

}  // namespace osprey::testing
