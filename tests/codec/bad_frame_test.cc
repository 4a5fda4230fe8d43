#include <gtest/gtest.h>

#include <cstring>

#include "common/codec/codec.h"
#include "tests/codec/codec_test_util.h"

namespace osprey::codec {
namespace {

using testing::RandomGradient;

class BadFrameTest : public ::testing::Test {
 protected:
  static constexpr size_t kN = 1000;

  Encoded EncodeWith(const char* type) {
    CodecConfig c;
    c.type = type;
    c.density = 0.05;
    auto made = MakeCodec(c);
    EXPECT_TRUE(made.ok());
    codec_ = std::move(made).value();
    CodecState state;
    Encoded e;
    EXPECT_TRUE(codec_->Encode(g_.data(), kN, &state, &e).ok());
    return e;
  }

  // Decodes `e` into a buffer of ones, expects `code` with `phrase` in the message, and the buffer
  // untouched: a bad frame applies nothing.
  void ExpectRejected(const Encoded& e, StatusCode code, const std::string& phrase, size_t n = kN) {
    std::vector<float> dst(kN, 1.0f);
    const Status st = codec_->DecodeAdd(e.view(), dst.data(), n, 1.0f);
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(phrase), std::string::npos) << st.ToString();
    for (float v : dst) ASSERT_EQ(v, 1.0f);
    // The config-free entry points the server uses agree, and write nothing either.
    EXPECT_EQ(DecodeAddFrame(e.view(), dst.data(), n, 1.0f).code(), code);
    EXPECT_EQ(DecodeFrame(e.view(), dst.data(), n).code(), code);
    for (float v : dst) ASSERT_EQ(v, 1.0f);
  }

  std::vector<float> g_ = RandomGradient(kN, 30);
  std::unique_ptr<Codec> codec_;
};

// DecodeFrame (what the server decodes a push with) overwrites every element with what
// DecodeAddFrame adds to zeros, for every codec, whatever dst held before.
TEST_F(BadFrameTest, DecodeFrameWritesWhatDecodeAddAddsToZeros) {
  for (const char* type : {"none", "fp16", "bf16", "topk", "randomk", "onebit"}) {
    Encoded e = EncodeWith(type);
    std::vector<float> added(kN, 0.0f), written(kN, 7.0f);
    ASSERT_TRUE(DecodeAddFrame(e.view(), added.data(), kN, 1.0f).ok()) << type;
    ASSERT_TRUE(DecodeFrame(e.view(), written.data(), kN).ok()) << type;
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(written[i], added[i]) << type << " at " << i;
  }
}

TEST_F(BadFrameTest, IndexOutOfRangeInTheLastPair) {
  Encoded e = EncodeWith("topk");
  const uint32_t bad = kN;
  std::memcpy(e.payload.data() + 4 * (e.meta.count - 1), &bad, sizeof(bad));
  ExpectRejected(e, StatusCode::kDataLoss, "index 1000 >= length 1000");
}

TEST_F(BadFrameTest, CountDisagreesWithPayload) {
  Encoded e = EncodeWith("topk");
  e.meta.count += 1;
  ExpectRejected(e, StatusCode::kDataLoss, "expected");
}

TEST_F(BadFrameTest, TruncatedPayload) {
  for (const char* type : {"none", "fp16", "topk", "randomk", "onebit"}) {
    Encoded e = EncodeWith(type);
    e.payload.pop_back();
    ExpectRejected(e, StatusCode::kDataLoss, "payload is");
  }
}

TEST_F(BadFrameTest, UnknownCodecId) {
  Encoded e = EncodeWith("topk");
  e.meta.codec = static_cast<CodecId>(42);
  ExpectRejected(e, StatusCode::kInvalidArgument, "42");
}

TEST_F(BadFrameTest, FrameOfAnotherCodec) {
  Encoded e = EncodeWith("topk");
  e.meta.codec = CodecId::kRandomK;  // a valid frame, but this codec does not decode it
  std::vector<float> dst(kN, 1.0f);
  const Status st = codec_->DecodeAdd(e.view(), dst.data(), kN, 1.0f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("randomk"), std::string::npos) << st.ToString();
}

TEST_F(BadFrameTest, LengthMismatch) {
  Encoded e = EncodeWith("fp16");
  ExpectRejected(e, StatusCode::kInvalidArgument, "destination has 999", kN - 1);
}

TEST_F(BadFrameTest, SparseCountAboveLengthAndDenseCountNotLength) {
  Encoded e = EncodeWith("topk");
  e.meta.count = kN + 1;
  e.payload.resize(8 * (kN + 1));
  ExpectRejected(e, StatusCode::kDataLoss, "count 1001");
  Encoded d = EncodeWith("none");
  d.meta.count = 10;
  ExpectRejected(d, StatusCode::kDataLoss, "count 10");
}

TEST_F(BadFrameTest, ValueTypeTheCodecDoesNotCarry) {
  Encoded e = EncodeWith("fp16");
  e.meta.value_type = ValueType::kBf16;
  ExpectRejected(e, StatusCode::kDataLoss, "value type bf16");
}

TEST_F(BadFrameTest, OneBitChunkAndPadding) {
  Encoded e = EncodeWith("onebit");
  e.meta.chunk = 0;
  ExpectRejected(e, StatusCode::kDataLoss, "chunk 0");
  e.meta.chunk = 48;
  ExpectRejected(e, StatusCode::kDataLoss, "chunk 48");
  e = EncodeWith("onebit");
  e.payload.back() |= 0x80;  // bit 31 of the last word: element 1023 > n
  ExpectRejected(e, StatusCode::kDataLoss, "padding");
  Encoded sparse = EncodeWith("topk");
  sparse.meta.chunk = 32;
  ExpectRejected(sparse, StatusCode::kDataLoss, "chunk 32");
}

}  // namespace
}  // namespace osprey::codec
