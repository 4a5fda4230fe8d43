// DeviceDenseEncoder (worker/gpu/device_encoder.h) against the CPU DenseCompressor: over several
// steps, with the residuals (and momenta) carried on each side, every server message's frame
// from the device must be byte for byte the one DenseCompressor::Encode makes -- header meta and
// values frame -- for granularity tensor, bucket and layer; and the bookkeeping (stats,
// diagnostics) must read the same. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/codec/cuda_test_util.h"
#include "worker/compression.h"
#include "worker/gpu/device_encoder.h"

namespace osprey::worker::gpu {
namespace {

constexpr uint64_t kChunk = 1024;
constexpr uint32_t kTable = 0;

enum class Servers { kTwo, kTwoAndATail, kOne };

// Chunks 0..9 of kChunk floats. kTwo: server 0 holds {0, 1, 2, 5, 6, 9} (two runs and a
// single), server 1 {3, 4, 7, 8}; kTwoAndATail adds a short chunk 10 of 100 floats, server 2's
// whole message (contiguous, small enough to fall below min_compress_bytes); kOne: one server
// holds all ten (one contiguous message, read in place).
std::vector<std::vector<uint64_t>> Owned(Servers layout) {
  switch (layout) {
    case Servers::kTwo: return {{0, 1, 2, 5, 6, 9}, {3, 4, 7, 8}};
    case Servers::kTwoAndATail: return {{0, 1, 2, 5, 6, 9}, {3, 4, 7, 8}, {10}};
    case Servers::kOne: return {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  }
  return {};
}

std::vector<DenseRoute> Routes(Servers layout) {
  const std::vector<std::vector<uint64_t>> owned = Owned(layout);
  std::vector<DenseRoute> routes;
  for (size_t s = 0; s < owned.size(); ++s) {
    DenseRoute r;
    r.server = static_cast<int>(s);
    for (uint64_t c : owned[s]) {
      const uint64_t len = c == 10 ? 100 : kChunk;
      r.ranges.emplace_back(c * kChunk, len);
      r.floats += len;
    }
    r.contiguous = owned[s].back() - owned[s].front() + 1 == owned[s].size();
    routes.push_back(std::move(r));
  }
  return routes;
}

uint64_t TableFloats(Servers layout) { return 10 * kChunk + (layout == Servers::kTwoAndATail ? 100 : 0); }

// Tensors of very different sizes that cross chunk and server boundaries.
codec::TensorLayout Layout(uint64_t total) {
  const std::vector<uint64_t> sizes = {7, 300, 2500, 33, 4000, 1};
  codec::TensorLayout layout;
  uint64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    layout.push_back({"t" + std::to_string(i), at, sizes[i]});
    at += sizes[i];
  }
  layout.push_back({"rest", at, total - at});
  return layout;
}

struct Case {
  const char* name;
  codec::CodecConfig config;
  Servers servers = Servers::kTwo;
};

void RunCase(const Case& c, int steps) {
  SCOPED_TRACE(c.name);
  const uint64_t total = TableFloats(c.servers);
  const codec::TensorLayout layout = c.config.granularity == "layer" ? Layout(total) : codec::TensorLayout{};
  auto cpu = DenseCompressor::Create(c.config, 7, layout);
  auto books = DenseCompressor::Create(c.config, 7, layout);  // the device path's bookkeeping
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(books.ok());
  const std::vector<DenseRoute> routes = Routes(c.servers);
  auto dev = DeviceDenseEncoder::Create(books->get(), kTable, routes, /*chunk=*/1000);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<float> g(total);
    for (float& x : g) x = normal(rng) * (step % 2 == 0 ? 1.0f : 0.01f);
    for (size_t i = 0; i < total; i += 97) g[i] = 0.5f;  // ties at many magnitudes
    cuda::DeviceBuffer dg = cuda::testing::Upload(g);
    const int slot = step % DeviceDenseEncoder::kSlots;
    for (const DenseRoute& r : routes) {
      ASSERT_TRUE((*dev)->Enqueue(r.server, dg.as<float>(), slot, stream).ok());
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (const DenseRoute& r : routes) {
      SCOPED_TRACE(::testing::Message() << "server " << r.server);
      auto frame = (*dev)->Take(r.server, slot);
      ASSERT_TRUE(frame.ok()) << frame.status().ToString();
      PushValues in;
      in.table = kTable;
      in.server = r.server;
      in.floats = r.floats;
      in.base = g.data();
      if (r.contiguous) {
        in.base = g.data() + r.ranges[0].first;
        in.first = r.ranges[0].first;
      } else {
        in.ranges = r.ranges.data();
        in.num_ranges = r.ranges.size();
      }
      proto::Header want_h;
      Buffer want;
      ASSERT_TRUE((*cpu)->Encode(in, &want_h, &want).ok());
      EXPECT_EQ(static_cast<int>(frame->meta.codec), static_cast<int>(want_h.codec()));
      if (want_h.codec() != proto::CODEC_NONE) {
        EXPECT_EQ(static_cast<uint32_t>(frame->meta.value_type), want_h.codec_value_type());
        EXPECT_EQ(frame->meta.count, want_h.codec_count());
        EXPECT_EQ(frame->meta.chunk, want_h.codec_chunk());
      }
      ASSERT_EQ(frame->payload.size(), want.size());
      size_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i) differ += frame->payload.data()[i] != want.data()[i];
      EXPECT_EQ(differ, 0u) << "bytes of the values frame differ";
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  const CompressionStats a = (*cpu)->stats(), b = (*books)->stats();
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
  EXPECT_EQ(a.diagnostics.steps, b.diagnostics.steps);
  EXPECT_EQ(a.diagnostics.cosine, b.diagnostics.cosine);
  ASSERT_EQ(a.diagnostics.layers.size(), b.diagnostics.layers.size());
  for (size_t i = 0; i < a.diagnostics.layers.size(); ++i) {
    EXPECT_EQ(a.diagnostics.layers[i].raw_norm, b.diagnostics.layers[i].raw_norm) << i;
    EXPECT_EQ(a.diagnostics.layers[i].sent_norm, b.diagnostics.layers[i].sent_norm) << i;
    EXPECT_EQ(a.diagnostics.layers[i].no_update_share, b.diagnostics.layers[i].no_update_share) << i;
  }
}

codec::CodecConfig TopK(const char* granularity) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.01;
  c.error_feedback = true;
  c.granularity = granularity;
  c.bucket_bytes = 4 * 3000;  // units that do not line up with chunks
  c.layer_min_k = 4;
  c.min_compress_bytes = 1024;
  return c;
}

TEST(DeviceEncoderTest, TensorFramesMatchTheCpuCompressor) {
  OSPREY_REQUIRE_GPU();
  RunCase({"tensor", TopK("tensor")}, 6);
}

TEST(DeviceEncoderTest, BucketFramesMatchTheCpuCompressor) {
  OSPREY_REQUIRE_GPU();
  RunCase({"bucket", TopK("bucket")}, 6);
}

TEST(DeviceEncoderTest, LayerFramesMatchTheCpuCompressor) {
  OSPREY_REQUIRE_GPU();
  RunCase({"layer", TopK("layer")}, 6);
}

TEST(DeviceEncoderTest, MomentumFp16AndAWarmupScheduleMatch) {
  OSPREY_REQUIRE_GPU();
  codec::CodecConfig c = TopK("layer");
  c.dgc_momentum = 0.9f;
  c.value_type = "fp16";
  c.schedule.type = "warmup";
  c.schedule.start_density = 0.25;
  c.schedule.steps = 4;
  RunCase({"layer momentum fp16 warmup", c}, 7);
  c.granularity = "bucket";
  c.value_type = "bf16";
  RunCase({"bucket momentum bf16 warmup", c}, 7);
}

TEST(DeviceEncoderTest, WithoutErrorFeedbackAndASmallMessageAsFp32) {
  OSPREY_REQUIRE_GPU();
  codec::CodecConfig c = TopK("tensor");
  c.error_feedback = false;
  c.min_compress_bytes = 4096;  // server 2's 100 floats go as plain fp32
  RunCase({"no ef, fp32 tail", c, Servers::kTwoAndATail}, 4);
}

TEST(DeviceEncoderTest, OneServersContiguousMessageIsReadInPlace) {
  OSPREY_REQUIRE_GPU();
  RunCase({"one server, layer", TopK("layer"), Servers::kOne}, 5);
  RunCase({"one server, bucket", TopK("bucket"), Servers::kOne}, 5);
}

// Refused before any device work, so this one also runs without a GPU.
TEST(DeviceEncoderTest, RefusesCodecsItCannotEncode) {
  codec::CodecConfig c = TopK("tensor");
  c.topk_method = "sample";
  EXPECT_NE(DeviceEncodeUnsupported(c), "");
  auto comp = DenseCompressor::Create(c, 7);
  ASSERT_TRUE(comp.ok());
  auto dev = DeviceDenseEncoder::Create(comp->get(), kTable, Routes(Servers::kTwo));
  EXPECT_EQ(dev.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceEncodeUnsupported(TopK("layer")), "");
  codec::CodecConfig onebit;
  onebit.type = "onebit";
  EXPECT_NE(DeviceEncodeUnsupported(onebit).find("onebit"), std::string::npos);
}

}  // namespace
}  // namespace osprey::worker::gpu
