// LoopbackVerbsForTesting, the verbs test double the RDMA protocol tests stand on (no RDMA NIC
// here): it must move bytes only between registered regions, check keys and bounds the way an RC
// QP does, complete in order, and put a QP pair in the error state on a failed work request.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/rdma/loopback_verbs_for_testing.h"

namespace osprey::rdma {
namespace {

class LoopbackVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = fabric_->NewVerbs();
    b_ = fabric_->NewVerbs();
    auto bound = b_->Listen("h:0", [this](QpId qp, const PrivateData& remote) -> StatusOr<PrivateData> {
      qb_ = qp;
      for (int i = 0; i < 4; ++i) EXPECT_TRUE(b_->PostRecv(qp, 100 + i).ok());
      return PrivateData{1, 2, 3};
    });
    ASSERT_TRUE(bound.ok());
    qa_ = *a_->CreateQp();
    auto theirs = a_->Connect(qa_, *bound, PrivateData{9});
    ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
    EXPECT_EQ(*theirs, (PrivateData{1, 2, 3}));
    src_.assign(4096, 7);
    dst_.assign(4096, 0);
    src_mr_ = *a_->RegisterMemory(src_.data(), src_.size());
    dst_mr_ = *b_->RegisterMemory(dst_.data(), dst_.size());
  }
  std::vector<WorkCompletion> Poll(LoopbackVerbsForTesting* v) {
    std::vector<WorkCompletion> out;
    EXPECT_TRUE(v->PollCq(&out, 100).ok());
    return out;
  }
  uint64_t dst_addr(size_t off) { return reinterpret_cast<uint64_t>(dst_.data()) + off; }

  std::shared_ptr<LoopbackFabricForTesting> fabric_ = std::make_shared<LoopbackFabricForTesting>();
  std::shared_ptr<LoopbackVerbsForTesting> a_, b_;
  QpId qa_ = 0, qb_ = 0;
  std::vector<uint8_t> src_, dst_;
  MemoryRegion src_mr_, dst_mr_;
};

TEST_F(LoopbackVerbsTest, WriteWithImmLandsAndCompletesOnBothSidesInOrder) {
  ASSERT_TRUE(a_->PostWriteWithImm(qa_, 1, src_.data(), src_mr_.lkey, 100, dst_addr(10),
                                   dst_mr_.rkey, 0xabc, false).ok());
  ASSERT_TRUE(a_->PostWriteWithImm(qa_, 2, src_.data(), src_mr_.lkey, 0, 0, dst_mr_.rkey, 0xdef,
                                   true).ok());
  EXPECT_EQ(dst_[10], 7);
  EXPECT_EQ(dst_[110], 0);
  auto sent = Poll(a_.get());
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].wr_id, 1u);
  EXPECT_EQ(sent[1].wr_id, 2u);
  auto got = Poll(b_.get());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 100u);
  EXPECT_EQ(got[0].imm, 0xabcu);
  EXPECT_EQ(got[0].byte_len, 100u);
  EXPECT_EQ(got[1].imm, 0xdefu);
}

TEST_F(LoopbackVerbsTest, WrongKeyOrOutOfBoundsFailsAndBreaksTheQpPair) {
  ASSERT_TRUE(a_->PostWriteWithImm(qa_, 1, src_.data(), src_mr_.lkey, 100, dst_addr(4090),
                                   dst_mr_.rkey, 0, false).ok());
  auto sent = Poll(a_.get());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].ok);
  EXPECT_NE(sent[0].error.find("remote access error"), std::string::npos) << sent[0].error;
  EXPECT_EQ(dst_[4090], 0);  // nothing written past the region
  auto flushed = Poll(b_.get());  // the remote QP is in error too: its receives flush
  ASSERT_EQ(flushed.size(), 4u);
  EXPECT_FALSE(flushed[0].ok);
  // Every later work request on the broken QP fails as well.
  ASSERT_TRUE(a_->PostRead(qa_, 5, src_.data(), src_mr_.lkey, 8, dst_addr(0), dst_mr_.rkey).ok());
  sent = Poll(a_.get());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].ok);
}

TEST_F(LoopbackVerbsTest, DeregisteredRegionsAndMissingReceivesAreErrors) {
  ASSERT_TRUE(b_->DeregisterMemory(dst_mr_).ok());
  ASSERT_TRUE(a_->PostRead(qa_, 1, src_.data(), src_mr_.lkey, 8, dst_addr(0), dst_mr_.rkey).ok());
  auto c = Poll(a_.get());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].error.find("names no registered region"), std::string::npos) << c[0].error;

  SetUp();  // a fresh pair
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(a_->PostWriteWithImm(qa_, i, nullptr, 0, 0, 0, 0, i, true).ok());
  }
  ASSERT_TRUE(a_->PostWriteWithImm(qa_, 9, nullptr, 0, 0, 0, 0, 9, true).ok());  // 5th: no recv
  c = Poll(a_.get());
  ASSERT_EQ(c.size(), 5u);
  EXPECT_TRUE(c[3].ok);
  EXPECT_NE(c[4].error.find("receiver not ready"), std::string::npos) << c[4].error;
}

}  // namespace
}  // namespace osprey::rdma
