// Compressed dense pushes through a real Server: the frame a worker's DenseCompressor builds is
// decoded and applied like the fp32 gradient it stands for; bad frames get an OP_ERROR reply and
// nothing of them is applied.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "common/codec/encoded.h"
#include "server/codec_decode.h"
#include "server/server.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/compression.h"

namespace osprey::server {
namespace {

using testing::InprocCluster;
using testing::RawPeer;
using testing::VecBuf;

constexpr size_t kFloats = 100;  // chunks 0 (64 floats) and 1 (36 floats), both on server 0
constexpr float kLr = 0.5f;

std::vector<config::TableConfig> Tables() {
  config::TableConfig dense;
  dense.name = "mlp";
  dense.type = config::TableType::kDense;
  dense.size = kFloats;
  dense.chunk_floats = 64;
  dense.optimizer.type = OptimizerType::kSgd;
  dense.optimizer.lr = kLr;
  return {dense};
}

proto::Header Req(proto::Op op, uint64_t value_bytes) {
  proto::Header h;
  h.set_op(op);
  h.set_table(0);
  h.set_request_id(7);
  h.set_epoch(1);
  h.set_num_keys(2);
  h.set_value_bytes(value_bytes);
  return h;
}

Buffer Keys() { return VecBuf<uint64_t>({0, 1}); }

class CodecPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    peer_ = std::make_unique<RawPeer>(cluster_.NewTransport(), "inproc://server-0");
    std::vector<float> init(kFloats);
    for (size_t i = 0; i < kFloats; ++i) init[i] = 0.01f * static_cast<float>(i);
    proto::Header r = Call(Req(proto::OP_INIT_DENSE, kFloats * 4), VecBuf(init));
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  }
  proto::Header Call(const proto::Header& h, Buffer values, Buffer* out = nullptr) {
    peer_->Send(h, Keys(), std::move(values));
    proto::Header reply;
    EXPECT_TRUE(peer_->Next(&reply, out)) << "no reply";
    return reply;
  }
  std::vector<float> Pull() {
    Buffer out;
    proto::Header r = Call(Req(proto::OP_PULL_DENSE, 0), Buffer(), &out);
    EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
    return std::vector<float>(out.as<float>(), out.as<float>() + out.count<float>());
  }
  // Encodes g with a fresh compressor for `config`; returns the request and its values frame.
  std::pair<proto::Header, Buffer> Encode(const codec::CodecConfig& config, const std::vector<float>& g) {
    auto comp = worker::DenseCompressor::Create(config, 1);
    EXPECT_TRUE(comp.ok()) << comp.status().ToString();
    proto::Header h = Req(proto::OP_PUSH_DENSE, 0);
    Buffer values;
    Status s = (*comp)->Encode(0, 0, g.data(), g.size(), &h, &values);
    EXPECT_TRUE(s.ok()) << s.ToString();
    h.set_value_bytes(values.size());
    return {h, values};
  }
  // Pushes a compressed frame and checks the table moved by -lr * decoded(frame).
  void ExpectApplied(const proto::Header& h, const Buffer& values) {
    std::vector<float> before = Pull();
    std::vector<float> decoded;
    ASSERT_TRUE(DecodePushValues(h, values, kFloats, &decoded).ok());
    proto::Header r = Call(h, values);
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
    std::vector<float> after = Pull();
    ASSERT_EQ(after.size(), kFloats);
    for (size_t i = 0; i < kFloats; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - kLr * decoded[i]) << i;
  }
  void ExpectRejected(const proto::Header& h, Buffer values, const std::string& fragment) {
    std::vector<float> before = Pull();
    uint64_t bad = cluster_.server(0).stats().bad_requests;
    proto::Header r = Call(h, std::move(values));
    EXPECT_EQ(r.op(), proto::OP_ERROR);
    EXPECT_NE(r.error().find(fragment), std::string::npos) << "error was: " << r.error();
    EXPECT_NE(r.error().find("table 'mlp'"), std::string::npos) << "error was: " << r.error();
    EXPECT_EQ(cluster_.server(0).stats().bad_requests, bad + 1);
    EXPECT_EQ(Pull(), before) << "a rejected frame changed the table";
  }

  static std::vector<float> Gradient() {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> g(kFloats);
    for (float& x : g) x = d(rng);
    return g;
  }
  static codec::CodecConfig TopK() {
    codec::CodecConfig c;
    c.type = "topk";
    c.density = 0.1;
    c.error_feedback = true;
    c.min_compress_bytes = 0;
    return c;
  }

