// RequestTable's server failover part (request_table.h): the frames kept for a re-send, servers
// down while a replacement is expected, and the re-send to the replacement.
#include <algorithm>

#include "worker/client/request_table.h"

namespace osprey::worker {

void RequestTable::Keep(uint64_t request_id, const Buffer& header, const Buffer& keys, const Buffer& values) {
  MutexLock lock(&mu_);
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;  // already answered (or failed)
  it->second->sent_header = header;
  it->second->sent_keys = keys;
  it->second->sent_values = values;
}

void RequestTable::SetServerDown(int server, Clock::time_point until) {
  if (server < 0) return;
  MutexLock lock(&mu_);
  if (down_until_.size() <= static_cast<size_t>(server)) down_until_.resize(server + 1);
  down_until_[server] = until;
  WakeAllLocked();
}

bool RequestTable::ExtendForDownServerLocked(Ticket ticket, TicketState* t) {
  const Clock::time_point now = Clock::now();
  Clock::time_point until = t->deadline;
  for (const auto& [id, r] : pending_) {
    if (r->ticket != ticket || r->server < 0 || static_cast<size_t>(r->server) >= down_until_.size()) continue;
    until = std::max(until, down_until_[r->server]);
  }
  if (until <= now || until <= t->deadline) return false;
  t->deadline = until;
  return true;
}

size_t RequestTable::Resend(int server, const Resender& send) {
  struct Copy {
    uint64_t id;
    Buffer header, keys, values;
  };
  std::vector<Copy> copies;
  {
    MutexLock lock(&mu_);
    const Clock::time_point fresh = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    if (static_cast<size_t>(server) < down_until_.size()) down_until_[server] = Clock::time_point();
    for (const auto& [id, r] : pending_) {
      if (r->server != server || r->sent_header.empty()) continue;
      copies.push_back(Copy{id, r->sent_header, r->sent_keys, r->sent_values});
      auto t = tickets_.find(r->ticket);
      if (t != tickets_.end()) t->second->deadline = std::max(t->second->deadline, fresh);
    }
    resent_ += copies.size();
  }
  std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.id < b.id; });
  for (const Copy& c : copies) send(c.id, c.header, c.keys, c.values);
  return copies.size();
}

uint64_t RequestTable::resent() const {
  MutexLock lock(&mu_);
  return resent_;
}

}  // namespace osprey::worker
