// ZmqTransport::ReceiveUntil: a caller receives its replies on its own thread while the I/O thread
// stands aside, one caller at a time; the I/O thread takes over again afterwards; per-peer order
// holds across the hand-overs; Stop ends a caller's receiving.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/zmq_transport.h"
#include "tests/common/transport_test_util.h"
#include "tests/testing/wait.h"

namespace osprey {
namespace {

using Clock = std::chrono::steady_clock;
using testing::MakeMessage;
using testing::Str;

// Records each handled message's header and the thread that handled it.
class Recorder {
 public:
  Transport::Handler handler() {
    return [this](Message&& m) {
      std::lock_guard<std::mutex> lock(mu_);
      headers_.push_back(Str(m.header));
      threads_.push_back(std::this_thread::get_id());
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_.size();
  }
  std::vector<std::string> headers() {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_;
  }
  std::thread::id thread(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.at(i);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> headers_;
  std::vector<std::thread::id> threads_;
};

class ReceiveUntilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ep = server_.Listen("tcp://127.0.0.1:0");
    ASSERT_TRUE(ep.ok()) << ep.status().ToString();
    server_.SetHandler([this](Message&& m) { (void)server_.Send(std::move(m)); });  // echo
    ASSERT_TRUE(server_.Start().ok());
    client_.SetHandler(recorder_.handler());
    ASSERT_TRUE(client_.Start().ok());
    auto peer = client_.Connect(*ep);
    ASSERT_TRUE(peer.ok());
    peer_ = *peer;
  }
  void TearDown() override {
    client_.Stop();
    server_.Stop();
  }
  Status Send(const std::string& header) { return client_.Send(MakeMessage(peer_, header, "", "")); }

  ZmqTransport server_{TransportOptions{}};
  ZmqTransport client_{TransportOptions{}};
  Recorder recorder_;
  PeerId peer_ = -1;
};

TEST_F(ReceiveUntilTest, RepliesComeOnTheCallingThreadThenTheIoThreadTakesOver) {
  ASSERT_TRUE(Send("a").ok());
  ASSERT_TRUE(client_.ReceiveUntil([&] { return recorder_.size() >= 1; }, Clock::now() + std::chrono::seconds(20)));
  ASSERT_EQ(recorder_.size(), 1u);
  EXPECT_EQ(recorder_.thread(0), std::this_thread::get_id());
  // Nobody receives here now: the I/O thread must handle the next reply by itself.
  ASSERT_TRUE(Send("b").ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return recorder_.size() >= 2; }, std::chrono::seconds(20)));
  EXPECT_NE(recorder_.thread(1), std::this_thread::get_id());
  EXPECT_EQ(recorder_.headers(), (std::vector<std::string>{"a", "b"}));
}

TEST_F(ReceiveUntilTest, OneCallerAtATime) {
  std::atomic<bool> inside{false}, release{false};
  std::thread::id first_id;
  std::thread first([&] {
    first_id = std::this_thread::get_id();
    EXPECT_TRUE(client_.ReceiveUntil(
        [&] {
          inside = true;
          return release.load();
        },
        Clock::now() + std::chrono::seconds(30)));
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return inside.load(); }, std::chrono::seconds(20)));
  EXPECT_FALSE(client_.ReceiveUntil([] { return false; }, Clock::now() + std::chrono::seconds(1)))
      << "a second caller must wait as usual";
  // A reply that arrives meanwhile is the first caller's to take: the I/O thread stands aside.
  ASSERT_TRUE(Send("x").ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return recorder_.size() >= 1; }, std::chrono::seconds(20)));
  release = true;
  first.join();
  EXPECT_EQ(recorder_.thread(0), first_id);
}

TEST(ReceiveUntilFromTheHandlerTest, IsRefusedOnTheIoThread) {
  ZmqTransport server{TransportOptions{}};
  auto ep = server.Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  server.SetHandler([&](Message&& m) { (void)server.Send(std::move(m)); });
  ASSERT_TRUE(server.Start().ok());
  ZmqTransport client{TransportOptions{}};
  std::atomic<int> result{-1};
  client.SetHandler([&](Message&&) {
    result = client.ReceiveUntil([] { return true; }, Clock::now() + std::chrono::seconds(1)) ? 1 : 0;
  });
  ASSERT_TRUE(client.Start().ok());
  auto peer = client.Connect(*ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "h", "", "")).ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return result.load() != -1; }, std::chrono::seconds(20)));
  EXPECT_EQ(result.load(), 0);
  client.Stop();
  server.Stop();
}

TEST_F(ReceiveUntilTest, ReturnsAtTheDeadlineWhenNotDone) {
  const auto start = Clock::now();
  EXPECT_TRUE(client_.ReceiveUntil([] { return false; }, start + std::chrono::milliseconds(50)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(50));
  // And the I/O thread works again afterwards.
  ASSERT_TRUE(Send("after").ok());
  EXPECT_TRUE(testing::WaitUntil([&] { return recorder_.size() >= 1; }, std::chrono::seconds(20)));
}

TEST_F(ReceiveUntilTest, StopEndsTheCallerAndLaterCallsAreRefused) {
  std::atomic<bool> inside{false};
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    client_.ReceiveUntil(
        [&] {
          inside = true;
          return false;
        },
        Clock::now() + std::chrono::seconds(60));
    returned = true;
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return inside.load(); }, std::chrono::seconds(20)));
  client_.Stop();  // must not wait for the 60 s deadline
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(client_.ReceiveUntil([] { return false; }, Clock::now() + std::chrono::seconds(1)));
}

TEST(ReceiveUntilBeforeStartTest, IsRefused) {
  ZmqTransport t{TransportOptions{}};
  t.SetHandler([](Message&&) {});
  EXPECT_FALSE(t.ReceiveUntil([] { return false; }, Clock::now() + std::chrono::seconds(1)));
}

// Messages of one peer are handled in arrival order, whichever thread takes them: a caller
// receives a few, leaves, the I/O thread takes some, another caller comes, ...
TEST_F(ReceiveUntilTest, ArrivalOrderHoldsAcrossTheHandOvers) {
  constexpr int kMessages = 3000;
  std::thread sender([&] {
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(Send(std::to_string(i)).ok());
  });
  size_t goal = 0;
  int turns = 0;
  while (recorder_.size() < static_cast<size_t>(kMessages) && turns < 100000) {
    ++turns;
    goal = std::min<size_t>(kMessages, recorder_.size() + 7);
    client_.ReceiveUntil([&] { return recorder_.size() >= goal; }, Clock::now() + std::chrono::milliseconds(200));
  }
  sender.join();
  ASSERT_TRUE(testing::WaitUntil([&] { return recorder_.size() >= static_cast<size_t>(kMessages); },
                                 std::chrono::seconds(30)));
  std::vector<std::string> got = recorder_.headers();
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(got[i], std::to_string(i)) << "message " << i;
  // Both kinds of receiver took part.
  std::thread::id me = std::this_thread::get_id();
  int mine = 0;
  for (int i = 0; i < kMessages; ++i) mine += recorder_.thread(i) == me ? 1 : 0;
  EXPECT_GT(mine, 0);
}

}  // namespace
}  // namespace osprey
