// A process incarnation: a random non-zero id drawn once per process start. A node registers
// with it (RegisterRequest.incarnation) and stamps its heartbeats (and a worker its data-plane
// headers) with it, so a restarted process is told apart from the one it replaces.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>

namespace osprey {

inline uint64_t ProcessIncarnation() {
  static const uint64_t id = [] {
    std::random_device rd;
    uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                 static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                 (static_cast<uint64_t>(getpid()) << 16);
    return v == 0 ? 1 : v;
  }();
  return id;
}

}  // namespace osprey
