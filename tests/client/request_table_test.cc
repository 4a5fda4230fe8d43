// RequestTable: tickets, the in-flight window, deadlines and delivery, without a transport.
#include "worker/client/request_table.h"

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace osprey::worker {
namespace {

std::string Name(proto::Op, uint32_t table) { return "call on table " + std::to_string(table); }

// Counts deliveries and remembers the last reply's size.
class CountingSink final : public ReplySink {
 public:
  explicit CountingSink(int* delivered) : delivered_(delivered) {}
  void Deliver(Buffer reply) override { *delivered_ += static_cast<int>(reply.size()); }

 private:
  int* delivered_;
};

// Waits (bounded, 10 s) until the thread *tid (0 until it sets it) is asleep ('S' in
// /proc/self/task/TID/stat).
bool WaitUntilSleeping(const std::atomic<pid_t>* tid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (*tid != 0) {
      std::ifstream f("/proc/self/task/" + std::to_string(tid->load()) + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t paren = stat.rfind(')');  // the name may hold spaces; the state follows it
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S') return true;
    }
    std::this_thread::yield();
  }
  return false;
}

proto::Header Reply(uint64_t request_id, uint64_t version = 0) {
  proto::Header h;
  h.set_op(proto::OP_REPLY);
  h.set_request_id(request_id);
  h.set_version(version);
  return h;
}

TEST(RequestTableTest, DeliversOnWaitOnlyWhenEveryMessageSucceeded) {
  RequestTable table(5000, 8, 2, Name);
  int delivered = 0;
  Ticket ok = table.Open(proto::OP_PULL_SPARSE, 1);
  uint64_t a = table.Admit(ok, 0, 4, std::make_unique<CountingSink>(&delivered), 0);
  uint64_t b = table.Admit(ok, 1, 8, std::make_unique<CountingSink>(&delivered), 0);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  table.OnReply(Reply(a, 3), Buffer::Allocate(4));
  table.OnReply(Reply(b, 5), Buffer::Allocate(8));
  EXPECT_EQ(delivered, 0) << "the I/O thread must not deliver";
  ASSERT_TRUE(table.Wait(ok).ok());
  EXPECT_EQ(delivered, 12);
  EXPECT_EQ(table.version(1), 5u);
  EXPECT_EQ(table.stats().bytes_pulled, 12u);
  EXPECT_EQ(table.Wait(ok).code(), StatusCode::kInvalidArgument);  // waited twice

  Ticket bad = table.Open(proto::OP_PULL_SPARSE, 1);
  uint64_t c = table.Admit(bad, 0, 4, std::make_unique<CountingSink>(&delivered), 0);
  uint64_t d = table.Admit(bad, 1, 4, std::make_unique<CountingSink>(&delivered), 0);
  table.OnReply(Reply(c), Buffer::Allocate(4));
  table.OnReply(Reply(d), Buffer::Allocate(3));  // wrong size
  Status s = table.Wait(bad);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("call on table 1 on server 1"), std::string::npos) << s.ToString();
  EXPECT_EQ(delivered, 12) << "a failed ticket's replies were delivered";
  EXPECT_EQ(table.stats().errors, 1u);
}

TEST(RequestTableTest, AFullWindowFailsTheTicketAtItsDeadline) {
  RequestTable table(100, 1, 1, Name);
  Ticket first = table.Open(proto::OP_PUSH_DENSE, 0);
  ASSERT_NE(table.Admit(first, 0, 0, nullptr, 10), 0u);
  Ticket second = table.Open(proto::OP_PUSH_DENSE, 0);
  EXPECT_EQ(table.Admit(second, 0, 0, nullptr, 10), 0u);  // waited the whole timeout
  Status s = table.Wait(second);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("in-flight window (1)"), std::string::npos) << s.ToString();
  s = table.Wait(first);  // never answered
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("no reply within 100 ms"), std::string::npos) << s.ToString();
  EXPECT_EQ(table.stats().bytes_pushed, 10u);
}

