// CUDA one-bit and cast encoders and every decode-add against the CPU codecs: identical payload
// bytes, residuals and decoded sums; bad frames change nothing on the device either.
#include <gtest/gtest.h>

#include <cstring>

#include "common/codec/codec.h"
#include "tests/codec/cuda_test_util.h"

namespace osprey::cuda {
namespace {

using codec::ValueType;

std::unique_ptr<codec::Codec> Make(codec::CodecConfig c) {
  auto made = codec::MakeCodec(c);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

// Runs `steps` EF steps of `config` on the CPU codec stack and of `encode` on the GPU, comparing
// payload bytes and residuals after each.
void CompareDenseEncoder(const codec::CodecConfig& config, size_t n,
                         const std::function<Status(const EfTensor&, void* payload)>& encode) {
  auto cpu = Make(config);
  codec::CodecState state;
  const std::vector<float> zeros(n, 0.0f);
  DeviceBuffer dg = testing::Upload(zeros);
  DeviceBuffer dr = testing::Upload(zeros);
  auto payload = DeviceBuffer::Allocate(4 * n + 64);
  ASSERT_TRUE(payload.ok());
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << config.type << " n=" << n << " step=" << step);
    const auto g = codec::testing::RandomGradient(n, 500 + step);
    codec::Encoded e;
    ASSERT_TRUE(cpu->Encode(g.data(), n, &state, &e).ok());
    if (n) {
      ASSERT_EQ(cudaMemcpy(dg.data(), g.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
    }
    const Status st = encode(EfTensor{dg.as<float>(), dr.as<float>(), nullptr, 0.0f, n}, payload->data());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto bytes = testing::Download<uint8_t>(payload->data(), e.payload.size());
    EXPECT_TRUE(bytes == e.payload) << "payload bytes differ";
    testing::ExpectSameBits(testing::Download<float>(dr.data(), n), state.residual, "residual");
  }
}

TEST(CudaDenseTest, OneBitMatchesCpuForEveryChunkShape) {
  OSPREY_REQUIRE_GPU();
  for (uint32_t chunk : {32u, 96u, 512u, 1024u, 2048u}) {  // register path and two-pass path
    for (size_t n : {1ul, 1000ul, 100003ul, (1ul << 20)}) {
      codec::CodecConfig c;
      c.type = "onebit";
      c.onebit_chunk = chunk;
      c.error_feedback = true;
      CompareDenseEncoder(c, n, [&](const EfTensor& t, void* payload) {
        return OneBitEncode(t, chunk, payload, nullptr);
      });
    }
  }
}

TEST(CudaDenseTest, CastsMatchCpu) {
  OSPREY_REQUIRE_GPU();
  for (const char* type : {"fp16", "bf16"}) {
    const ValueType vt = std::string(type) == "fp16" ? ValueType::kFp16 : ValueType::kBf16;
    for (size_t n : {1ul, 4097ul, 1000003ul}) {
      codec::CodecConfig c;
      c.type = type;
      c.error_feedback = true;
      CompareDenseEncoder(c, n, [&](const EfTensor& t, void* payload) { return CastEncode(t, vt, payload, nullptr); });
    }
  }
}

// Decodes one CPU-encoded frame on the device and on the host into the same starting buffer.
void CompareDecode(const codec::Encoded& e, size_t n, float scale) {
  const auto start = codec::testing::RandomGradient(n, 77);
  std::vector<float> cpu = start;
  ASSERT_TRUE(codec::DecodeAddFrame(e.view(), cpu.data(), n, scale).ok());
  DeviceBuffer dst = testing::Upload(start);
  DeviceBuffer payload = testing::Upload(e.payload);
  DeviceBuffer bad = testing::Upload(std::vector<uint32_t>{7});
  const Status st = DecodeAdd(e.meta, payload.data(), e.payload.size(), dst.as<float>(), n, scale, bad.as<uint32_t>(),
                              nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(testing::DownloadCount(bad.as<uint32_t>()), 0u);
  testing::ExpectSameBits(testing::Download<float>(dst.data(), n), cpu, "decoded sum");
}

TEST(CudaDenseTest, DecodeAddMatchesCpuForEveryCodec) {
  OSPREY_REQUIRE_GPU();
  const size_t n = 1000003;
  const auto g = codec::testing::RandomGradient(n, 78);
  for (const char* type : {"none", "fp16", "bf16", "topk", "randomk", "onebit"}) {
    for (const char* value_type : {"fp32", "fp16", "bf16"}) {
      if (std::string(value_type) != "fp32" && std::string(type) != "topk") continue;
      SCOPED_TRACE(::testing::Message() << type << " " << value_type);
      codec::CodecConfig c;
      c.type = type;
      c.value_type = value_type;
      c.onebit_chunk = 96;
      auto codec = Make(c);
      codec::CodecState state;
      codec::Encoded e;
      ASSERT_TRUE(codec->Encode(g.data(), n, &state, &e).ok());
      CompareDecode(e, n, 0.25f);
    }
  }
}

TEST(CudaDenseTest, BadFramesChangeNothingOnTheDevice) {
  OSPREY_REQUIRE_GPU();
  const size_t n = 5000;
  const auto g = codec::testing::RandomGradient(n, 79);
  const std::vector<float> ones(n, 1.0f);
  for (const char* type : {"topk", "onebit"}) {
    codec::CodecConfig c;
    c.type = type;
    c.density = 0.05;
    auto codec = Make(c);
    codec::CodecState state;
    codec::Encoded e;
    ASSERT_TRUE(codec->Encode(g.data(), n, &state, &e).ok());
    if (std::string(type) == "topk") {
      const uint32_t out_of_range = n + 5;
      std::memcpy(e.payload.data() + 4 * (e.meta.count - 1), &out_of_range, 4);
    } else {
      e.payload.back() |= 0x80;  // a padding bit past n = 5000 (5000 % 32 = 8)
    }
    DeviceBuffer dst = testing::Upload(ones);
    DeviceBuffer payload = testing::Upload(e.payload);
    DeviceBuffer bad = testing::Upload(std::vector<uint32_t>{0});
    ASSERT_TRUE(DecodeAdd(e.meta, payload.data(), e.payload.size(), dst.as<float>(), n, 1.0f, bad.as<uint32_t>(),
                          nullptr).ok());
    EXPECT_EQ(testing::DownloadCount(bad.as<uint32_t>()), 1u) << type;
    EXPECT_TRUE(testing::Download<float>(dst.data(), n) == ones) << type << ": a bad frame was applied";
  }
}

TEST(CudaDenseTest, HostSideFrameChecksReturnErrors) {
  OSPREY_REQUIRE_GPU();
  DeviceBuffer dst = testing::Upload(std::vector<float>(100, 0.0f));
  DeviceBuffer bad = testing::Upload(std::vector<uint32_t>{0});
  codec::EncodedMeta meta{codec::CodecId::kTopK, ValueType::kFp32, 100, 10, 0};
  EXPECT_EQ(DecodeAdd(meta, dst.data(), 79, dst.as<float>(), 100, 1.0f, bad.as<uint32_t>(), nullptr).code(),
            StatusCode::kDataLoss);  // truncated: 10 pairs need 80 bytes
  meta.codec = static_cast<codec::CodecId>(9);
  EXPECT_EQ(DecodeAdd(meta, dst.data(), 80, dst.as<float>(), 100, 1.0f, bad.as<uint32_t>(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(OneBitEncode(EfTensor{dst.as<float>(), nullptr, nullptr, 0.0f, 100}, 48, dst.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::cuda
