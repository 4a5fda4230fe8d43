// The client's per-table encoders built from a config (worker/compression.h SetTableCodecs):
// which table takes which encoder, and a dense message whose chunks are not contiguous encodes
// to the same bytes as the same floats handed over in one piece.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/inproc_transport.h"
#include "worker/compression.h"

namespace osprey::worker {
namespace {

proto::ShardMap TwoTables() {
  proto::ShardMap map;
  map.set_epoch(1);
  map.add_server_endpoints("inproc://unused");
  proto::TableSpec* sparse = map.add_tables();
  sparse->set_name("emb");
  sparse->set_type(proto::TABLE_SPARSE);
  sparse->set_dim(4);
  proto::TableSpec* dense = map.add_tables();
  dense->set_id(1);
  dense->set_name("mlp");
  dense->set_type(proto::TABLE_DENSE);
  dense->set_size(64);
  dense->set_chunk_floats(16);
  return map;
}

TEST(TableCodecsTest, EachTableTakesOnlyItsKindOfEncoder) {
  Client client(ClientOptions{}, std::make_unique<InprocTransport>(std::make_shared<InprocHub>()), TwoTables());
  config::TableConfig rows;
  rows.codec.type = "bf16";
  rows.pull_codec = "bf16";
  auto none = SetTableCodecs(rows, 0, 1, &client);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);  // a sparse table gets a row cast, no compressor
  config::TableConfig topk;
  topk.codec.type = "topk";
  topk.codec.density = 0.25;
  auto comp = SetTableCodecs(topk, 1, 1, &client);
  ASSERT_TRUE(comp.ok()) << comp.status().ToString();
  EXPECT_NE(*comp, nullptr);
  rows.codec.type = "topk";  // rows are never sparsified
  EXPECT_EQ(SetTableCodecs(rows, 0, 1, &client).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SetTableCodecs(topk, 7, 1, &client).status().code(), StatusCode::kInvalidArgument);

  auto dense_on_sparse = DenseCompressor::Create(topk.codec, 1);
  ASSERT_TRUE(dense_on_sparse.ok());
  EXPECT_EQ(client.SetEncoder(0, std::move(*dense_on_sparse)).code(), StatusCode::kInvalidArgument);
  auto cast_on_dense = MakeRowCastEncoder(proto::CODEC_FP16);
  ASSERT_TRUE(cast_on_dense.ok());
  EXPECT_EQ(client.SetEncoder(1, std::move(*cast_on_dense)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(client.SetEncoder(1, nullptr).ok());
}

TEST(TableCodecsTest, ScatteredChunksEncodeLikeTheirConcatenation) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.1;
  c.min_compress_bytes = 0;
  std::vector<float> table(64);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(static_cast<float>(i) * 0.61f);
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, 16}, {32, 16}, {48, 16}};
  std::vector<float> joined;
  for (const auto& [first, len] : ranges) joined.insert(joined.end(), table.begin() + first, table.begin() + first + len);
  auto scattered = DenseCompressor::Create(c, 3), whole = DenseCompressor::Create(c, 3);
  ASSERT_TRUE(scattered.ok() && whole.ok());
  for (int step = 0; step < 3; ++step) {  // the error-feedback residuals must agree too
    PushValues in;
    in.table = 1;
    in.server = 0;
    in.floats = joined.size();
    in.base = table.data();
    in.ranges = ranges.data();
    in.num_ranges = ranges.size();
    proto::Header h1, h2;
    Buffer v1, v2;
    ASSERT_TRUE((*scattered)->Encode(in, &h1, &v1).ok());
    ASSERT_TRUE((*whole)->Encode(1, 0, joined.data(), joined.size(), &h2, &v2).ok());
    EXPECT_EQ(h1.SerializeAsString(), h2.SerializeAsString()) << "step " << step;
    ASSERT_EQ(v1.size(), v2.size()) << "step " << step;
    EXPECT_EQ(std::memcmp(v1.data(), v2.data(), v1.size()), 0) << "step " << step;
  }
}

}  // namespace
}  // namespace osprey::worker