  InprocCluster cluster_{1, Tables()};
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(CodecPushTest, TopKPushIsDecodedAndApplied) {
  std::vector<float> g = Gradient();
  auto [h, values] = Encode(TopK(), g);
  ASSERT_EQ(h.codec(), proto::CODEC_TOPK);
  ASSERT_EQ(h.codec_count(), 10u);
  EXPECT_EQ(values.size(), 10u * 8);
  ExpectApplied(h, values);
  // The decoded frame holds exactly the 10 largest |g|, with their exact values.
  std::vector<float> decoded;
  ASSERT_TRUE(DecodePushValues(h, values, kFloats, &decoded).ok());
  std::vector<float> mags;
  for (float x : g) mags.push_back(std::fabs(x));
  std::nth_element(mags.begin(), mags.begin() + 9, mags.end(), std::greater<float>());
  int sent = 0;
  for (size_t i = 0; i < kFloats; ++i) {
    if (decoded[i] != 0.0f) {
      ++sent;
      EXPECT_EQ(decoded[i], g[i]);
      EXPECT_GE(std::fabs(g[i]), mags[9]);
    }
  }
  EXPECT_EQ(sent, 10);
  EXPECT_EQ(cluster_.server(0).decode_stats().frames.load(), 1u);
}

TEST_F(CodecPushTest, OneBitPushIsDecodedAndApplied) {
  codec::CodecConfig c;
  c.type = "onebit";
  c.onebit_chunk = 32;
  c.error_feedback = true;
  c.min_compress_bytes = 0;
  std::vector<float> g = Gradient();
  auto [h, values] = Encode(c, g);
  ASSERT_EQ(h.codec(), proto::CODEC_ONEBIT);
  EXPECT_EQ(h.codec_chunk(), 32u);
  EXPECT_EQ(values.size(), 4u * 4 + 4u * 4);  // 4 scales, 4 sign words
  ExpectApplied(h, values);
}

TEST_F(CodecPushTest, SmallMessagesGoUncompressed) {
  codec::CodecConfig c = TopK();
  c.min_compress_bytes = kFloats * 4 + 1;
  std::vector<float> g = Gradient();
  auto [h, values] = Encode(c, g);
  EXPECT_EQ(h.codec(), proto::CODEC_NONE);
  EXPECT_EQ(values.size(), kFloats * 4);
  std::vector<float> before = Pull();
  ASSERT_EQ(Call(h, values).op(), proto::OP_REPLY);
  std::vector<float> after = Pull();
  for (size_t i = 0; i < kFloats; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - kLr * g[i]);
}

TEST(DenseCompressorTest, KeepsOneResidualPerServerMessageAndCountsBytes) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.1;
  c.error_feedback = true;
  c.min_compress_bytes = 0;
  auto comp = worker::DenseCompressor::Create(c, 1);
  ASSERT_TRUE(comp.ok()) << comp.status().ToString();
  std::vector<float> a(100, 1.0f), b(60, -2.0f);
  proto::Header h;
  Buffer v;
  // Different lengths for servers 0 and 1: one shared state would refuse the second.
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*comp)->Encode(0, 0, a.data(), a.size(), &h, &v).ok());
    EXPECT_EQ(h.codec_count(), 10u);
    ASSERT_TRUE((*comp)->Encode(0, 1, b.data(), b.size(), &h, &v).ok());
    EXPECT_EQ(h.codec_count(), 6u);
    EXPECT_EQ(v.size(), 6u * 8);
  }
  worker::CompressionStats st = (*comp)->stats();
  EXPECT_EQ(st.messages, 6u);
  EXPECT_EQ(st.compressed_messages, 6u);
  EXPECT_EQ(st.bytes_raw, 3u * (100 + 60) * 4);
  EXPECT_EQ(st.bytes_encoded, 3u * (10 + 6) * 8);
  EXPECT_DOUBLE_EQ(st.last_density, 0.1);
  // A server's share changing length (new shard map) restarts its stream instead of failing.
  std::vector<float> longer(200, 0.5f);
  ASSERT_TRUE((*comp)->Encode(0, 0, longer.data(), longer.size(), &h, &v).ok());
  EXPECT_EQ(h.codec_count(), 20u);
  // Onebit buckets must hold whole chunks.
  c.type = "onebit";
  c.onebit_chunk = 64;
  c.granularity = "bucket";
  c.bucket_bytes = 32 * 4;
  EXPECT_EQ(worker::DenseCompressor::Create(c, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CodecPushTest, BucketedTopKSendsEachBucketsLargestAndApplies) {
  codec::CodecConfig c = TopK();
  c.granularity = "bucket";
  c.bucket_bytes = 32 * 4;  // buckets of 32, 32, 32 and 4 floats: k = 3, 3, 3, 1
  std::vector<float> g = Gradient();
  auto [h, values] = Encode(c, g);
  ASSERT_EQ(h.codec(), proto::CODEC_TOPK);
  ASSERT_EQ(h.codec_count(), 10u);
  ExpectApplied(h, values);
  std::vector<float> decoded;
  ASSERT_TRUE(DecodePushValues(h, values, kFloats, &decoded).ok());
  for (size_t b = 0; b < kFloats; b += 32) {
    size_t len = std::min<size_t>(32, kFloats - b), k = len == 32 ? 3 : 1;
    std::vector<float> mags;
    for (size_t i = b; i < b + len; ++i) mags.push_back(std::fabs(g[i]));
    std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(), std::greater<float>());
    size_t sent = 0;
    for (size_t i = b; i < b + len; ++i) {
      if (decoded[i] == 0.0f) continue;
      ++sent;
      EXPECT_EQ(decoded[i], g[i]);
      EXPECT_GE(std::fabs(g[i]), mags[k - 1]) << "bucket " << b;
    }
    EXPECT_EQ(sent, k) << "bucket " << b;
  }
}

