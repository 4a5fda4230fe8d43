// The fuzz corpora in the ordinary test suite: the seed requests (tests/fuzz/corpus, written by
// make_seeds) are real requests that the fuzzed server answers with OP_REPLY, the codec seeds
// decode, and every input a fuzzer run found (tests/fuzz/regressions) is answered without a crash
// -- so a fix stays fixed without clang or libFuzzer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/codec/encoded.h"
#include "tests/fuzz/fuzz_harness.h"
#include "tests/testing/test_env.h"

namespace osprey::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Files(const std::string& dir) {
  std::vector<fs::path> out;
  const fs::path root = fs::path(testing::SourceDir()) / "tests/fuzz" / dir;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string SourceFile(const std::string& rel) {
  return (fs::path(testing::SourceDir()) / "tests/fuzz" / rel).string();
}

proto::Header Replay(FuzzServer* server, const fs::path& file) {
  const std::string bytes = testing::ReadFile(file.string());
  return server->Run(SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

TEST(FuzzCorpusTest, SeedRequestsAreRealRequestsTheServerAnswers) {
  FuzzServer server;
  const auto files = Files("corpus/request");
  ASSERT_GE(files.size(), 10u);
  for (const fs::path& f : files) {
    proto::Header r = Replay(&server, f);
    EXPECT_EQ(r.op(), proto::OP_REPLY) << f.filename() << ": " << r.error();
  }
  EXPECT_EQ(server.server().stats().bad_requests, 0u);
  EXPECT_GT(server.server().decode_stats().frames.load(), 5u) << "the compressed pushes decode";
}

// A codec_fuzzer input decoded as codec_fuzzer does (its layout is in codec_fuzzer.cc).
Status DecodeCodecInput(const std::string& b) {
  if (b.size() < 12) return InvalidArgument("codec input shorter than 12 bytes");
  codec::EncodedView v;
    v.meta.codec = static_cast<codec::CodecId>(b[0]);
    v.meta.value_type = static_cast<codec::ValueType>(b[1]);
    uint16_t length = 0;
    uint32_t count = 0, chunk = 0;
    std::memcpy(&length, b.data() + 2, 2);
    std::memcpy(&count, b.data() + 4, 4);
    std::memcpy(&chunk, b.data() + 8, 4);
    v.meta.length = length;
    v.meta.count = count;
    v.meta.chunk = chunk;
  std::vector<uint8_t> payload(b.begin() + 12, b.end());
  v.data = payload.data();
  v.size = payload.size();
  std::vector<float> dst(length);
  return codec::DecodeAddFrame(v, dst.data(), dst.size(), 1.0f);
}

TEST(FuzzCorpusTest, SeedCodecFramesDecode) {
  const auto files = Files("corpus/codec");
  ASSERT_GE(files.size(), 6u);
  for (const fs::path& f : files) {
    Status s = DecodeCodecInput(testing::ReadFile(f.string()));
    EXPECT_TRUE(s.ok()) << f.filename() << ": " << s.ToString();
  }
}

// Found by the fuzzers (both targets) with an off-by-one planted in the sparse-frame index
// check (idx > n instead of idx >= n): a top-k / random-k pair whose index equals the length
// must be refused, not added one past the end.
TEST(FuzzCorpusTest, SparseIndexEqualToLengthIsRefused) {
  Status s = DecodeCodecInput(testing::ReadFile(SourceFile("regressions/codec/index-equal-to-length")));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(">= length 100"), std::string::npos) << s.ToString();
  FuzzServer server;
  proto::Header r = Replay(&server, SourceFile("regressions/request/index-equal-to-length"));
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_NE(r.error().find("has index"), std::string::npos) << r.error();
}

TEST(FuzzCorpusTest, FoundCodecInputsDecodeOrAreRefused) {
  for (const fs::path& f : Files("regressions/codec")) (void)DecodeCodecInput(testing::ReadFile(f.string()));
}

TEST(FuzzCorpusTest, FoundInputsAreAnsweredWithoutACrash) {
  FuzzServer server;
  for (const fs::path& f : Files("regressions/request")) {
    proto::Header r = Replay(&server, f);
    EXPECT_TRUE(r.op() == proto::OP_REPLY || r.op() == proto::OP_ERROR) << f.filename();
  }
  // The server still serves a good request.
  const auto seeds = Files("corpus/request");
  ASSERT_FALSE(seeds.empty());
  EXPECT_EQ(Replay(&server, seeds.front()).op(), proto::OP_REPLY);
}

}  // namespace
}  // namespace osprey::fuzz
