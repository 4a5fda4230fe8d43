// RequestTable: the client's bookkeeping of calls in flight -- tickets, the messages of each
// ticket still waiting for a reply, the in-flight window, deadlines, Wait, and the counters and
// versions the replies report. It knows nothing of routing or codecs: the client admits each
// message it is about to send (Admit), the transport's I/O thread hands every reply in
// (OnReply), and a waiting thread collects the outcome (Wait).
//
// A reply's values are not touched on the I/O thread: OnReply only matches the reply to its
// message and keeps the values frame (a view, no copy). When the ticket completed OK, Wait hands
// each kept frame to its message's ReplySink, on the waiting thread, outside the table's lock, so
// threads waiting on different tickets deliver in parallel, and a failed ticket's replies are
// never delivered. After Wait returns (any status) no reply of that ticket reaches a sink.
//
// Errors on a ticket: the first one wins (a server's error reply, a reply of the wrong size
// (DataLoss), a send failure, an encoder's error, DeadlineExceeded when no reply came within the
// timeout or the window stayed full for it, Aborted after Stop). Each names the call
// (`describe`) and, where there is one, the server.
//
// Thread-safety: every method is thread-safe; OnReply is called on the transport's I/O thread, or
// on a waiting thread inside receive_here.
// Every ticket must be waited on exactly once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/wire.h"

namespace osprey::worker {

using Ticket = uint64_t;

struct ClientStats {
  uint64_t requests = 0;
  uint64_t bytes_pushed = 0;  // all frames of push/init requests
  uint64_t bytes_pulled = 0;  // values frames of pull replies
  uint64_t errors = 0;
  uint64_t pushes_acked = 0;  // push messages (sparse and dense) a server answered OK
  // The same two by table id (push/init bytes; pull reply values), for the metrics.
  std::vector<uint64_t> bytes_pushed_by_table;
  std::vector<uint64_t> bytes_pulled_by_table;
};

// Takes the values frame of one message's reply into the caller's memory; called by Wait on the
// waiting thread once the whole ticket succeeded. Owned by the table until then.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void Deliver(Buffer reply) = 0;
};

class RequestTable {
 public:
  // Names a call for error messages ("dense push to table 'mlp'"); built only for errors.
  using Describe = std::function<std::string(proto::Op op, uint32_t table)>;

  // Receives replies on the calling thread until done() or the deadline (Transport::ReceiveUntil);
  // false when it cannot now.
  using ReceiveHere =
      std::function<bool(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline)>;

  // `num_tables`: versions are kept for table ids below it. `describe` must outlive the table.
  // With `receive_here`, a Wait whose ticket is not finished first tries to take the replies
  // itself (they then come to OnReply on the waiting thread), and sleeps on its condition
  // variable only when it cannot (another thread receives so) or the deadline passed.
  RequestTable(int timeout_ms, int max_inflight, size_t num_tables, Describe describe,
               ReceiveHere receive_here = nullptr);

  // A new ticket for one call; its deadline is now + timeout. A non-OK `immediate` fails it at
  // once (Wait returns it), as does a stopped table (Aborted).
  Ticket Open(proto::Op op, uint32_t table, Status immediate = Status::OK()) EXCLUDES(mu_);
  // Fails `ticket` with `s` (unless it already failed), with the call's description as context.
  void Fail(Ticket ticket, const Status& s) EXCLUDES(mu_);

  // Registers one message of `ticket` for `server`, waiting while the in-flight window is full.
  // Returns its request id (never 0), or 0 when the message must not be sent: the ticket already
  // failed, the table stopped, or the window stayed full until the deadline (the ticket then
  // fails). `expect_bytes` is the reply's values size; `sink` receives the reply (null: nothing
  // to deliver); `push_bytes` counts in stats().bytes_pushed.
  uint64_t Admit(Ticket ticket, int server, size_t expect_bytes, std::unique_ptr<ReplySink> sink,
                 uint64_t push_bytes) EXCLUDES(mu_);
  // The transport refused the message `request_id`: it fails its ticket with `s`.
  void SendFailed(uint64_t request_id, const Status& s) EXCLUDES(mu_);

  // I/O thread: one reply (parsed header, values frame). A reply whose message is no longer
  // waited for (its ticket finished) is dropped.
  void OnReply(const proto::Header& header, Buffer values) EXCLUDES(mu_);
  // I/O thread: a reply whose header does not parse (counted; its request will time out).
  void OnBadReply() EXCLUDES(mu_);

  // Blocks until every message of `ticket` was answered, or it failed, or its deadline passed
  // (DeadlineExceeded), or Stop (Aborted); then delivers the replies (when OK) and forgets the
  // ticket. InvalidArgument for an unknown or already waited ticket.
  Status Wait(Ticket ticket) EXCLUDES(mu_);
  // Wait on each of `tickets` (each must not be waited otherwise); the first error, or OK. With
  // receive_here the replies of all of them are taken in one go, so a caller with many requests
  // in flight (pipelined pushes) takes the receiving over once, not once per ticket.
  Status WaitAll(const std::vector<Ticket>& tickets) EXCLUDES(mu_);
  // Blocks until Wait(ticket) would not block (every message answered, a failure, the ticket's
  // deadline, Stop, or an unknown ticket) or `max_ms` passed; true in the first case. Lets a
  // caller wait in slices (e.g. the Python binding, which checks for Ctrl-C between them).
  bool WaitReady(Ticket ticket, int max_ms) EXCLUDES(mu_);