// A reply wakes waiters only for what they wait on (OnReply): here the first reply of a ticket of
// two leaves that ticket open but frees the full window, and the blocked Admit must be woken for
// the slot. Without that wake it would sleep out its 30 s deadline (and then find the room): the
// check is that it came back within half of that, a hang bound, not a speed figure.
TEST(RequestTableTest, AReplyThatFreesTheFullWindowWakesTheBlockedAdmit) {
  RequestTable table(30000, 2, 2, Name);
  Ticket first = table.Open(proto::OP_PUSH_DENSE, 0);
  const uint64_t a = table.Admit(first, 0, 0, nullptr, 10);
  const uint64_t b = table.Admit(first, 1, 0, nullptr, 10);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  Ticket second = table.Open(proto::OP_PUSH_DENSE, 0);
  uint64_t admitted = 0;
  std::atomic<pid_t> tid{0};
  std::thread admit([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    admitted = table.Admit(second, 0, 0, nullptr, 10);
  });
  // The reply comes once the admitting thread sleeps on the full window (its only wait there).
  ASSERT_TRUE(WaitUntilSleeping(&tid));
  const auto replied = std::chrono::steady_clock::now();
  table.OnReply(Reply(a), Buffer());
  admit.join();
  EXPECT_NE(admitted, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - replied, std::chrono::seconds(15)) << "the Admit was not woken";
  table.OnReply(Reply(b), Buffer());
  table.OnReply(Reply(admitted), Buffer());
  EXPECT_TRUE(table.Wait(first).ok());
  EXPECT_TRUE(table.Wait(second).ok());
}

TEST(RequestTableTest, WaitReadyIsFalseUntilEveryReplyAndDeadlinesNameTheSilentServer) {
  RequestTable table(300, 8, 1, Name);
  Ticket t = table.Open(proto::OP_PULL_SPARSE, 0);
  uint64_t a = table.Admit(t, 0, 0, nullptr, 0);
  ASSERT_NE(table.Admit(t, 2, 0, nullptr, 0), 0u);
  EXPECT_FALSE(table.WaitReady(t, 20)) << "no reply yet";
  table.OnReply(Reply(a), Buffer());
  EXPECT_FALSE(table.WaitReady(t, 20)) << "server 2 has not answered";
  EXPECT_TRUE(table.WaitReady(t, 2000)) << "the deadline (300 ms) makes Wait return at once";
  Status s = table.Wait(t);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("no reply within 300 ms from server 2"), std::string::npos) << s.ToString();

  Ticket done = table.Open(proto::OP_PULL_SPARSE, 0);
  uint64_t b = table.Admit(done, 1, 0, nullptr, 0);
  table.OnReply(Reply(b), Buffer());
  EXPECT_TRUE(table.WaitReady(done, 0));
  EXPECT_TRUE(table.Wait(done).ok());
  EXPECT_TRUE(table.WaitReady(done, 0)) << "an unknown ticket is ready (Wait reports it)";
}

TEST(RequestTableTest, StopAbortsWaitersAndLaterTickets) {
  RequestTable table(60000, 4, 1, Name);
  Ticket t = table.Open(proto::OP_PULL_DENSE, 0);
  ASSERT_NE(table.Admit(t, 0, 0, nullptr, 0), 0u);
  Status waited;
  std::thread waiter([&] { waited = table.Wait(t); });
  EXPECT_TRUE(table.Stop());
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kAborted);
  EXPECT_FALSE(table.Stop());
  EXPECT_EQ(table.Wait(table.Open(proto::OP_PULL_DENSE, 0)).code(), StatusCode::kAborted);
}

TEST(RequestTableTest, SendFailuresAndFailNameTheCall) {
  RequestTable table(5000, 4, 1, Name);
  Ticket t = table.Open(proto::OP_PUSH_SPARSE, 0);
  uint64_t id = table.Admit(t, 2, 0, nullptr, 0);
  table.SendFailed(id, Unavailable("peer gone"));
  Status s = table.Wait(t);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("sending to server 2"), std::string::npos) << s.ToString();
  Ticket f = table.Open(proto::OP_PUSH_SPARSE, 0);
  table.Fail(f, InvalidArgument("encoder says no"));
  s = table.Wait(f);
  EXPECT_NE(s.message().find("call on table 0"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace osprey::worker
