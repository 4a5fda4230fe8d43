// Client::PushDenseEncoded: dense messages encoded by the caller (the GPU worker's device path)
// must reach the servers as the messages PushDense sends through the table's encoder -- so two
// clusters, one pushed through a DenseCompressor installed on its client and one pushed the
// frames a twin compressor made, end with the same parameters, bit for bit -- and bad frames are
// refused before anything is sent.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"
#include "worker/compression.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;

constexpr uint32_t kDense = 1;

std::vector<config::TableConfig> Tables() {
  std::vector<config::TableConfig> tables = testing::TestTables();
  tables[1].size = 600;
  tables[1].chunk_floats = 32;  // 19 chunks over 2 servers: non-contiguous messages
  return tables;
}

codec::CodecConfig TopK() {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.05;
  c.error_feedback = true;
  c.min_compress_bytes = 64;
  return c;
}

// The frame `comp` makes for route r's message of grads (what the client hands its encoder).
EncodedDenseFrame FrameOf(DenseCompressor* comp, const DenseRoute& r, const std::vector<float>& grads) {
  PushValues in;
  in.table = kDense;
  in.server = r.server;
  in.floats = r.floats;
  if (r.contiguous) {
    in.base = grads.data() + r.ranges[0].first;
    in.first = r.ranges[0].first;
  } else {
    in.base = grads.data();
    in.ranges = r.ranges.data();
    in.num_ranges = r.ranges.size();
  }
  proto::Header h;
  EncodedDenseFrame f;
  f.server = r.server;
  EXPECT_TRUE(comp->Encode(in, &h, &f.payload).ok());
  f.meta.codec = static_cast<codec::CodecId>(h.codec());
  f.meta.value_type = static_cast<codec::ValueType>(h.codec_value_type());
  f.meta.length = r.floats;
  f.meta.count = h.codec() == proto::CODEC_NONE ? r.floats : h.codec_count();
  f.meta.chunk = h.codec_chunk();
  return f;
}

TEST(EncodedDensePushTest, EncodedFramesLandAsTheEncoderPushesDo) {
  InprocCluster a(2, Tables()), b(2, Tables());
  ASSERT_TRUE(a.ActivateAll().ok());
  ASSERT_TRUE(b.ActivateAll().ok());
  Client ca(ClientOptions{}, a.NewTransport(), a.map()), cb(ClientOptions{}, b.NewTransport(), b.map());
  ASSERT_TRUE(ca.Start().ok());
  ASSERT_TRUE(cb.Start().ok());
  auto installed = DenseCompressor::Create(TopK(), 1);
  auto twin = DenseCompressor::Create(TopK(), 1);
  ASSERT_TRUE(installed.ok() && twin.ok());
  ASSERT_TRUE(ca.SetEncoder(kDense, std::move(*installed)).ok());
  const std::vector<DenseRoute>& routes = cb.dense_routes(kDense);
  ASSERT_EQ(routes.size(), 2u);
  EXPECT_FALSE(routes[0].contiguous && routes[1].contiguous);

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> g(600);
    for (float& x : g) x = normal(rng);
    ASSERT_TRUE(ca.Wait(ca.PushDense(kDense, g.data(), step)).ok());
    std::vector<EncodedDenseFrame> frames;
    for (const DenseRoute& r : routes) frames.push_back(FrameOf(twin->get(), r, g));
    EXPECT_EQ(frames[0].meta.codec, codec::CodecId::kTopK);
    ASSERT_TRUE(cb.Wait(cb.PushDenseEncoded(kDense, frames, step)).ok());
  }
  std::vector<float> pa(600), pb(600);
  ASSERT_TRUE(ca.Wait(ca.PullDense(kDense, pa.data())).ok());
  ASSERT_TRUE(cb.Wait(cb.PullDense(kDense, pb.data())).ok());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0);
  size_t moved = 0;
  for (float x : pb) moved += x != 0.0f;
  EXPECT_GT(moved, 0u) << "the pushes changed nothing";
}

TEST(EncodedDensePushTest, BadFramesAreRefusedAndNothingIsSent) {
  InprocCluster cluster(2, Tables());
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Client client(ClientOptions{}, cluster.NewTransport(), cluster.map());
  ASSERT_TRUE(client.Start().ok());
  const std::vector<DenseRoute>& routes = client.dense_routes(kDense);
  ASSERT_EQ(routes.size(), 2u);
  std::vector<float> ones(routes[0].floats, 1.0f);
  EncodedDenseFrame good;
  good.server = routes[0].server;
  good.meta.length = routes[0].floats;
  good.meta.count = routes[0].floats;
  good.payload = Buffer::Copy(ones.data(), ones.size() * sizeof(float));
  EncodedDenseFrame short_frame = good;
  short_frame.server = routes[1].server;  // another length than that server's message

  auto expect_refused = [&](const std::vector<EncodedDenseFrame>& frames, uint32_t table, const char* what) {
    Status s = client.Wait(client.PushDenseEncoded(table, frames));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  if (routes[0].floats != routes[1].floats) expect_refused({good, short_frame}, kDense, "length");
  expect_refused({good, good}, kDense, "two frames for the server");
  EncodedDenseFrame nowhere = good;
  nowhere.server = 7;
  expect_refused({good, nowhere}, kDense, "holds no chunks");
  expect_refused({good}, 0, "sparse");
  // Nothing of the refused calls was applied.
  std::vector<float> params(600, -1.0f);
  ASSERT_TRUE(client.Wait(client.PullDense(kDense, params.data())).ok());
  for (float x : params) ASSERT_EQ(x, 0.0f);
  // The good frame alone goes through and lands.
  ASSERT_TRUE(client.Wait(client.PushDenseEncoded(kDense, {good})).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(kDense, params.data())).ok());
  EXPECT_NE(params[routes[0].ranges[0].first], 0.0f);
}

}  // namespace
}  // namespace osprey::worker
