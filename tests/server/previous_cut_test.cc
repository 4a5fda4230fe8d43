// bsp rollback's checkpoint files (server/checkpoint_cut.h): a cut keeps the one before it, the
// consistent cut is the newest clock every server has, and a server's file of that cut is found
// in either place. Files are written by WriteCheckpoint itself (no tables: only the header
// matters here).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "server/checkpoint.h"
#include "server/checkpoint_cut.h"
#include "server/native_store.h"

namespace osprey::server {
namespace {

namespace fs = std::filesystem;

class PreviousCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/osprey-previous-cut-" + std::to_string(::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Server `rank` of 2 writes a file with header clock `clock`.
  void Write(int rank, int64_t clock) {
    CheckpointMeta meta;
    meta.rank = rank;
    meta.num_servers = 2;
    meta.clock = clock;
    ASSERT_TRUE(WriteCheckpoint(dir_, meta, store_).ok());
  }
  std::string dir_;
  NativeStore store_;
};

TEST_F(PreviousCutTest, ACutKeepsTheOneBeforeIt) {
  Write(0, 10);
  EXPECT_FALSE(fs::exists(PreviousCutDir(dir_) + "/server-0-of-2.ckpt")) << "nothing before the first";
  Write(0, 20);
  auto cur = CheckpointClock(CheckpointPath(dir_, 0, 2));
  auto prev = CheckpointClock(PreviousCutDir(dir_) + "/server-0-of-2.ckpt");
  ASSERT_TRUE(cur.ok() && prev.ok());
  EXPECT_EQ(*cur, 20);
  EXPECT_EQ(*prev, 10);
  Write(0, 30);
  EXPECT_EQ(*CheckpointClock(PreviousCutDir(dir_) + "/server-0-of-2.ckpt"), 20);
  // A per-server snapshot (clock 0) is no cut: the previous cut stays.
  Write(0, 0);
  EXPECT_EQ(*CheckpointClock(PreviousCutDir(dir_) + "/server-0-of-2.ckpt"), 20);
}

TEST_F(PreviousCutTest, TheConsistentCutIsTheNewestEveryServerHas) {
  Write(0, 10);
  Write(1, 10);
  Write(0, 20);  // server 0 reached cut 20, server 1 died before it
  auto cut = ConsistentCut(dir_, 2);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(*cut, 10);
  auto f0 = CutFile(dir_, 0, 2, 10);
  auto f1 = CutFile(dir_, 1, 2, 10);
  ASSERT_TRUE(f0.ok() && f1.ok());
  EXPECT_EQ(*f0, PreviousCutDir(dir_) + "/server-0-of-2.ckpt");
  EXPECT_EQ(*f1, CheckpointPath(dir_, 1, 2));
  Write(1, 20);
  EXPECT_EQ(*ConsistentCut(dir_, 2), 20);
  EXPECT_EQ(*CutFile(dir_, 0, 2, 20), CheckpointPath(dir_, 0, 2));
}

TEST_F(PreviousCutTest, NoCommonCutIsAClearError) {
  Write(0, 10);
  Write(0, 20);
  Write(0, 30);
  Write(1, 10);
  auto cut = ConsistentCut(dir_, 2);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().ToString().find("no bsp cut that every one of the 2 servers has"),
            std::string::npos) << cut.status().ToString();
  EXPECT_NE(cut.status().ToString().find("server 0: 30 20; server 1: 10"), std::string::npos)
      << cut.status().ToString();
  auto f = CutFile(dir_, 1, 2, 30);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().ToString().find("no file of server 1 at cut clock 30"), std::string::npos);
}

}  // namespace
}  // namespace osprey::server
