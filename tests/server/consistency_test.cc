// Merge-then-apply through a real Server (in-process transport): bsp windows per clock with the
// mean of the pushes, async windows, ssp bounds, live-worker changes, staleness policies and the
// non-finite policies. Every expected number is computed by hand from the SGD rule
// w -= lr * lr_scale * g (lr 0.5) or with the Optimizer itself for nonlinear optimizers.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>

#include "server/server.h"
#include "server/sparse_table.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

using testing::InprocCluster;
using testing::VecBuf;
using Ms = std::chrono::milliseconds;

constexpr uint64_t kKey = 5;
constexpr float kLr = 0.5f;

// One worker's connection: sends requests as `rank`, collects replies with a bounded wait.
class Worker {
 public:
  Worker(InprocCluster* cluster, int rank) : transport_(cluster->NewTransport()), rank_(rank) {
    transport_->SetHandler([this](Message&& m) {
      std::lock_guard<std::mutex> lock(mu_);
      replies_.push_back(std::move(m));
      cv_.notify_all();
    });
    peer_ = *transport_->Connect("inproc://server-0");
    EXPECT_TRUE(transport_->Start().ok());
  }
  ~Worker() { transport_->Stop(); }

  void Send(proto::Op op, uint32_t table, int64_t clock, uint64_t version,
            std::vector<uint64_t> keys, std::vector<float> values) {
    proto::Header h;
    h.set_op(op);
    h.set_table(table);
    h.set_request_id(++next_id_);
    h.set_epoch(1);
    h.set_worker_rank(rank_);
    h.set_clock(clock);
    h.set_version(version);
    h.set_num_keys(keys.size());
    h.set_value_bytes(values.size() * sizeof(float));
    Message m;
    m.peer = peer_;
    m.header = SerializeHeader(h);
    m.keys = VecBuf(std::move(keys));
    m.values = VecBuf(std::move(values));
    ASSERT_TRUE(transport_->Send(std::move(m)).ok());
  }
  void Push(int64_t clock, uint64_t version, std::vector<float> g,
            std::vector<uint64_t> keys = {kKey}) {
    Send(proto::OP_PUSH_SPARSE, 0, clock, version, std::move(keys), std::move(g));
  }
  void Pull(int64_t clock, std::vector<uint64_t> keys = {kKey}) {
    Send(proto::OP_PULL_SPARSE, 0, clock, 0, std::move(keys), {});
  }
  // The next reply within `wait`; false when none came.
  bool Next(proto::Header* h, std::vector<float>* values = nullptr, Ms wait = Ms(5000)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !replies_.empty(); })) return false;
    Message m = std::move(replies_.front());
    replies_.pop_front();
    h->ParseFromArray(m.header.data(), static_cast<int>(m.header.size()));
    if (values) values->assign(m.values.as<float>(), m.values.as<float>() + m.values.count<float>());
    return true;
  }
  // Expects an OP_REPLY now and returns its values.
  std::vector<float> Reply(proto::Header* out = nullptr) {
    proto::Header h;
    std::vector<float> v;
    EXPECT_TRUE(Next(&h, &v)) << "no reply";
    EXPECT_EQ(h.op(), proto::OP_REPLY) << h.error();
    if (out) *out = h;
    return v;
  }
  bool Silent(Ms wait = Ms(150)) {
    proto::Header h;
    return !Next(&h, nullptr, wait);
  }

 private:
  std::unique_ptr<Transport> transport_;
  int rank_;
  PeerId peer_ = -1;
  uint64_t next_id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> replies_;
};

std::vector<config::TableConfig> Tables(config::ConsistencyMode mode,
                                        void (*tweak)(config::TableConfig*) = nullptr) {
  std::vector<config::TableConfig> t = testing::TestTables();
  for (auto& c : t) c.consistency.mode = mode;
  if (tweak) tweak(&t[0]);
  return t;
}

std::vector<float> Initial(const config::TableConfig& cfg, uint64_t key) {
  SparseTable t(0, cfg.dim, cfg.init, *Optimizer::Make(cfg.optimizer));
  std::vector<float> w(cfg.dim);
  t.InitialWeights(key, w.data());
  return w;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "element " << i;
}