  // Fails every open ticket with Aborted, wakes every waiter; later Opens fail at once. True
  // the first time (the caller then stops what feeds the table).
  bool Stop() EXCLUDES(mu_);

  // Server failover (request_table_resend.cc). Keep: the frames of message `request_id` as sent
  // (ref-counted Buffers, kept until its reply), so it can be re-sent to a replacement.
  void Keep(uint64_t request_id, const Buffer& header, const Buffer& keys, const Buffer& values)
      EXCLUDES(mu_);
  // Server `server` is down until `until` (0 time: up again): a ticket whose deadline passes
  // while one of its unanswered messages waits for that server waits until `until` instead of
  // failing with DeadlineExceeded (then it fails naming the server and the replacement wait).
  void SetServerDown(int server, std::chrono::steady_clock::time_point until) EXCLUDES(mu_);
  // A replacement of `server` is reachable: every unanswered message to it is handed to `send`
  // (its kept frames; same request id), and each of their tickets gets a fresh timeout. Returns
  // how many were re-sent. `send` is called outside the lock.
  using Resender = std::function<void(uint64_t request_id, const Buffer& header, const Buffer& keys,
                                      const Buffer& values)>;
  size_t Resend(int server, const Resender& send) EXCLUDES(mu_);
  uint64_t resent() const EXCLUDES(mu_);

  // Highest parameter version any reply for `table` reported (0 for ids past num_tables).
  uint64_t version(uint32_t table) const EXCLUDES(mu_);
  ClientStats stats() const EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {  // one message awaiting its reply
    Ticket ticket = 0;
    int server = 0;
    size_t expect_bytes = 0;
    std::unique_ptr<ReplySink> sink;
    Buffer reply;  // the reply's values frame, kept until Wait delivers it
    Buffer sent_header, sent_keys, sent_values;  // as sent (Keep), for a re-send
  };
  struct TicketState {
    proto::Op op = proto::OP_UNSPECIFIED;
    uint32_t table = 0;
    int remaining = 0;  // messages admitted and not answered
    Status status;
    Clock::time_point deadline;
    std::vector<std::unique_ptr<Request>> arrived;  // answered, with something to deliver
    // Its waiter's (Wait / WaitReady): signalled when the ticket finishes or fails, on Stop and
    // server changes -- under mu_, or after it through a shared_ptr (OnReply).
    CondVar done;
  };

  void FailLocked(TicketState* t, const Status& s) REQUIRES(mu_);
  bool FinishedLocked(const TicketState& t) const REQUIRES(mu_) {
    return t.remaining == 0 || !t.status.ok() || stopped_;
  }
  // Wakes every ticket's waiter and the Admit waiters (Stop, a server's state changed).
  void WakeAllLocked() REQUIRES(mu_);
  // Forgets the ticket's unanswered requests (late replies are then dropped).
  void DropPendingLocked(Ticket ticket, TicketState* t) REQUIRES(mu_);
  // "server 1" / "servers 0, 2": the servers that have not answered `ticket` yet.
  std::string SilentServersLocked(Ticket ticket) const REQUIRES(mu_);

  const int timeout_ms_;
  const int max_inflight_;
  const Describe describe_;
  const ReceiveHere receive_here_;

  mutable Mutex mu_;
  // Admit's, waiting for a free slot in the in-flight window: signalled when one is freed and on
  // Stop. A reply wakes only the thread that waits on its ticket (TicketState::done) and, when the
  // window was full, the Admit waiters -- never every waiting thread (a GPU worker has several:
  // pullers, the pusher, the comm thread).
  CondVar room_;
  uint64_t next_request_id_ GUARDED_BY(mu_) = 1;
  Ticket next_ticket_ GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> pending_ GUARDED_BY(mu_);  // by request id
  // Shared so that OnReply can signal a finished ticket's waiter after unlocking mu_ (the waiter
  // may erase the ticket the moment it takes mu_).
  std::unordered_map<Ticket, std::shared_ptr<TicketState>> tickets_ GUARDED_BY(mu_);
  int inflight_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::vector<uint64_t> versions_ GUARDED_BY(mu_);  // by table id
  ClientStats stats_ GUARDED_BY(mu_);
  std::vector<Clock::time_point> down_until_ GUARDED_BY(mu_);  // by server; default: up
  uint64_t resent_ GUARDED_BY(mu_) = 0;
  // Wait's deadline rule with SetServerDown: true when the ticket's deadline was moved to the end
  // of a replacement wait of one of its silent servers.
  bool ExtendForDownServerLocked(Ticket ticket, TicketState* t) REQUIRES(mu_);
};

}  // namespace osprey::worker
