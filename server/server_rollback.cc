// Server side of the bsp rollback (issue 12; coordinator/job_state_rollback.cc has the rules):
// a replacement restores the newest cut every server has (checkpoint_cut.h) and refuses the
// requests of earlier rollback generations; every other server, told the generation and the cut
// clock by the coordinator, drops what it holds, reloads its own file of that cut and refuses the
// same. Both then acknowledge through their heartbeats (rollback_acked()).
#include <string>

#include "common/logging.h"
#include "server/checkpoint.h"
#include "server/checkpoint_cut.h"
#include "server/server.h"

namespace osprey::server {

void Server::SetBspRollback(uint64_t generation) {
  MutexLock work(&work_mu_);
  rollback_generation_ = generation;
}

Status Server::CheckGeneration(const proto::Header& h) const {
  if (h.op() == proto::OP_INIT_DENSE || h.rollback_generation() >= rollback_generation_) {
    return Status::OK();
  }
  return Aborted("request of bsp rollback generation " + std::to_string(h.rollback_generation()) +
                 " refused: server " + std::to_string(rank()) + " rolled back to clock " +
                 std::to_string(rollback_cut_.load()) + " at generation " +
                 std::to_string(rollback_generation_) + " (the worker must rewind to it)");
}

StatusOr<int64_t> Server::RestoreCutLocked(const std::string& dir, int64_t clock,
                                           RestoreInfo* info) {
  CheckpointMeta now;
  now.epoch = epoch_;
  now.rank = rank();
  now.num_servers = num_servers_;
  for (size_t i = 0; i < tables_.size(); ++i) {
    now.tables.push_back(tables_[i]->spec());
    now.optimizers.push_back(OptimizerTypeName(table_configs_[i].optimizer.type));
  }
  if (clock < 0) {
    OSPREY_ASSIGN_OR_RETURN(clock, ConsistentCut(dir, num_servers_));
  }
  OSPREY_ASSIGN_OR_RETURN(std::string path, CutFile(dir, rank(), num_servers_, clock));
  const int64_t start_us = NowUs();
  OSPREY_ASSIGN_OR_RETURN(std::vector<uint64_t> versions,
                          RestoreOwnCheckpointFile(path, now, store_.get(), info));
  uint64_t max_version = 0;
  for (size_t i = 0; i < tables_.size(); ++i) {
    admission::RowLifecycle* l = tables_[i]->lifecycle();
    if (l != nullptr && i < info->table_states.size()) {
      const auto& states = info->table_states[i];
      OSPREY_RETURN_IF_ERROR(l->RestoreState(states, &states[rank()], NowUs(),
                                             "checkpoint " + path + " table '" +
                                                 tables_[i]->spec().name() + "'"));
    }
    tables_[i]->set_version(versions[i]);
    max_version = std::max(max_version, versions[i]);
  }
  max_version_.store(max_version);
  restored_versions_ = versions;
  OSPREY_LOG_INFO("server {} loaded bsp cut clock {} from {} in {:.2f} s ({:.1f} MB: read {:.2f} s, "
                  "verify {:.2f} s, import {:.2f} s)", rank(), clock, path,
                  static_cast<double>(NowUs() - start_us) * 1e-6,
                  static_cast<double>(info->bytes) / 1e6, info->read_seconds, info->verify_seconds,
                  info->import_seconds);
  return clock;
}

Status Server::RollBack(uint64_t generation, int64_t clock) {
  MutexLock work(&work_mu_);
  if (generation <= rollback_acked_.load() || tables_.empty()) return Status::OK();
  const std::string dir = !checkpoint_.dir.empty() ? checkpoint_.dir : restore_dir_;
  if (dir.empty()) return FailedPrecondition("bsp rollback: no checkpoint directory");
  // Refuse the old generation from now on, answer what is held with the same refusal.
  rollback_generation_ = generation;
  rollback_cut_.store(clock);
  const Status why = Aborted("server " + std::to_string(rank()) + " rolls back to bsp clock " +
                             std::to_string(clock) + " (rollback generation " +
                             std::to_string(generation) + "): rewind");
  for (auto& t : tables_) t->Rewind(clock, why);
  // Rows created after the cut must go: erase every sparse row, the cut's file brings its own.
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i]->spec().type() != proto::TABLE_SPARSE) continue;
    std::vector<uint64_t> keys;
    keys.reserve(store_->num_rows(static_cast<uint32_t>(i)));
    OSPREY_RETURN_IF_ERROR(store_->ExportRecords(static_cast<uint32_t>(i),
                                                 [&](uint64_t key, const float*, size_t) {
                                                   keys.push_back(key);
                                                   return Status::OK();
                                                 }));
    size_t erased = 0;
    OSPREY_RETURN_IF_ERROR(store_->EraseRows(static_cast<uint32_t>(i), keys.data(), keys.size(), &erased));
  }
  RestoreInfo info;
  OSPREY_RETURN_IF_ERROR(RestoreCutLocked(dir, clock, &info).status());
  // The periodic cuts go on from the restored clock.
  scheduler_ = std::make_unique<CheckpointScheduler>(
      static_cast<Replier*>(this),
      [this](const std::string& d, int64_t c) {
        work_mu_.AssertHeld();
        return CheckpointLocked(d, c);
      },
      rank());
  scheduler_->Start(checkpoint_, &tables_, NowUs());
  rollback_acked_.store(generation);
  OSPREY_LOG_WARN("server {} rolled back to bsp clock {} (rollback generation {})", rank(), clock,
                  generation);
  return Status::OK();
}

}  // namespace osprey::server
