// The server's side of a scale step (osprey scale; server.h "Elastic servers"): Reshard moves
// the records this server no longer owns under the new shard map to their new owners, and
// ExecuteMigrate takes in the records another server moved here.
#include <algorithm>
#include <chrono>
#include <string>

#include "common/logging.h"
#include "common/placement.h"
#include "server/migration/moved_rows.h"
#include "server/migration/row_sender.h"
#include "server/migration/rows_digest.h"
#include "server/request_checks.h"
#include "server/server.h"

namespace osprey::server {
namespace {

constexpr size_t kRecordsPerMessage = 65536;

// The records one server sends to one destination, cut into messages as they are copied out
// (each record copied once): keys and their records back to back, kRecordsPerMessage a message.
struct Outgoing {
  std::vector<migration::RowBatch> batches;
  size_t records = 0;
  // `expected`: the records still to come, to size a new message's buffer (0: unknown).
  void Add(uint64_t key, const float* d, size_t f, size_t expected = 0) {
    if (batches.empty() || batches.back().keys.size() == kRecordsPerMessage) {
      batches.emplace_back();
      const size_t n = std::min(kRecordsPerMessage, expected);
      batches.back().keys.reserve(n);
      batches.back().records.reserve(n * f);
    }
    migration::RowBatch& b = batches.back();
    b.keys.push_back(key);
    b.records.insert(b.records.end(), d, d + f);
    ++records;
  }
};

// Sparse `table`: the keys from Store::ExportKeys (a redis store reads only the keys), the
// destinations from PlanKeyMoves, then the moved rows read with one VisitRows per destination.
Status SparseOutgoing(Store* store, uint32_t table, int self, int n, std::vector<Outgoing>* out,
                      uint64_t* kept) {
  std::vector<uint64_t> keys;
  OSPREY_RETURN_IF_ERROR(store->ExportKeys(table, [&](uint64_t key) {
    keys.push_back(key);
    return Status::OK();
  }));
  migration::MovePlan plan = migration::PlanKeyMoves(table, keys.data(), keys.size(), self, n);
  *kept += plan.kept;
  out->resize(plan.by_dest.size());
  // Asked before the visits: a store's VisitRows may hold its own lock while it calls back.
  const size_t f = store->RecordFloats(table, 0);
  for (size_t d = 0; d < plan.by_dest.size(); ++d) {
    const std::vector<uint64_t>& moved = plan.by_dest[d];
    if (moved.empty()) continue;
    Outgoing& o = (*out)[d];
    OSPREY_RETURN_IF_ERROR(store->VisitRows(table, moved.data(), moved.size(), RowAccess::kRead,
                                            [&](const RowBlock& b) -> Status {
      for (size_t r = 0; r < b.n; ++r) {
        if (b.rows[r] == nullptr) return Internal("scale: an exported row vanished");
        o.Add(moved[b.begin + r], b.rows[r], f, moved.size() - (b.begin + r));
      }
      return Status::OK();
    }));
  }
  return Status::OK();
}

// One export pass that copies out every record another server owns at `n` servers: for dense
// tables (their chunks are in memory in every store) and for a leaving server's sparse rows (all
// of them move, so reading them whole at once beats reading the keys first).
Status ExportOutgoing(Store* store, uint32_t table, bool sparse, int self, int n,
                      std::vector<Outgoing>* out, uint64_t* kept) {
  out->resize(std::max(n, self + 1));
  return store->ExportRecords(table, [&](uint64_t key, const float* d, size_t f) {
    const int owner = sparse ? ServerForKey(table, key, n) : ServerForChunk(table, key, n);
    if (owner == self) {
      ++*kept;
    } else {
      (*out)[owner].Add(key, d, f);
    }
    return Status::OK();
  });
}

}  // namespace

Status Server::CheckReshard(const proto::ShardMap& target) const {
  if (tables_.empty()) return FailedPrecondition("scale: this server is not active yet");
  if (target.epoch() <= epoch_) {
    return FailedPrecondition("scale: target epoch " + std::to_string(target.epoch()) +
                              " is not after this server's epoch " + std::to_string(epoch_));
  }
  if (target.server_endpoints_size() < 1 || target.tables_size() != static_cast<int>(tables_.size())) {
    return InvalidArgument("scale: the target shard map has " +
                           std::to_string(target.server_endpoints_size()) + " servers and " +
                           std::to_string(target.tables_size()) + " tables (this server has " +
                           std::to_string(tables_.size()) + ")");
  }
  for (const auto& t : tables_) {
    if (t->lifecycle() != nullptr) {
      return Unimplemented("scale: table '" + t->spec().name() +
                           "' has feature admission / eviction, whose sketch and row ages a "
                           "scale step does not move yet");
    }
  }
  return Status::OK();
}

StatusOr<Server::ReshardResult> Server::Reshard(const proto::ShardMap& target,
                                                migration::RowSender* sender) {
  using SteadyClock = std::chrono::steady_clock;
  auto since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  const auto start = SteadyClock::now();
  std::vector<migration::RowBatch> batches;
  std::vector<std::vector<uint64_t>> erase;  // per table: the sparse rows moved away
  ReshardResult result;
  {
    MutexLock work(&work_mu_);
    OSPREY_RETURN_IF_ERROR(CheckReshard(target));
    const int self = rank();
    const int n = target.server_endpoints_size();
    erase.resize(tables_.size());
    std::vector<std::vector<uint64_t>> owned(tables_.size());
    for (size_t i = 0; i < tables_.size(); ++i) {
      const uint32_t id = static_cast<uint32_t>(i);
      const TableShard& t = *tables_[i];
      const bool sparse = t.spec().type() == proto::TABLE_SPARSE;
      std::vector<Outgoing> outgoing;
      if (sparse && self < n && n < num_servers_) {
        // A shrink moves only the leaving ranks' keys (jump hash, moved_rows.h): nothing to scan.
        result.records_kept += store_->num_rows(id);
      } else if (sparse && store_->reowns_rows()) {
        // The store hands the rows over where they lie: the new owners are only told (below).
        std::vector<uint64_t> moved;
        OSPREY_RETURN_IF_ERROR(store_->ReownRows(
            id, self, n, [&](uint64_t key) { return ServerForKey(id, key, n); }, &moved,
            &result.records_kept));
        for (size_t dest = 0; dest < moved.size(); ++dest) {
          if (moved[dest] == 0) continue;
          result.records_sent += moved[dest];
          result.records_handed += moved[dest];
          migration::RowBatch notice;
          notice.endpoint = target.server_endpoints(static_cast<int>(dest));
          notice.table = id;
          notice.epoch = target.epoch();
          notice.version = t.version();
          notice.reowned = moved[dest];
          batches.push_back(std::move(notice));
        }
      } else if (sparse && self < n) {
        OSPREY_RETURN_IF_ERROR(SparseOutgoing(store_.get(), id, self, n, &outgoing, &result.records_kept));
      } else {
        OSPREY_RETURN_IF_ERROR(ExportOutgoing(store_.get(), id, sparse, self, n, &outgoing, &result.records_kept));
      }
      for (size_t dest = 0; dest < outgoing.size(); ++dest) {
        result.records_sent += outgoing[dest].records;
        for (migration::RowBatch& b : outgoing[dest].batches) {
          b.endpoint = target.server_endpoints(static_cast<int>(dest));
          b.table = id;
          b.epoch = target.epoch();
          b.version = t.version();
          if (sparse) erase[i].insert(erase[i].end(), b.keys.begin(), b.keys.end());
          batches.push_back(std::move(b));
        }
      }
      if (!sparse) {
        owned[i] = self < n ? migration::OwnedChunks(id, t.num_chunks(), self, n)
                            : std::vector<uint64_t>();
      }
    }
    // Dense ownership first: a store that cannot change it refuses before anything moved.
    for (size_t i = 0; i < tables_.size(); ++i) {
      if (tables_[i]->spec().type() != proto::TABLE_DENSE) continue;
      OSPREY_RETURN_IF_ERROR(store_->SetOwnedChunks(static_cast<uint32_t>(i), owned[i]));
    }
    epoch_ = target.epoch();
    placement_epoch_ = target.placement_epoch() != 0 ? target.placement_epoch() : target.epoch();
    placement_known_ = target.placement_epoch() != 0;
    num_servers_ = n;
  }
  const double export_s = since(start);
  const auto send_start = SteadyClock::now();
  if (!batches.empty()) {
    if (sender == nullptr) return Internal("scale: records to move but no sender");
    OSPREY_RETURN_IF_ERROR(sender->SendAll(std::move(batches)));
  }
  const double send_s = since(send_start);
  const auto erase_start = SteadyClock::now();
  // Only once every new owner acknowledged its records (and, with the redis store, wrote them to
  // Redis): a failed transfer leaves the rows here. Nothing reads them meanwhile (the workers are
  // paused and this server already answers only for the rows it keeps).
  {
    MutexLock work(&work_mu_);
    for (size_t i = 0; i < erase.size(); ++i) {
      if (erase[i].empty()) continue;
      OSPREY_RETURN_IF_ERROR(store_->EraseRows(static_cast<uint32_t>(i), erase[i].data(),
                                               erase[i].size(), nullptr));
    }
  }
  OSPREY_LOG_INFO("server {}: resharded to epoch {} ({} servers): {} records moved ({} of them handed "
                  "over in the store), {} kept; export "
                  "{:.3f} s, send (the receivers' import included) {:.3f} s, erase {:.3f} s", rank(),
                  target.epoch(), target.server_endpoints_size(), result.records_sent,
                  result.records_handed, result.records_kept, export_s, send_s, since(erase_start));
  return result;
}

Status Server::ExecuteMigrate(const proto::Header& h, const Message& msg) {
  if (h.epoch() > epoch_) {
    return Unavailable("scale: records for epoch " + std::to_string(h.epoch()) +
                       " arrived before this server reached it (at " + std::to_string(epoch_) + ")");
  }
  if (h.epoch() < epoch_) {
    return FailedPrecondition("scale: records for the past epoch " + std::to_string(h.epoch()) +
                              " (this server is at " + std::to_string(epoch_) + ")");
  }
  if (h.table() >= tables_.size()) {
    return InvalidArgument("scale: table id " + std::to_string(h.table()) + " does not exist");
  }
  TableShard& t = *tables_[h.table()];
  if (h.reowned_rows() != 0) {  // rows handed over in the store (ReownRows): none in the message
    if (h.num_keys() != 0 || !msg.values.empty() || t.spec().type() != proto::TABLE_SPARSE) {
      return InvalidArgument("scale: rows handed over in the store come with no records, and "
                             "only for a sparse table (table '" + t.spec().name() + "', " +
                             std::to_string(h.num_keys()) + " keys)");
    }
    OSPREY_RETURN_IF_ERROR(store_->AdoptRows(h.table()));
    t.set_version(std::max(t.version(), h.version()));
    return Status::OK();
  }
  OSPREY_RETURN_IF_ERROR(ValidateKeys(h, msg, t, rank(), num_servers_));
  const uint64_t* keys = msg.keys.as<uint64_t>();
  size_t want = 0;
  for (size_t i = 0; i < h.num_keys(); ++i) want += store_->RecordFloats(h.table(), keys[i]);
  if (msg.values.size() != want * sizeof(float)) {
    return InvalidArgument("scale: table '" + t.spec().name() + "': " + std::to_string(h.num_keys()) +
                           " records need " + std::to_string(want * sizeof(float)) +
                           " bytes, the values frame has " + std::to_string(msg.values.size()));
  }
  const float* data = msg.values.as<float>();
  for (size_t i = 0; i < h.num_keys(); ++i) {
    const size_t f = store_->RecordFloats(h.table(), keys[i]);
    OSPREY_RETURN_IF_ERROR(store_->ImportRecord(h.table(), keys[i], data, f));
    data += f;
  }
  t.set_version(std::max(t.version(), h.version()));
  // Durable before the reply (redis write_through: the old owner deletes its copy after it).
  return store_->Sync(h.table());
}

Status Server::FlushStore() {
  MutexLock work(&work_mu_);
  return store_->FlushAll();
}

StatusOr<migration::RowsDigest> Server::Digest() const {
  MutexLock work(&work_mu_);
  return migration::DigestStore(*store_, static_cast<uint32_t>(tables_.size()));
}

Status Server::ExecuteDigest(Buffer* values) {
  OSPREY_ASSIGN_OR_RETURN(migration::RowsDigest d,
                          migration::DigestStore(*store_, static_cast<uint32_t>(tables_.size())));
  proto::ServerStats st;
  st.set_rows(d.rows);
  st.set_rows_checksum(d.checksum);
  *values = SerializeMessage(st);
  return Status::OK();
}

}  // namespace osprey::server
