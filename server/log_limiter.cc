#include "server/log_limiter.h"

namespace osprey::server {

bool LogLimiter::Admit(int64_t peer, int kind, int64_t now_us, uint64_t* suppressed) {
  *suppressed = 0;
  const auto key = std::make_pair(peer, kind);
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (keys_.size() >= max_keys_) Prune(now_us);
    if (keys_.size() >= max_keys_) {
      ++overflow_;
      return false;
    }
    keys_.emplace(key, Entry{now_us, 0});
    return true;
  }
  Entry& e = it->second;
  if (now_us - e.last_us < interval_us_) {
    ++e.suppressed;
    return false;
  }
  *suppressed = e.suppressed;
  e.last_us = now_us;
  e.suppressed = 0;
  return true;
}

void LogLimiter::Prune(int64_t now_us) {
  for (auto it = keys_.begin(); it != keys_.end();) {
    it = now_us - it->second.last_us >= interval_us_ ? keys_.erase(it) : std::next(it);
  }
}

}  // namespace osprey::server