TEST(BspTest, AppliesOnceWhenAllWorkersPushedWithTheMean) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kBsp));
  cluster.server(0).SetLiveWorkers({0, 1});
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  a.Pull(0);  // clock 0: nothing to wait for
  ExpectNear(a.Reply(), w0);
  a.Push(0, 0, {1, 2, 3, 4});
  a.Reply();
  a.Pull(1);
  EXPECT_TRUE(a.Silent()) << "pull for clock 1 answered before worker 1 pushed clock 0";
  b.Push(0, 0, {3, 2, 1, 0});
  b.Reply();
  proto::Header h;
  std::vector<float> w1 = a.Reply(&h);
  std::vector<float> want(4);
  for (int i = 0; i < 4; ++i) want[i] = w0[i] - kLr * 0.5f * (float(i + 1) + float(3 - i));
  ExpectNear(w1, want);
  EXPECT_EQ(h.version(), 1u);
  ServerStatsSnapshot st = cluster.server(0).stats();
  EXPECT_EQ(st.windows_applied, 1u);
  EXPECT_EQ(st.pushes_applied, 2u);
  EXPECT_EQ(st.pulls_held, 1u);
  // An evaluation pull (clock 0) is answered at once whatever the clocks.
  b.Pull(0);
  ExpectNear(b.Reply(), want);
}

TEST(BspTest, DeadWorkerReleasesTheWindow) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kBsp));
  cluster.server(0).SetLiveWorkers({0, 1});
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  a.Push(0, 0, {2, 2, 2, 2});
  a.Reply();
  a.Pull(1);
  EXPECT_TRUE(a.Silent());
  cluster.server(0).SetLiveWorkers({0});  // worker 1 died
  std::vector<float> w1 = a.Reply();
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - kLr * 2.0f);
}

// adaptive_ratio.async_barrier: worker 1 left the barrier (the server waits only for worker 0).
// Its late push of clock 0 is not lost, nor parked in the oldest open window (which nobody might
// close any more, at the end of the job): it is applied on arrival; its pulls of a closed clock
// are answered at once; its push of an open clock joins that window.
TEST(BspTest, AWorkerThatLeftTheBarrierIsAppliedOnArrivalWhenLate) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kBsp));
  cluster.server(0).SetLiveWorkers({0}, {1});  // WorkersAtBarrier: worker 1 is barrier_exempt
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker fast(&cluster, 0), slow(&cluster, 1);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  fast.Push(0, 0, {2, 2, 2, 2});
  fast.Reply();
  fast.Pull(1);
  std::vector<float> w1 = fast.Reply();  // clock 0 closed on worker 0 alone
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - kLr * 2.0f);
  slow.Push(0, 0, {4, 0, 4, 0});  // clock 0, late: applied now
  slow.Reply();
  slow.Pull(1);
  std::vector<float> late = slow.Reply();  // clock 1 was ready: no wait for anybody
  const float g[4] = {4, 0, 4, 0};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(late[i], w1[i] - kLr * g[i]) << "element " << i;
  slow.Push(1, 2, {0, 2, 0, 2});  // clock 1, still open: merged with worker 0's
  slow.Reply();
  fast.Push(1, 1, {0, 0, 2, 2});
  fast.Reply();
  fast.Pull(2);
  std::vector<float> w2 = fast.Reply();
  const float mean[4] = {0, 1, 1, 2};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(w2[i], late[i] - kLr * mean[i]) << "element " << i;
  ServerStatsSnapshot st = cluster.server(0).stats();
  EXPECT_EQ(st.pushes_applied, 4u);
}

TEST(AsyncTest, WindowOfOneEqualsApplyPerPush) {
  auto adagrad = [](config::TableConfig* c) { c->optimizer.type = OptimizerType::kAdagrad; };
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, adagrad));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  const config::TableConfig& cfg = cluster.tables()[0];
  auto opt = *Optimizer::Make(cfg.optimizer);
  std::vector<float> row = Initial(cfg, kKey);
  row.resize(cfg.dim + opt->state_floats(cfg.dim));
  opt->InitState(row.data() + cfg.dim, cfg.dim);
  std::vector<std::vector<float>> grads = {{1, -2, 3, 0.5f}, {0.25f, 4, -1, 2}, {-3, 1, 1, 1}};
  for (size_t k = 0; k < grads.size(); ++k) {
    a.Push(static_cast<int64_t>(k), k, grads[k]);
    proto::Header h;
    a.Reply(&h);
    EXPECT_EQ(h.version(), k + 1);
    opt->Apply(row.data(), row.data() + cfg.dim, grads[k].data(), cfg.dim, ApplyOptions{});
  }
  a.Pull(3);
  std::vector<float> got = a.Reply();
  for (int i = 0; i < cfg.dim; ++i) EXPECT_EQ(got[i], row[i]) << "element " << i;  // bit-exact
}