TEST_F(CodecPushTest, BucketedOneBitFrameEqualsTheWholeMessageFrame) {
  codec::CodecConfig c;
  c.type = "onebit";
  c.onebit_chunk = 32;
  c.min_compress_bytes = 0;
  std::vector<float> g = Gradient();
  auto [whole_h, whole] = Encode(c, g);
  c.granularity = "bucket";
  c.bucket_bytes = 64 * 4;  // 64 + 36 floats
  auto [h, values] = Encode(c, g);
  EXPECT_EQ(h.codec_count(), whole_h.codec_count());
  EXPECT_EQ(h.codec_chunk(), whole_h.codec_chunk());
  ASSERT_EQ(values.size(), whole.size());
  EXPECT_EQ(std::memcmp(values.data(), whole.data(), whole.size()), 0);
  ExpectApplied(h, values);
}

TEST_F(CodecPushTest, BadFramesAreRejectedAndNothingIsApplied) {
  auto [h, values] = Encode(TopK(), Gradient());
  // An index past the 100 floats the keys cover.
  std::vector<uint8_t> bytes(values.data(), values.data() + values.size());
  uint32_t bad_index = kFloats;
  std::memcpy(bytes.data() + 4 * 3, &bad_index, 4);
  ExpectRejected(h, VecBuf(bytes), "index 100 >= length 100");
  // Count disagrees with the payload: one pair fewer than the header says.
  ExpectRejected(h, values.Slice(0, values.size() - 8), "values frame has 72 bytes");
  proto::Header short_count = h;
  short_count.set_codec_count(h.codec_count() - 1);
  ExpectRejected(short_count, values, "payload is 80 bytes, expected 72");
  // Unknown codec id, and an id that would alias top-k if narrowed to 8 bits.
  proto::Header unknown = h;
  unknown.set_codec(static_cast<proto::Codec>(9));
  ExpectRejected(unknown, values, "unknown codec");
  unknown.set_codec(static_cast<proto::Codec>(256 + 3));
  ExpectRejected(unknown, values, "unknown codec");
  // Onebit with a chunk of 0.
  proto::Header onebit = h;
  onebit.set_codec(proto::CODEC_ONEBIT);
  onebit.set_codec_count(kFloats);
  onebit.set_codec_chunk(0);
  ExpectRejected(onebit, values, "chunk 0");
  // A dense pull cannot ask for a codec (sparse pulls may ask for fp16 / bf16 rows).
  proto::Header pull = Req(proto::OP_PULL_DENSE, 0);
  pull.set_codec(proto::CODEC_TOPK);
  ExpectRejected(pull, Buffer(), "only pushes and sparse pulls (fp16 / bf16 rows) may carry a codec");
  // The server keeps serving: the intact frame still applies.
  ExpectApplied(h, values);
  EXPECT_EQ(cluster_.server(0).stats().pushes_applied, 1u);
}

}  // namespace
}  // namespace osprey::server
