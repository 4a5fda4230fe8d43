// Client's part of the exact worker resume (client.h AppliedClocks / SetPushFloors; the plan is
// worker/resume_plan.h): the OP_APPLIED_CLOCKS query, and the floors below which pushes are not
// sent again.
#include <cstring>

#include "proto/applied_clocks_op.h"
#include "worker/client/client.h"

namespace osprey::worker {
namespace {

class WordsSink final : public ReplySink {
 public:
  explicit WordsSink(std::vector<int64_t>* out) : out_(out) {}
  void Deliver(Buffer reply) override {
    out_->resize(reply.size() / sizeof(int64_t));
    if (!out_->empty()) std::memcpy(out_->data(), reply.data(), out_->size() * sizeof(int64_t));
  }

 private:
  std::vector<int64_t>* out_;
};

}  // namespace

Ticket Client::AppliedClocks(int server, std::vector<int64_t>* out) {
  Status bad;
  if (server < 0 || server >= map_.server_endpoints_size()) {
    bad = InvalidArgument("applied clocks of server " + std::to_string(server) + ": the shard map has " +
                          std::to_string(map_.server_endpoints_size()) + " servers");
  }
  Ticket ticket = requests_.Open(kOpAppliedClocks, 0, bad);
  if (!bad.ok()) return ticket;
  proto::Header h;
  h.set_op(kOpAppliedClocks);
  const size_t words = static_cast<size_t>(map_.tables_size()) + 1;
  Send(ticket, server, std::move(h), Buffer(), Buffer(), words * sizeof(int64_t),
       std::make_unique<WordsSink>(out));
  return ticket;
}

void Client::SetPushFloors(std::vector<std::vector<int64_t>> floors) {
  MutexLock lock(&floor_mu_);
  floors_ = std::move(floors);
  has_floors_.store(!floors_.empty(), std::memory_order_release);
}

bool Client::BelowFloor(int server, const proto::Header& header) const {
  if (header.op() != proto::OP_PUSH_SPARSE && header.op() != proto::OP_PUSH_DENSE) return false;
  if (!has_floors_.load(std::memory_order_acquire)) return false;
  MutexLock lock(&floor_mu_);
  if (server < 0 || static_cast<size_t>(server) >= floors_.size()) return false;
  const std::vector<int64_t>& f = floors_[server];
  if (header.table() >= f.size() || header.clock() > f[header.table()]) return false;
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace osprey::worker
