// Helpers shared by the transport tests: message builders and a handler that collects what it
// receives, with bounded waits (no test may hang).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"

namespace osprey::testing {

inline Buffer Bytes(const std::string& s) { return Buffer::Copy(s.data(), s.size()); }
inline std::string Str(const Buffer& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline Message MakeMessage(PeerId peer, const std::string& header, const std::string& keys,
                           const std::string& values) {
  Message m;
  m.peer = peer;
  m.header = Bytes(header);
  m.keys = Bytes(keys);
  m.values = Bytes(values);
  return m;
}

// A handler that stores every message; Wait* return false after the timeout instead of hanging.
class Collector {
 public:
  Transport::Handler handler() {
    return [this](Message&& m) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::move(m));
      cv_.notify_all();
    };
  }
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return messages_.size() >= n; });
  }
  std::vector<Message> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(messages_);
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> messages_;
};

// Polls `pred` every millisecond until it holds or `timeout` passes.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace osprey::testing
