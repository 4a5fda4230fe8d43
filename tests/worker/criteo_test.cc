#include "worker/data/criteo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace osprey::data {
namespace {

// One TSV line; dense[j] / cats[c] default to "j" / an 8-digit hex of (line, c).
std::string Line(const std::string& label, int line, std::vector<std::string> dense = {},
                 std::vector<std::string> cats = {}) {
  dense.resize(13);
  cats.resize(26);
  std::string out = label;
  for (int j = 0; j < 13; ++j) out += "\t" + (dense[j].empty() && j == 0 ? std::to_string(line) : dense[j]);
  for (int c = 0; c < 26; ++c) {
    if (cats[c].empty()) {
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(line * 100 + c));
      cats[c] = hex;
    }
    out += "\t" + (cats[c] == "-" ? std::string() : cats[c]);
  }
  return out;
}

class CriteoReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = ::testing::TempDir() + "/criteo_reader_test_" + name + ".tsv";
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  static std::unique_ptr<CriteoReader> OpenOrDie(const std::string& path, int shard = 0, int num_shards = 1) {
    auto reader = CriteoReader::Open(path, shard, num_shards);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    return std::move(reader).value();
  }
};

TEST_F(CriteoReaderTest, ParsesValues) {
  std::vector<std::string> dense = {"3", "", "-2", "1000000", "0"};
  std::vector<std::string> cats = {"68fd1e64", "-", "0", "FFFFFFFF", "a"};
  // Second line: CRLF ending; third: no final newline.
  const std::string path = Write("values", Line("1", 0, dense, cats) + "\n" + Line("0", 1) + "\r\n" + Line("1", 2));
  auto reader = OpenOrDie(path);
  Batch batch;
  ASSERT_TRUE(reader->Next(8, &batch).ok());
  ASSERT_EQ(batch.size, 3);
  ASSERT_TRUE(CheckBatchShape(batch).ok());
  EXPECT_TRUE(batch.oracle_prob.empty());
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1}));
  EXPECT_FLOAT_EQ(batch.dense[0], std::log1p(3.0f));
  EXPECT_EQ(batch.dense[1], 0.0f);  // empty
  EXPECT_EQ(batch.dense[2], 0.0f);  // negative -> max(x, 0)
  EXPECT_FLOAT_EQ(batch.dense[3], static_cast<float>(std::log1p(1000000.0)));
  EXPECT_EQ(batch.dense[4], 0.0f);
  EXPECT_EQ(batch.ids[0], 0x68fd1e64u);
  EXPECT_EQ(batch.ids[1], CriteoReader::kMissingId);
  EXPECT_EQ(batch.ids[2], 0u);
  EXPECT_EQ(batch.ids[3], 0xFFFFFFFFu);
  EXPECT_EQ(batch.ids[4], 0xAu);
  EXPECT_EQ(batch.ids[26 + 7], 107u);  // line 1, column 7 -> hex of 107
  EXPECT_FLOAT_EQ(batch.dense[2 * 13], std::log1p(2.0f));
  EXPECT_EQ(batch.ids[2 * 26 + 25], 225u);
  EXPECT_EQ(FeatureKey(1, CriteoReader::kMissingId) & kFeatureIdMask, CriteoReader::kMissingId);
  ASSERT_TRUE(reader->Next(8, &batch).ok());
  EXPECT_EQ(batch.size, 0);
}