TEST(AsyncTest, MaxPushesMergesIntoOneStep) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.merge_max_pushes = 2;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  // Duplicate keys in one push are summed: key 5 gets 1 + 1 from worker 0.
  a.Send(proto::OP_PUSH_SPARSE, 0, 0, 0, {kKey, kKey}, {1, 1, 1, 1, 1, 1, 1, 1});
  a.Reply();
  a.Pull(0);
  ExpectNear(a.Reply(), w0);  // window not closed yet
  b.Push(0, 0, {4, 0, 0, 0});
  proto::Header h;
  b.Reply(&h);
  EXPECT_EQ(h.version(), 1u);
  a.Pull(0);
  std::vector<float> w1 = a.Reply();
  EXPECT_FLOAT_EQ(w1[0], w0[0] - kLr * (2.0f + 4.0f) / 2);
  EXPECT_FLOAT_EQ(w1[1], w0[1] - kLr * 2.0f / 2);
}

TEST(AsyncTest, TimeWindowClosesOnTheTimer) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.merge_max_pushes = 100;
    c->consistency.merge_window_us = 20000;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  a.Push(0, 0, {1, 1, 1, 1});
  a.Reply();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<float> w;
  do {
    std::this_thread::sleep_for(Ms(10));
    a.Pull(0);
    w = a.Reply();
  } while (w[0] == w0[0] && std::chrono::steady_clock::now() < deadline);
  EXPECT_FLOAT_EQ(w[0], w0[0] - kLr);
  EXPECT_EQ(cluster.server(0).stats().windows_applied, 1u);
}

TEST(SspTest, FastWorkerBlocksUntilTheSlowOneAdvances) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kSsp, [](config::TableConfig* c) {
    c->consistency.staleness_bound = 1;
  }));
  cluster.server(0).SetLiveWorkers({0, 1});
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker fast(&cluster, 0), slow(&cluster, 1);
  slow.Push(0, 0, {0, 0, 0, 0});  // slow finished clock 0
  slow.Reply();
  for (int c = 0; c < 3; ++c) {
    fast.Push(c, 0, {1, 0, 0, 0});
    fast.Reply();
  }
  fast.Pull(2);  // 2 - 1 <= 1: answered
  fast.Reply();
  fast.Pull(3);  // 3 - 1 > 1: held
  EXPECT_TRUE(fast.Silent(Ms(200))) << "fast worker was not held at 2 clocks ahead";
  slow.Push(1, 0, {0, 0, 0, 0});  // slow finished clock 1: 3 - 2 <= 1
  slow.Reply();
  std::vector<float> w = fast.Reply();
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  EXPECT_FLOAT_EQ(w[0], w0[0] - 3 * kLr);
}

TEST(StalenessTest, InverseLrScaleUsesTheComputedStaleness) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.lr_scale = config::LrScale::kInverse;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  // All three pushes are based on version 0; the server is at version 0, 1, 2 when they arrive,
  // so their staleness is 0, 1, 2.
  for (int k = 0; k < 3; ++k) {
    a.Push(k, 0, {1, 1, 1, 1});
    a.Reply();
  }
  a.Pull(0);
  std::vector<float> w = a.Reply();
  // s = 0 and 1: full lr (lr / max(1, s)); s = 2: lr / 2.
  EXPECT_FLOAT_EQ(w[0], w0[0] - kLr - kLr - kLr / 2);
  ServerStatsSnapshot st = cluster.server(0).stats();
  ASSERT_EQ(st.staleness.size(), 16u);
  EXPECT_EQ(st.staleness[0], 1u);  // s = 0
  EXPECT_EQ(st.staleness[1], 1u);  // s = 1
  EXPECT_EQ(st.staleness[2], 1u);  // s in [2, 4)
}

TEST(StalenessTest, DropAboveDropsStalePushes) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.drop_above = 1;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  for (int k = 0; k < 3; ++k) {  // staleness 0, 1, 2: the third is dropped
    a.Push(k, 0, {1, 1, 1, 1});
    a.Reply();
  }
  a.Push(3, 2, {1, 1, 1, 1});  // based on version 2: s = 0, applied
  proto::Header h;
  a.Reply(&h);
  EXPECT_EQ(h.version(), 3u);
  a.Pull(0);
  EXPECT_FLOAT_EQ(a.Reply()[0], w0[0] - 3 * kLr);
  EXPECT_EQ(cluster.server(0).stats().pushes_dropped, 1u);
}

TEST(StalenessTest, MomentumDecayScalesMomentum) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->optimizer.type = OptimizerType::kMomentum;
    c->optimizer.momentum = 0.9f;
    c->consistency.momentum_decay = true;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  a.Push(0, 0, {1, 1, 1, 1});  // s = 0: v = 1, w -= lr
  a.Reply();
  a.Push(1, 0, {1, 1, 1, 1});  // s = 1: mu_eff = 0.9 - 1/2 = 0.4: v = 0.4 + 1, w -= lr * 1.4
  a.Reply();
  a.Pull(0);
  EXPECT_NEAR(a.Reply()[0], w0[0] - kLr * 1.0f - kLr * 1.4f, 1e-6);
}

