// Authorization of server requests: the role rules, the checkpoint-directory confinement, and a
// live server (in-process transport, the role given by the test) refusing, counting and answering.
#include "server/op_auth.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "server/checkpoint.h"
#include "server/server.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

namespace fs = std::filesystem;

TEST(OpAuthTest, ControlOpsOnlyFromCoordinatorOrAdmin) {
  Refusal kind;
  for (proto::Op op : {proto::OP_SERVER_STATS, proto::OP_CHECKPOINT, proto::OP_SHUTDOWN}) {
    EXPECT_TRUE(AuthorizeServerOp(op, PeerRole::kAdmin, true, &kind).ok());
    EXPECT_TRUE(AuthorizeServerOp(op, PeerRole::kCoordinator, true, &kind).ok());
    Status s = AuthorizeServerOp(op, PeerRole::kWorker, true, &kind);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(kind, Refusal::kControlOp);
    EXPECT_NE(s.message().find("role 'worker'"), std::string::npos) << s.message();
  }
}

TEST(OpAuthTest, RowsDigestIsAControlOp) {
  Refusal kind;
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_ROWS_DIGEST, PeerRole::kAdmin, true, &kind).ok());
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_ROWS_DIGEST, PeerRole::kCoordinator, true, &kind).ok());
  for (PeerRole r : {PeerRole::kWorker, PeerRole::kServer}) {
    EXPECT_EQ(AuthorizeServerOp(proto::OP_ROWS_DIGEST, r, true, &kind).code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(kind, Refusal::kControlOp);
  }
}

// A stolen worker key must not import rows into a server (a scale step's OP_MIGRATE_ROWS).
TEST(OpAuthTest, MigrateRowsOnlyFromServers) {
  Refusal kind;
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_MIGRATE_ROWS, PeerRole::kServer, true, &kind).ok());
  for (PeerRole r : {PeerRole::kWorker, PeerRole::kAdmin, PeerRole::kCoordinator, PeerRole::kUnauthenticated}) {
    Status s = AuthorizeServerOp(proto::OP_MIGRATE_ROWS, r, true, &kind);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << PeerRoleName(r);
  }
  Status s = AuthorizeServerOp(proto::OP_MIGRATE_ROWS, PeerRole::kWorker, true, &kind);
  EXPECT_EQ(kind, Refusal::kControlOp);
  EXPECT_NE(s.message().find("only the job's servers"), std::string::npos) << s.message();
  // security: none trusts the network.
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_MIGRATE_ROWS, PeerRole::kUnauthenticated, false, &kind).ok());
}

TEST(OpAuthTest, DataOpsOnlyFromWorkers) {
  Refusal kind;
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_PUSH_SPARSE, PeerRole::kWorker, true, &kind).ok());
  EXPECT_EQ(AuthorizeServerOp(proto::OP_PUSH_DENSE, PeerRole::kAdmin, true, &kind).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(kind, Refusal::kDataOp);
  EXPECT_EQ(AuthorizeServerOp(proto::OP_PULL_SPARSE, PeerRole::kServer, true, &kind).code(),
            StatusCode::kPermissionDenied);
}

TEST(OpAuthTest, UnauthenticatedPeersOnlyWhenRolesAreNotRequired) {
  Refusal kind;
  EXPECT_TRUE(AuthorizeServerOp(proto::OP_CHECKPOINT, PeerRole::kUnauthenticated, false, &kind).ok());
  EXPECT_EQ(AuthorizeServerOp(proto::OP_PUSH_SPARSE, PeerRole::kUnauthenticated, true, &kind).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(kind, Refusal::kUnauthenticated);
}

TEST(OpAuthTest, CheckpointDirectoryIsConfinedToTheConfiguredOne) {
  EXPECT_TRUE(CheckCheckpointDir("/data/ckpt", "/data/ckpt").ok());
  EXPECT_TRUE(CheckCheckpointDir("/data/ckpt/ondemand", "/data/ckpt/").ok());
  Status s = CheckCheckpointDir("/tmp/x", "/data/ckpt");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("'/tmp/x' is outside the configured checkpoint.dir '/data/ckpt'"),
            std::string::npos) << s.message();
  EXPECT_FALSE(CheckCheckpointDir("/data/ckpt2", "/data/ckpt").ok());         // a sibling prefix
  EXPECT_FALSE(CheckCheckpointDir("/data/ckpt/../etc", "/data/ckpt").ok());   // climbs out
  EXPECT_NE(CheckCheckpointDir("/tmp/x", "").message().find("no checkpoint.dir"), std::string::npos);
}

class ServerAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("osprey-auth-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    config::CheckpointConfig ck;
    ck.dir = dir_ + "/ckpt";
    cluster_.server(0).SetCheckpointConfig(ck);
    cluster_.server(0).SetRolesRequired(true);
    ASSERT_TRUE(cluster_.ActivateAll().ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Sends OP_CHECKPOINT naming `dir` as `role`; returns the reply.
  proto::Header Checkpoint(PeerRole role, const std::string& dir) {
    testing::RawPeer peer(cluster_.NewTransport(), "inproc://server-0");
    peer.set_role(role);
    proto::Header h;
    h.set_op(proto::OP_CHECKPOINT);
    h.set_request_id(7);
    h.set_value_bytes(dir.size());
    peer.Send(h, Buffer(), Buffer::Copy(dir.data(), dir.size()));
    proto::Header r;
    EXPECT_TRUE(peer.Next(&r, nullptr));
    return r;
  }

  testing::InprocCluster cluster_{1, testing::TestTables()};
  std::string dir_;
};

TEST_F(ServerAuthTest, AWorkerKeyCannotCheckpoint) {
  proto::Header r = Checkpoint(PeerRole::kWorker, dir_ + "/ckpt");
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_EQ(r.status_code(), static_cast<int>(StatusCode::kPermissionDenied));
  EXPECT_NE(r.error().find("only the coordinator or admin"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(CheckpointPath(dir_ + "/ckpt", 0, 1)));
  EXPECT_EQ(cluster_.server(0).stats().refused, 1u);
}

TEST_F(ServerAuthTest, AForeignCheckpointDirectoryIsRefusedAndTheConfiguredOneWritten) {
  const std::string foreign = dir_ + "/x";
  for (int i = 0; i < 3; ++i) {
    proto::Header r = Checkpoint(PeerRole::kAdmin, foreign);
    EXPECT_EQ(r.op(), proto::OP_ERROR);
    EXPECT_NE(r.error().find("outside the configured checkpoint.dir"), std::string::npos) << r.error();
  }
  EXPECT_FALSE(fs::exists(foreign));
  EXPECT_EQ(cluster_.server(0).stats().refused, 3u);
  EXPECT_EQ(Checkpoint(PeerRole::kAdmin, "").op(), proto::OP_REPLY);
  EXPECT_TRUE(fs::exists(CheckpointPath(dir_ + "/ckpt", 0, 1)));
}

}  // namespace
}  // namespace osprey::server
