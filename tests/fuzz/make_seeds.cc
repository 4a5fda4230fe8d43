// Writes the fuzz targets' seed corpora: real, valid requests for the fuzzed server
// (fuzz_harness.h) and real encoded frames of every codec. The checked-in corpora under
// tests/fuzz/corpus/ are its output; run it again after a wire-format change:
//   make_seeds tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/placement.h"
#include "proto/wire.h"
#include "tests/fuzz/fuzz_harness.h"

namespace osprey::fuzz {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
Buffer Vec(const std::vector<T>& v) {
  return Buffer::Copy(v.data(), v.size() * sizeof(T));
}

proto::Header Req(proto::Op op, uint32_t table, uint64_t num_keys, uint64_t value_bytes) {
  static uint64_t id = 1;
  proto::Header h;
  h.set_op(op);
  h.set_table(table);
  h.set_request_id(id++);
  h.set_epoch(kEpoch);
  h.set_num_keys(num_keys);
  h.set_value_bytes(value_bytes);
  return h;
}

codec::Encoded Encode(const std::string& type, const std::string& value_type, const std::vector<float>& g) {
  codec::CodecConfig c;
  c.type = type;
  c.value_type = value_type;
  c.density = 0.25;
  c.onebit_chunk = 32;
  auto codec = codec::MakeCodec(c);
  codec::CodecState state;
  codec::Encoded out;
  if (!codec.ok() || !(*codec)->Encode(g.data(), g.size(), &state, &out).ok()) {
    std::fprintf(stderr, "make_seeds: cannot encode %s\n", type.c_str());
    std::exit(1);
  }
  return out;
}

std::string EncodedPush(proto::Op op, uint32_t table, const std::vector<uint64_t>& keys, const codec::Encoded& e) {
  proto::Header h = Req(op, table, keys.size(), e.payload.size());
  h.set_codec(static_cast<proto::Codec>(e.meta.codec));
  h.set_codec_value_type(static_cast<uint32_t>(e.meta.value_type));
  h.set_codec_count(e.meta.count);
  h.set_codec_chunk(e.meta.chunk);
  return JoinFrames(SerializeHeader(h), Vec(keys), Vec(e.payload));
}

std::string CodecInput(const codec::Encoded& e) {
  std::string out(12, '\0');
  out[0] = static_cast<char>(e.meta.codec);
  out[1] = static_cast<char>(e.meta.value_type);
  const uint16_t length = static_cast<uint16_t>(e.meta.length);
  const uint32_t count = static_cast<uint32_t>(e.meta.count), chunk = e.meta.chunk;
  std::memcpy(&out[2], &length, 2);
  std::memcpy(&out[4], &count, 4);
  std::memcpy(&out[8], &chunk, 4);
  out.append(reinterpret_cast<const char*>(e.payload.data()), e.payload.size());
  return out;
}

void WriteRequests(const fs::path& dir) {
  std::vector<uint64_t> keys;  // sparse keys server 0 owns
  for (uint64_t k = 1; keys.size() < 3; ++k) {
    if (ServerForKey(0, k, kNumServers) == 0) keys.push_back(k);
  }
  std::vector<uint64_t> chunks;  // dense chunks server 0 owns (100 floats in chunks of 32)
  size_t floats = 0;
  for (uint64_t c = 0; c < 4; ++c) {
    if (ServerForChunk(1, c, kNumServers) != 0) continue;
    chunks.push_back(c);
    floats += c == 3 ? 4 : 32;
  }
  std::vector<float> rows(keys.size() * 4), dense(floats);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.01f * static_cast<float>(i + 1);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = (i % 3 == 0 ? -0.02f : 0.03f) * static_cast<float>(i % 7);
  Write(dir / "pull_sparse", JoinFrames(SerializeHeader(Req(proto::OP_PULL_SPARSE, 0, keys.size(), 0)), Vec(keys), Buffer()));
  for (auto [name, c, vt] : {std::make_tuple("pull_sparse_fp16", proto::CODEC_FP16, codec::ValueType::kFp16),
                             std::make_tuple("pull_sparse_bf16", proto::CODEC_BF16, codec::ValueType::kBf16)}) {
    proto::Header h = Req(proto::OP_PULL_SPARSE, 0, keys.size(), 0);
    h.set_codec(c);
    h.set_codec_value_type(static_cast<uint32_t>(vt));
    h.set_codec_count(keys.size() * 4);
    Write(dir / name, JoinFrames(SerializeHeader(h), Vec(keys), Buffer()));
  }
  Write(dir / "push_sparse", JoinFrames(SerializeHeader(Req(proto::OP_PUSH_SPARSE, 0, keys.size(), rows.size() * 4)),
                                        Vec(keys), Vec(rows)));
  Write(dir / "push_sparse_fp16", EncodedPush(proto::OP_PUSH_SPARSE, 0, keys, Encode("fp16", "fp16", rows)));
  Write(dir / "push_sparse_bf16", EncodedPush(proto::OP_PUSH_SPARSE, 0, keys, Encode("bf16", "bf16", rows)));
  Write(dir / "init_dense", JoinFrames(SerializeHeader(Req(proto::OP_INIT_DENSE, 1, chunks.size(), dense.size() * 4)),
                                       Vec(chunks), Vec(dense)));
  Write(dir / "pull_dense", JoinFrames(SerializeHeader(Req(proto::OP_PULL_DENSE, 1, chunks.size(), 0)), Vec(chunks), Buffer()));
  Write(dir / "push_dense", JoinFrames(SerializeHeader(Req(proto::OP_PUSH_DENSE, 1, chunks.size(), dense.size() * 4)),
                                       Vec(chunks), Vec(dense)));
  for (auto [type, vt] : {std::make_pair("fp16", "fp16"), std::make_pair("bf16", "bf16"), std::make_pair("topk", "fp32"),
                          std::make_pair("topk", "fp16"), std::make_pair("randomk", "bf16"), std::make_pair("onebit", "fp32")}) {
    Write(dir / (std::string("push_dense_") + type + "_" + vt), EncodedPush(proto::OP_PUSH_DENSE, 1, chunks, Encode(type, vt, dense)));
  }
  Write(dir / "server_stats", JoinFrames(SerializeHeader(Req(proto::OP_SERVER_STATS, 0, 0, 0)), Buffer(), Buffer()));
}

void WriteCodecFrames(const fs::path& dir) {
  std::vector<float> g(100);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? -0.1f : 0.2f) * static_cast<float>(i % 11);
  for (auto [type, vt] : {std::make_pair("none", "fp32"), std::make_pair("fp16", "fp16"), std::make_pair("bf16", "bf16"),
                          std::make_pair("topk", "fp32"), std::make_pair("topk", "bf16"), std::make_pair("randomk", "fp16"),
                          std::make_pair("onebit", "fp32")}) {
    Write(dir / (std::string(type) + "_" + vt), CodecInput(Encode(type, vt, g)));
  }
}

}  // namespace
}  // namespace osprey::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR  (writes DIR/request and DIR/codec)\n");
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  std::filesystem::create_directories(dir / "request");
  std::filesystem::create_directories(dir / "codec");
  osprey::fuzz::WriteRequests(dir / "request");
  osprey::fuzz::WriteCodecFrames(dir / "codec");
  return 0;
}
