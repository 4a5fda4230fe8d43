// RowSender: sends a scale step's moved records (OP_MIGRATE_ROWS) from one server to their new
// owners over a dialer Transport and waits until every message was acknowledged.
//
// A receiver that has not reached the new epoch yet answers Unavailable (a survivor of a shrink
// that reshards a moment after the removed server starts sending); such a message is sent again
// (every few milliseconds) until `timeout_ms` has passed since SendAll began. Any other error
// reply, or the deadline, fails SendAll with the receiver's endpoint and the error: the caller
// (the server) then reports the scale step failed.
//
// Thread-safety: SendAll may be called from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "osprey.pb.h"

namespace osprey::server::migration {

// One OP_MIGRATE_ROWS message: records of one table for the server at `endpoint`.
struct RowBatch {
  std::string endpoint;
  uint32_t table = 0;
  uint64_t epoch = 0;    // the new shard map's
  uint64_t version = 0;  // the sender's table version
  std::vector<uint64_t> keys;
  std::vector<float> records;  // the keys' records back to back
  uint64_t reowned = 0;  // no records: this many rows were handed over in the store
};

class RowSender {
 public:
  // `transport`: fresh (not started, no handler); owned.
  RowSender(std::unique_ptr<Transport> transport, int timeout_ms);
  ~RowSender();

  // Sends every batch and waits for all their replies (see above).
  Status SendAll(std::vector<RowBatch> batches) EXCLUDES(mu_);

 private:
  void OnReply(Message&& msg) EXCLUDES(mu_);
  Status Send(uint64_t id, const RowBatch& b) EXCLUDES(mu_);

  std::unique_ptr<Transport> transport_;
  const int timeout_ms_;
  bool started_ = false;
  std::map<std::string, PeerId> peers_;

  Mutex mu_;
  CondVar cv_;
  // Replies by request id: OK, Unavailable (send again) or the error.
  std::map<uint64_t, Status> replies_ GUARDED_BY(mu_);
};

}  // namespace osprey::server::migration