TEST_F(CriteoReaderTest, BatchesAndShards) {
  std::string contents;
  for (int i = 0; i < 10; ++i) contents += Line(i % 2 ? "1" : "0", i) + "\n";
  const std::string path = Write("shards", contents);
  {
    auto reader = OpenOrDie(path);
    Batch batch;
    std::vector<int> sizes;
    do {
      ASSERT_TRUE(reader->Next(4, &batch).ok());
      sizes.push_back(batch.size);
    } while (batch.size > 0);
    EXPECT_EQ(sizes, (std::vector<int>{4, 4, 2, 0}));
  }
  std::vector<int> lines_seen;
  for (int shard = 0; shard < 3; ++shard) {
    auto reader = OpenOrDie(path, shard, 3);
    Batch batch;
    ASSERT_TRUE(reader->Next(100, &batch).ok());
    for (int b = 0; b < batch.size; ++b) {
      const int line = static_cast<int>(std::lround(std::expm1(batch.dense[b * 13])));
      EXPECT_EQ(line % 3, shard);
      EXPECT_EQ(batch.labels[b], line % 2 ? 1.0f : 0.0f);
      lines_seen.push_back(line);
    }
  }
  std::sort(lines_seen.begin(), lines_seen.end());
  EXPECT_EQ(lines_seen, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// The first error of a file whose line 3 (1-based) is `bad`.
Status ErrorOf(CriteoReaderTest* test, const std::string& name, const std::string& bad, std::string* path) {
  *path = ::testing::TempDir() + "/criteo_reader_test_" + name + ".tsv";
  std::ofstream(*path, std::ios::binary) << Line("0", 0) << "\n" << Line("1", 1) << "\n" << bad << "\n";
  auto reader = CriteoReader::Open(*path, 0, 1);
  EXPECT_TRUE(reader.ok());
  Batch batch;
  return (*reader)->Next(10, &batch);
}

TEST_F(CriteoReaderTest, MalformedLinesNameFileLineAndColumn) {
  struct Case {
    std::string name, line, where, what;
  };
  std::string many = Line("0", 2) + "\textra";
  std::string few = Line("0", 2);
  few = few.substr(0, few.rfind('\t'));
  const std::vector<Case> cases = {
      {"label", Line("2", 2), ":3: column 1:", "not 0 or 1"},
      {"empty_label", Line("", 2), ":3: column 1:", "not 0 or 1"},
      {"int", Line("1", 2, {"", "", "", "12a"}), ":3: column 5:", "'12a' is not a decimal"},
      {"overflow", Line("1", 2, {"", "99999999999999999999"}), ":3: column 3:", "not a decimal"},
      {"hex", Line("1", 2, {}, {"", "", "zz"}), ":3: column 17:", "'zz' is not hex"},
      {"long_hex", Line("1", 2, {}, {"123456789"}), ":3: column 15:", "more than 8 hex digits"},
      {"too_many", many, ":3: column 41:", "more than 40 columns"},
      {"too_few", few, ":3: column 39:", "39 columns, expected 40"},
      {"empty", "", ":3: column 1:", "empty line"},
  };
  for (const Case& c : cases) {
    std::string path;
    const Status status = ErrorOf(this, c.name, c.line, &path);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(status.message().find(path + c.where), std::string::npos) << c.name << ": " << status.ToString();
    EXPECT_NE(status.message().find(c.what), std::string::npos) << c.name << ": " << status.ToString();
  }
}

TEST_F(CriteoReaderTest, OtherShardsMalformedLinesAreNotParsed) {
  const std::string path = Write("other_shard", "garbage\n" + Line("1", 1) + "\n");
  auto reader = OpenOrDie(path, 1, 2);
  Batch batch;
  ASSERT_TRUE(reader->Next(10, &batch).ok());
  EXPECT_EQ(batch.size, 1);
  auto shard0 = OpenOrDie(path, 0, 2);
  EXPECT_EQ(shard0->Next(10, &batch).code(), StatusCode::kInvalidArgument);
}

TEST_F(CriteoReaderTest, LineLongerThanTheBufferIsReadWhole) {
  const std::string huge(3 << 20, '7');
  const std::string path = Write("long", Line("1", 0) + "\n" + Line("0", 1, {"", huge}) + "\n");
  auto reader = OpenOrDie(path);
  Batch batch;
  const Status status = reader->Next(10, &batch);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(":2: column 3:"), std::string::npos) << status.message().substr(0, 200);
  EXPECT_LT(status.message().size(), 400u) << "the offending value should be truncated";
}

TEST_F(CriteoReaderTest, OpenErrors) {
  auto missing = CriteoReader::Open("/nonexistent/osprey/criteo.tsv", 0, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/osprey/criteo.tsv"), std::string::npos);
  const std::string path = Write("args", Line("1", 0) + "\n");
  EXPECT_EQ(CriteoReader::Open(path, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CriteoReader::Open(path, 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CriteoReader::Open(path, -1, 2).status().code(), StatusCode::kInvalidArgument);
  auto reader = OpenOrDie(path);
  Batch batch;
  EXPECT_EQ(reader->Next(0, &batch).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::data