TEST(NonFiniteTest, SkipRowSkipsOnlyTheBadRow) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.non_finite = config::NonFinite::kSkipRow;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0);
  float nan = std::numeric_limits<float>::quiet_NaN();
  a.Pull(0, {9, 10});
  std::vector<float> before = a.Reply();
  a.Push(0, 0, {1, 1, 1, 1, 0, nan, 0, 0}, {9, 10});
  a.Reply();
  a.Pull(0, {9, 10});
  std::vector<float> after = a.Reply();
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - kLr) << "row 9 element " << i;
  for (int i = 4; i < 8; ++i) EXPECT_EQ(after[i], before[i]) << "row 10 changed";
  EXPECT_EQ(cluster.server(0).stats().rows_skipped, 1u);
}

TEST(ConsistencyConfigTest, NegativeDcLambdaIsRefused) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.dc_lambda = -0.5f;
  }));
  Status s = cluster.ActivateAll();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dc_lambda must be >= 0"), std::string::npos) << s.ToString();
}

// DC-ASGD by hand: g' = g + lambda * g * g * (w_now - w_at_pull), SGD w -= lr * g'.
TEST(DelayCompensationTest, CompensatesWithTheWeightsServedAtPull) {
  constexpr float kLambda = 0.5f;
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.dc_lambda = kLambda;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  std::vector<float> w0 = Initial(cluster.tables()[0], kKey);
  a.Pull(0);
  ExpectNear(a.Reply(), w0);  // a's weights at pull: w0
  b.Pull(0);
  b.Reply();
  const std::vector<float> gb = {1, 1, 1, 1};
  b.Push(0, 0, gb);  // w_now == w_at_pull: no correction
  b.Reply();
  std::vector<float> w1(4), w2(4), w3(4);
  for (int i = 0; i < 4; ++i) w1[i] = w0[i] - kLr * gb[i];
  const std::vector<float> ga = {1, 2, -1, 0.5f};
  a.Push(0, 0, ga);  // computed at w0, arrives at w1
  a.Reply();
  for (int i = 0; i < 4; ++i) {
    float g = ga[i] + kLambda * ga[i] * ga[i] * (w1[i] - w0[i]);
    w2[i] = w1[i] - kLr * g;
  }
  a.Pull(0, {99});  // another key: a's memory of key 5 was consumed by its push anyway
  a.Reply();
  a.Push(1, 1, ga);  // no remembered pull of key 5 since the last push: not compensated
  a.Reply();
  for (int i = 0; i < 4; ++i) w3[i] = w2[i] - kLr * ga[i];
  b.Pull(0);
  std::vector<float> got = b.Reply();
  ExpectNear(got, w3);
  EXPECT_NE(w2[1], w1[1] - kLr * ga[1]);  // the correction changed the step (w1 != w0)
  ServerStatsSnapshot st = cluster.server(0).stats();
  EXPECT_EQ(st.dc_compensated, 2u);    // b's push (zero correction) and a's first push
  EXPECT_EQ(st.dc_uncompensated, 1u);  // a's second push
}

TEST(DelayCompensationTest, DenseChunksAreCompensated) {
  constexpr float kLambda = 0.25f;
  std::vector<config::TableConfig> tables = testing::TestTables();
  for (auto& c : tables) {
    c.consistency.mode = config::ConsistencyMode::kAsync;
    c.consistency.dc_lambda = kLambda;
  }
  InprocCluster cluster(1, tables);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  a.Send(proto::OP_INIT_DENSE, 1, 0, 0, {0}, {1, 2, 3, 4});
  a.Reply();
  a.Send(proto::OP_PULL_DENSE, 1, 0, 0, {0}, {});
  std::vector<float> w0 = a.Reply();
  b.Send(proto::OP_PULL_DENSE, 1, 0, 0, {0}, {});
  b.Reply();
  b.Send(proto::OP_PUSH_DENSE, 1, 0, 0, {0}, {2, 2, 2, 2});
  b.Reply();
  a.Send(proto::OP_PUSH_DENSE, 1, 0, 0, {0}, {1, -1, 2, 0});
  a.Reply();
  a.Send(proto::OP_PULL_DENSE, 1, 0, 0, {0}, {});
  std::vector<float> got = a.Reply();
  std::vector<float> ga = {1, -1, 2, 0}, want(4);
  for (int i = 0; i < 4; ++i) {
    float w1 = w0[i] - kLr * 2.0f;
    want[i] = w1 - kLr * (ga[i] + kLambda * ga[i] * ga[i] * (w1 - w0[i]));
  }
  ExpectNear(got, want);
}

