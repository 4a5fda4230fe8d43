// WaitUntil: a bounded wait on a condition a test can only poll (a server's counters, a file),
// so tests wait for the event they need instead of sleeping a fixed time and hoping.
#pragma once

#include <chrono>
#include <thread>

namespace osprey::testing {

// Polls `done` every millisecond; true as soon as it holds, false when `timeout` passed first.
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace osprey::testing
