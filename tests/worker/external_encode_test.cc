// DenseCompressor's seam for encoders that run elsewhere (StartExternal / RecordExternal, used by
// the GPU worker's device path): booking the frames another compressor made, with the raw
// gradient only at the positions StartExternal names, must give the same stats, density
// trajectory and per-layer diagnostics as encoding them here.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "worker/compression.h"

namespace osprey::worker {
namespace {

TEST(ExternalEncodeTest, BookedFramesReadAsEncodedOnes) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.02;
  c.error_feedback = true;
  c.granularity = "layer";
  c.layer_min_k = 3;
  c.min_compress_bytes = 256;
  const codec::TensorLayout layout = {{"a", 0, 5000}, {"b", 5000, 40}, {"c", 5040, 20000}};
  auto encoder = DenseCompressor::Create(c, 3, layout);
  auto books = DenseCompressor::Create(c, 3, layout);
  ASSERT_TRUE(encoder.ok() && books.ok());
  // One message per server: server 0 the first 12000 floats, server 1 the rest, and a third
  // message of 30 floats (below min_compress_bytes: plain fp32).
  const std::vector<DenseCompressor::Ranges> ranges = {{{0, 12000}}, {{12000, 13040}}};
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<uint32_t>> positions;
  for (int s = 0; s < 2; ++s) {
    positions.push_back((*books)->StartExternal(0, s, ranges[s], ranges[s][0].second));
    EXPECT_FALSE(positions.back().empty());
  }
  for (int step = 0; step < 12; ++step) {
    for (int s = 0; s < 2; ++s) {
      std::vector<float> g(ranges[s][0].second);
      for (float& x : g) x = normal(rng) * (s == 1 && step % 3 == 0 ? 0.0f : 1.0f);
      PushValues in;
      in.server = s;
      in.floats = g.size();
      in.base = g.data();
      in.first = ranges[s][0].first;
      proto::Header h;
      Buffer values;
      ASSERT_TRUE((*encoder)->Encode(in, &h, &values).ok());
      codec::EncodedMeta meta{static_cast<codec::CodecId>(h.codec()), static_cast<codec::ValueType>(h.codec_value_type()),
                              g.size(), h.codec_count(), h.codec_chunk()};
      std::vector<float> samples;
      for (uint32_t p : positions[s]) samples.push_back(g[p]);
      ASSERT_TRUE((*books)
                      ->RecordExternal(0, s, g.size(), codec::EncodedView{meta, values.data(), values.size()},
                                       samples.data(), samples.size(), 0.0)
                      .ok());
    }
    std::vector<float> tiny(30, 1.0f);
    proto::Header h;
    Buffer values;
    ASSERT_TRUE((*encoder)->Encode(0, 2, tiny.data(), tiny.size(), &h, &values).ok());
    ASSERT_EQ(h.codec(), proto::CODEC_NONE);
    codec::EncodedMeta none{codec::CodecId::kNone, codec::ValueType::kFp32, 30, 30, 0};
    ASSERT_TRUE((*books)->RecordExternal(0, 2, 30, codec::EncodedView{none, values.data(), values.size()}, nullptr, 0, 0)
                    .ok());
  }
  const CompressionStats a = (*encoder)->stats(), b = (*books)->stats();
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.compressed_messages, b.compressed_messages);
  EXPECT_EQ(a.bytes_raw, b.bytes_raw);
  EXPECT_EQ(a.bytes_encoded, b.bytes_encoded);
  EXPECT_EQ(a.last_density, b.last_density);
  ASSERT_EQ(a.density_trajectory.size(), b.density_trajectory.size());
  for (size_t i = 0; i < a.density_trajectory.size(); ++i) {
    EXPECT_EQ(a.density_trajectory[i].step, b.density_trajectory[i].step);
    EXPECT_EQ(a.density_trajectory[i].density, b.density_trajectory[i].density);
  }
  ASSERT_EQ(a.diagnostics.layers.size(), 3u);
  ASSERT_EQ(b.diagnostics.layers.size(), 3u);
  EXPECT_EQ(a.diagnostics.steps, b.diagnostics.steps);
  EXPECT_EQ(a.diagnostics.cosine, b.diagnostics.cosine);
  EXPECT_EQ(a.diagnostics.no_update_share, b.diagnostics.no_update_share);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.diagnostics.layers[i].raw_norm, b.diagnostics.layers[i].raw_norm) << i;
    EXPECT_EQ(a.diagnostics.layers[i].sent_norm, b.diagnostics.layers[i].sent_norm) << i;
    EXPECT_EQ(a.diagnostics.layers[i].cosine, b.diagnostics.layers[i].cosine) << i;
  }
}

TEST(ExternalEncodeTest, RecordWithoutStartOrWithTheWrongSamplesIsAnError) {
  codec::CodecConfig c;
  c.type = "topk";
  c.min_compress_bytes = 0;
  auto books = DenseCompressor::Create(c, 3);
  ASSERT_TRUE(books.ok());
  std::vector<uint8_t> payload(8, 0);  // one pair: index 0, value 0
  codec::EncodedMeta meta{codec::CodecId::kTopK, codec::ValueType::kFp32, 100, 1, 0};
  const codec::EncodedView frame{meta, payload.data(), payload.size()};
  EXPECT_EQ((*books)->RecordExternal(0, 0, 100, frame, nullptr, 0, 0).code(), StatusCode::kFailedPrecondition);
  const std::vector<uint32_t> pos = (*books)->StartExternal(0, 0, {{0, 100}}, 100);
  EXPECT_EQ(pos.size(), 100u);  // a small message: every position
  std::vector<float> samples(pos.size() - 1, 0.0f);
  EXPECT_EQ((*books)->RecordExternal(0, 0, 100, frame, samples.data(), samples.size(), 0).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::worker
