// The fuzz targets' shared pieces: how one fuzz input is cut into a request's three frames, and
// the server every input is sent to (the same one the seed generator writes requests for).
//
// Input layout: u16 LE header length, u16 LE keys length, then the header frame, the keys frame
// and (the rest) the values frame; lengths past the end of the input are clipped. So any byte
// string is one request, and a real request is JoinFrames of its frames.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config/table_config.h"
#include "common/inproc_transport.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/server.h"

namespace osprey::fuzz {

Message SplitFrames(const uint8_t* data, size_t size);
std::string JoinFrames(const Buffer& header, const Buffer& keys, const Buffer& values);

// The job the fuzzed server serves: server 0 of 2 (ownership checks matter), epoch 1, tables
// 0: sparse "emb" dim 4 (adam), 1: dense "mlp" of 100 floats in chunks of 32, both async.
constexpr int kNumServers = 2;
constexpr uint64_t kEpoch = 1;
std::vector<config::TableConfig> FuzzTables();

// An activated server of FuzzTables over the in-process transport, and a client to it. Run sends
// one request and returns its reply's header: every request must get exactly one reply, so none
// within 30 s aborts the process (for the fuzzer, a lost reply is a bug like a crash).
// OP_CHECKPOINT requests are not sent (they write files): Run returns a header with op OP_UNKNOWN
// (0). Setup failures abort. Thread-safety: one caller at a time.
class FuzzServer {
 public:
  FuzzServer();
  ~FuzzServer();
  proto::Header Run(Message m);
  server::Server& server() { return *server_; }

 private:
  std::shared_ptr<InprocHub> hub_;
  std::vector<config::TableConfig> tables_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<InprocTransport> client_;
  PeerId peer_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> replies_;
};

}  // namespace osprey::fuzz
