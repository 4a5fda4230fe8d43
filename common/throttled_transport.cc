#include "common/throttled_transport.h"

#include <algorithm>
#include <thread>

namespace osprey {

ThrottledTransport::ThrottledTransport(std::unique_ptr<Transport> inner, double bytes_per_second)
    : inner_(std::move(inner)), bytes_per_second_(bytes_per_second), wire_free_(Clock::now()) {}

Status ThrottledTransport::Send(Message msg) {
  if (msg.values.size() == 0) return inner_->Send(std::move(msg));
  const auto now = Clock::now();
  Clock::time_point done;
  {
    // Reserve the wire for this message's bytes after those reserved before it; sleep outside
    // the lock so a later sender can queue behind it.
    MutexLock lock(&mu_);
    const auto transfer = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(msg.bytes()) / bytes_per_second_));
    wire_free_ = std::max(wire_free_, now) + transfer;
    done = wire_free_;
    throttled_seconds_ += std::chrono::duration<double>(done - now).count();
  }
  std::this_thread::sleep_until(done);
  return inner_->Send(std::move(msg));
}

double ThrottledTransport::throttled_seconds() const {
  MutexLock lock(&mu_);
  return throttled_seconds_;
}

}  // namespace osprey