// Per-row staleness: rows count only the windows that updated them since the push's version.
TEST(RowStalenessTest, StaleRowsAreScaledAndUntouchedRowsAreFresh) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.lr_scale = config::LrScale::kInverse;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  a.Pull(0, {5, 6});  // version 0
  std::vector<float> before = a.Reply();
  // Versions 1, 2 update key 5; 3, 4 update key 7; key 6 is never updated. All fresh (s = 0).
  for (int k = 0; k < 4; ++k) {
    b.Push(k, k, {1, 1, 1, 1}, {k < 2 ? uint64_t{5} : uint64_t{7}});
    b.Reply();
  }
  a.Push(0, 0, {2, 2, 2, 2, 4, 4, 4, 4}, {5, 6});  // based on version 0: table s = 4
  a.Reply();
  a.Pull(0, {5, 6});
  std::vector<float> after = a.Reply();
  for (int i = 0; i < 4; ++i) {
    // key 5: s_row = 2 (two updates since version 0): lr / 2, after b's two full steps.
    EXPECT_FLOAT_EQ(after[i], before[i] - 2 * kLr - kLr / 2 * 2.0f) << "key 5 element " << i;
    // key 6: s_row = 0 although the table moved 4 versions: full lr.
    EXPECT_FLOAT_EQ(after[4 + i], before[4 + i] - kLr * 4.0f) << "key 6 element " << i;
  }
  ServerStatsSnapshot st = cluster.server(0).stats();
  EXPECT_EQ(st.staleness[0], 5u);  // b's 4 rows and key 6
  EXPECT_EQ(st.staleness[2], 1u);  // key 5: s = 2
}

TEST(RowStalenessTest, MergedWindowScalesPerRow) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.lr_scale = config::LrScale::kInverse;
    c->consistency.merge_max_pushes = 2;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  a.Pull(0, {5, 6});
  std::vector<float> w0 = a.Reply();
  for (int k = 0; k < 4; ++k) {  // two windows of two pushes: versions 1, 2 update key 5 only
    b.Push(k, k / 2, {1, 1, 1, 1}, {5});
    b.Reply();
  }
  // Window 3: a (version 0: key 5 s = 2, key 6 s = 0) and b (fresh, key 6).
  a.Push(0, 0, {2, 2, 2, 2, 2, 2, 2, 2}, {5, 6});
  a.Reply();
  b.Push(4, 2, {4, 4, 4, 4}, {6});
  b.Reply();
  a.Pull(0, {5, 6});
  std::vector<float> w = a.Reply();
  for (int i = 0; i < 4; ++i) {
    // key 5: two windows of mean 1 at full lr, then mean 2/2 = 1 at lr * (1/2) (one add, s = 2).
    EXPECT_FLOAT_EQ(w[i], w0[i] - 2 * kLr - kLr * 0.5f * 1.0f);
    // key 6: mean (2 + 4) / 2 = 3 at lr * (1 + 1) / 2.
    EXPECT_FLOAT_EQ(w[4 + i], w0[4 + i] - kLr * 3.0f);
  }
}

TEST(RowStalenessTest, DropAboveDropsOnlyStaleRows) {
  InprocCluster cluster(1, Tables(config::ConsistencyMode::kAsync, [](config::TableConfig* c) {
    c->consistency.drop_above = 1;
  }));
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Worker a(&cluster, 0), b(&cluster, 1);
  a.Pull(0, {5, 6});
  std::vector<float> w0 = a.Reply();
  for (int k = 0; k < 2; ++k) {
    b.Push(k, k, {1, 1, 1, 1}, {5});
    b.Reply();
  }
  a.Push(0, 0, {1, 1, 1, 1, 1, 1, 1, 1}, {5, 6});  // key 5: s = 2 > 1 dropped; key 6: s = 0
  a.Reply();
  a.Pull(0, {5, 6});
  std::vector<float> w = a.Reply();
  EXPECT_FLOAT_EQ(w[0], w0[0] - 2 * kLr);
  EXPECT_FLOAT_EQ(w[4], w0[4] - kLr);
  ServerStatsSnapshot st = cluster.server(0).stats();
  EXPECT_EQ(st.rows_dropped, 1u);
  EXPECT_EQ(st.pushes_dropped, 0u);
}

}  // namespace
}  // namespace osprey::server
