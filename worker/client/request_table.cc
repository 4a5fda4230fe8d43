#include "worker/client/request_table.h"

#include <algorithm>

namespace osprey::worker {

RequestTable::RequestTable(int timeout_ms, int max_inflight, size_t num_tables, Describe describe,
                           ReceiveHere receive_here)
    : timeout_ms_(timeout_ms),
      max_inflight_(max_inflight),
      describe_(std::move(describe)),
      receive_here_(std::move(receive_here)) {
  MutexLock lock(&mu_);
  versions_.assign(num_tables, 0);
  stats_.bytes_pushed_by_table.assign(num_tables, 0);
  stats_.bytes_pulled_by_table.assign(num_tables, 0);
}

Ticket RequestTable::Open(proto::Op op, uint32_t table, Status immediate) {
  auto t = std::make_shared<TicketState>();
  t->op = op;
  t->table = table;
  t->deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  MutexLock lock(&mu_);
  t->status = stopped_ && immediate.ok() ? Aborted("client stopped") : std::move(immediate);
  Ticket id = next_ticket_++;
  tickets_[id] = std::move(t);
  return id;
}

void RequestTable::FailLocked(TicketState* t, const Status& s) {
  if (t->status.ok()) t->status = s;
  t->done.SignalAll();
}

void RequestTable::WakeAllLocked() {
  for (auto& [id, t] : tickets_) t->done.SignalAll();
  room_.SignalAll();
}

void RequestTable::Fail(Ticket ticket, const Status& s) {
  MutexLock lock(&mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;
  FailLocked(it->second.get(), s.WithContext(describe_(it->second->op, it->second->table)));
}

uint64_t RequestTable::Admit(Ticket ticket, int server, size_t expect_bytes, std::unique_ptr<ReplySink> sink,
                             uint64_t push_bytes) {
  auto r = std::make_unique<Request>();  // allocated before taking the lock
  r->ticket = ticket;
  r->server = server;
  r->expect_bytes = expect_bytes;
  r->sink = std::move(sink);
  MutexLock lock(&mu_);
  TicketState* t = tickets_[ticket].get();
  bool room = room_.WaitUntil(&lock, t->deadline, [&]() REQUIRES(mu_) {
    return stopped_ || inflight_ < max_inflight_;
  });
  if (!t->status.ok()) return 0;
  if (stopped_ || !room) {
    FailLocked(t, stopped_ ? Aborted("client stopped")
                           : DeadlineExceeded(describe_(t->op, t->table) + ": in-flight window (" +
                                              std::to_string(max_inflight_) +
                                              ") stayed full for the whole timeout"));
    return 0;
  }
  const uint64_t id = next_request_id_++;
  pending_[id] = std::move(r);
  ++t->remaining;
  ++inflight_;
  ++stats_.requests;
  stats_.bytes_pushed += push_bytes;
  if (t->table < stats_.bytes_pushed_by_table.size()) stats_.bytes_pushed_by_table[t->table] += push_bytes;
  return id;
}

void RequestTable::SendFailed(uint64_t request_id, const Status& s) {
  MutexLock lock(&mu_);
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;
  const int server = it->second->server;
  TicketState* t = tickets_[it->second->ticket].get();
  pending_.erase(it);
  --inflight_;
  --t->remaining;
  FailLocked(t, s.WithContext(describe_(t->op, t->table) + ": sending to server " + std::to_string(server)));
  room_.SignalAll();
}

void RequestTable::OnBadReply() {
  MutexLock lock(&mu_);
  ++stats_.errors;
}

void RequestTable::OnReply(const proto::Header& header, Buffer values) {
  std::shared_ptr<TicketState> finished;  // its waiter is signalled after mu_ is released
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(header.request_id());
    if (it == pending_.end()) return;  // its ticket already finished (timeout or error)
    std::unique_ptr<Request> r = std::move(it->second);
    pending_.erase(it);
    const bool was_full = inflight_ >= max_inflight_;  // an Admit may be waiting for room
    --inflight_;
    const std::shared_ptr<TicketState>& ts = tickets_[r->ticket];
    TicketState* t = ts.get();
    --t->remaining;
    Status s = StatusFromHeader(header);
    if (s.ok() && header.op() != proto::OP_REPLY) {
      s = Internal("unexpected reply op " + std::to_string(header.op()));
    }
    if (s.ok() && values.size() != r->expect_bytes) {
      s = DataLoss("reply carries " + std::to_string(values.size()) + " bytes, expected " +
                   std::to_string(r->expect_bytes));
    }
    if (!s.ok()) {
      ++stats_.errors;
      FailLocked(t, s.WithContext(describe_(t->op, t->table) + " on server " + std::to_string(r->server)));
    } else if (r->sink != nullptr) {
      stats_.bytes_pulled += values.size();
      if (t->table < stats_.bytes_pulled_by_table.size()) stats_.bytes_pulled_by_table[t->table] += values.size();
      r->reply = std::move(values);  // a view of the received frame: no copy here
      t->arrived.push_back(std::move(r));
    }
    if (s.ok() && (t->op == proto::OP_PUSH_SPARSE || t->op == proto::OP_PUSH_DENSE)) ++stats_.pushes_acked;
    if (s.ok() && t->table < versions_.size()) {
      versions_[t->table] = std::max(versions_[t->table], header.version());
    }
    // Only what a waiter waits for wakes it: its ticket done (a failure signalled in FailLocked),
    // or room in the window. A ticket of 16 servers' messages does not wake its waiter 15 times
    // for nothing, and no other ticket's waiter wakes at all.
    if (t->remaining == 0 && t->status.ok()) finished = ts;
    if (was_full) room_.SignalAll();
  }
  if (finished) finished->done.SignalAll();  // not under mu_: the woken waiter takes it at once
}

std::string RequestTable::SilentServersLocked(Ticket ticket) const {
  std::vector<int> servers;
  for (const auto& [id, r] : pending_) {
    if (r->ticket == ticket) servers.push_back(r->server);
  }
  std::sort(servers.begin(), servers.end());
  servers.erase(std::unique(servers.begin(), servers.end()), servers.end());
  std::string out = servers.size() == 1 ? "server" : "servers";
  for (size_t i = 0; i < servers.size(); ++i) out += (i ? ", " : " ") + std::to_string(servers[i]);
  return out;
}

void RequestTable::DropPendingLocked(Ticket ticket, TicketState* t) {
  for (auto p = pending_.begin(); t->remaining > 0 && p != pending_.end();) {
    if (p->second->ticket == ticket) {
      p = pending_.erase(p);
      --inflight_;
      --t->remaining;
    } else {
      ++p;
    }
  }
}

Status RequestTable::Wait(Ticket ticket) {
  std::vector<std::unique_ptr<Request>> arrived;
  Status result;
  {
    MutexLock lock(&mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return InvalidArgument("unknown or already waited ticket");
    TicketState* t = it->second.get();
    if (receive_here_ && !FinishedLocked(*t)) {
      // The ticket stays in tickets_ (only this Wait erases it), so t stays valid meanwhile.
      const Clock::time_point deadline = t->deadline;
      lock.Unlock();
      receive_here_(
          [this, t] {
            MutexLock relock(&mu_);
            return FinishedLocked(*t);
          },
          deadline);
      lock.Lock();
    }
    bool finished = false;
    do {
      finished = t->done.WaitUntil(&lock, t->deadline, [&]() REQUIRES(mu_) { return FinishedLocked(*t); });
    } while (!finished && t->status.ok() && ExtendForDownServerLocked(ticket, t));
    if (!finished && t->status.ok()) {
      t->status = DeadlineExceeded(describe_(t->op, t->table) + ": no reply within " +
                                   std::to_string(timeout_ms_) + " ms from " + SilentServersLocked(ticket));
    }
    if (stopped_ && t->status.ok() && t->remaining > 0) t->status = Aborted("client stopped");
    result = t->status;
    // Late replies of this ticket must never reach the caller's memory.
    DropPendingLocked(ticket, t);
    arrived = std::move(t->arrived);
    tickets_.erase(it);
    room_.SignalAll();  // DropPendingLocked may have freed window slots
  }
  // The ticket is gone from tickets_, so nothing else can reach these requests: deliver here, on
  // the waiting thread, outside mu_.
  if (result.ok()) {
    for (const std::unique_ptr<Request>& r : arrived) r->sink->Deliver(std::move(r->reply));
  }
  return result;
}

Status RequestTable::WaitAll(const std::vector<Ticket>& tickets) {
  if (receive_here_ && !tickets.empty()) {
    Clock::time_point deadline = Clock::time_point::max();
    {
      MutexLock lock(&mu_);
      for (Ticket ticket : tickets) {
        auto it = tickets_.find(ticket);
        if (it != tickets_.end()) deadline = std::min(deadline, it->second->deadline);
      }
    }
    size_t next = 0;  // tickets before it finished (they stay finished)
    receive_here_(
        [&] {
          MutexLock lock(&mu_);
          for (; next < tickets.size(); ++next) {
            auto it = tickets_.find(tickets[next]);
            if (it != tickets_.end() && !FinishedLocked(*it->second)) return false;
          }
          return true;
        },
        deadline);
  }
  Status first;
  for (Ticket ticket : tickets) {
    Status s = Wait(ticket);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

bool RequestTable::WaitReady(Ticket ticket, int max_ms) {
  MutexLock lock(&mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return true;
  TicketState* t = it->second.get();
  const Clock::time_point until = std::min(t->deadline, Clock::now() + std::chrono::milliseconds(max_ms));
  bool ready = t->done.WaitUntil(&lock, until, [&]() REQUIRES(mu_) {
    return t->remaining == 0 || !t->status.ok() || stopped_;
  });
  return ready || Clock::now() >= t->deadline;
}

bool RequestTable::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return false;
    stopped_ = true;
    for (auto& [id, t] : tickets_) FailLocked(t.get(), Aborted("client stopped"));
    pending_.clear();
    inflight_ = 0;
    WakeAllLocked();
  }
  return true;
}

uint64_t RequestTable::version(uint32_t table) const {
  MutexLock lock(&mu_);
  return table < versions_.size() ? versions_[table] : 0;
}

ClientStats RequestTable::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace osprey::worker
