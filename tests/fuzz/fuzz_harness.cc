#include "tests/fuzz/fuzz_harness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/testing/cluster_fixture.h"

namespace osprey::fuzz {
namespace {

size_t ReadU16(const uint8_t* p) { return size_t{p[0]} | size_t{p[1]} << 8; }

void CheckSetup(const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "fuzz: setup failed: %s\n", s.ToString().c_str());
  std::abort();
}

void PutU16(std::string* out, size_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}

}  // namespace

Message SplitFrames(const uint8_t* data, size_t size) {
  Message m;
  m.peer = 0;
  if (size < 4) {
    m.header = Buffer::Copy(data, size);
    return m;
  }
  size_t at = 4;
  const size_t hlen = std::min(ReadU16(data), size - at);
  m.header = Buffer::Copy(data + at, hlen);
  at += hlen;
  const size_t klen = std::min(ReadU16(data + 2), size - at);
  m.keys = Buffer::Copy(data + at, klen);  // a fresh allocation: aligned, as large frames are
  at += klen;
  m.values = Buffer::Copy(data + at, size - at);
  return m;
}

std::string JoinFrames(const Buffer& header, const Buffer& keys, const Buffer& values) {
  std::string out;
  PutU16(&out, header.size());
  PutU16(&out, keys.size());
  out.append(reinterpret_cast<const char*>(header.data()), header.size());
  out.append(reinterpret_cast<const char*>(keys.data()), keys.size());
  out.append(reinterpret_cast<const char*>(values.data()), values.size());
  return out;
}

std::vector<config::TableConfig> FuzzTables() {
  config::TableConfig sparse;
  sparse.name = "emb";
  sparse.type = config::TableType::kSparse;
  sparse.dim = 4;
  sparse.optimizer.type = config::OptimizerType::kAdam;
  sparse.consistency.mode = config::ConsistencyMode::kAsync;
  config::TableConfig dense;
  dense.name = "mlp";
  dense.type = config::TableType::kDense;
  dense.size = 100;
  dense.chunk_floats = 32;
  dense.consistency.mode = config::ConsistencyMode::kAsync;
  return {sparse, dense};
}

FuzzServer::FuzzServer() : hub_(std::make_shared<InprocHub>()), tables_(FuzzTables()) {
  server_ = std::make_unique<server::Server>(std::make_unique<InprocTransport>(hub_),
                                             std::move(*server::MakeStore("native")));
  CheckSetup(server_->Listen("inproc://fuzz-0").status());
  const proto::ShardMap map = testing::MakeShardMap({"inproc://fuzz-0", "inproc://fuzz-1"}, tables_);
  CheckSetup(server_->Activate(0, map, tables_));
  client_ = std::make_unique<InprocTransport>(hub_);
  client_->SetHandler([this](Message&& m) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_.push_back(std::move(m));
    cv_.notify_all();
  });
  auto peer = client_->Connect("inproc://fuzz-0");
  CheckSetup(peer.status());
  peer_ = *peer;
  CheckSetup(client_->Start());
}

FuzzServer::~FuzzServer() {
  client_->Stop();
  server_->Stop();
}

proto::Header FuzzServer::Run(Message m) {
  proto::Header h;
  if (h.ParseFromArray(m.header.data(), static_cast<int>(m.header.size())) &&
      h.op() == proto::OP_CHECKPOINT) {
    return proto::Header();
  }
  m.peer = peer_;
  CheckSetup(client_->Send(std::move(m)));
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !replies_.empty(); })) {
    std::fprintf(stderr, "fuzz: no reply within 30 s\n");
    std::abort();
  }
  proto::Header reply;
  reply.ParseFromArray(replies_.front().header.data(), static_cast<int>(replies_.front().header.size()));
  replies_.erase(replies_.begin());
  if (!replies_.empty()) {
    std::fprintf(stderr, "fuzz: more than one reply to one request\n");
    std::abort();
  }
  return reply;
}

}  // namespace osprey::fuzz
