// Server activation: the tables of this server's rank, a restore, checkpoint scheduling, and
// the requests that arrived early (server.h, "Lifecycle").
#include <cmath>
#include <set>
#include <string>

#include "common/logging.h"
#include "common/placement.h"
#include "server/checkpoint.h"
#include "server/server.h"

namespace osprey::server {
namespace {

Status CheckTables(int rank, const proto::ShardMap& map,
                   const std::vector<config::TableConfig>& tables) {
  if (map.tables_size() != static_cast<int>(tables.size())) {
    return InvalidArgument("shard map has " + std::to_string(map.tables_size()) +
                           " tables but the config has " + std::to_string(tables.size()));
  }
  if (rank < 0 || rank >= map.server_endpoints_size()) {
    return InvalidArgument("server rank " + std::to_string(rank) + " is outside the shard map");
  }
  for (const config::TableConfig& t : tables) {
    if (!(t.consistency.dc_lambda >= 0) || !std::isfinite(t.consistency.dc_lambda)) {
      return InvalidArgument("table '" + t.name + "': consistency.dc_lambda must be >= 0 and " +
                             "finite (0: no delay compensation), got " +
                             std::to_string(t.consistency.dc_lambda));
    }
  }
  return Status::OK();
}

}  // namespace

Status Server::Activate(int rank, const proto::ShardMap& map,
                        const std::vector<config::TableConfig>& tables) {
  OSPREY_RETURN_IF_ERROR(CheckTables(rank, map, tables));
  MutexLock lock(&mu_);
  bool timer = false;
  {
    MutexLock work(&work_mu_);
    rank_.store(rank, std::memory_order_release);
    epoch_ = map.epoch();
    placement_epoch_ = map.placement_epoch() != 0 ? map.placement_epoch() : map.epoch();
    placement_known_ = map.placement_epoch() != 0;
    num_servers_ = map.server_endpoints_size();
    OSPREY_RETURN_IF_ERROR(CreateTables(map, tables, &timer));
    if (store_->persists_push_marks()) {  // the redis store: what earlier incarnations applied
      std::vector<Store::PushMark> marks;
      uint64_t applied = 0;
      OSPREY_RETURN_IF_ERROR(store_->LoadPushMarks(&marks, &applied));
      size_t fields = 0;
      std::set<std::pair<uint32_t, int>> bounded;  // per (table, worker) the first is the bound
      for (const Store::PushMark& m : marks) {
        if (bounded.insert({m.table, m.worker}).second) {
          dedup_.Restore(m.table, m.worker, m.incarnation, m.request_id);
          ++fields;
        } else {
          dedup_.Record(m.table, m.worker, m.incarnation, m.request_id);
        }
      }
      if (!marks.empty()) {
        OSPREY_LOG_INFO("server {}: restored the push marks of {} (table, worker) pairs, {} ids "
                        "({} pushes applied before)", rank, fields, marks.size() - fields, applied);
      }
    }
    table_configs_ = tables;
    if (metrics_registry_ != nullptr) {
      std::vector<std::string> names;
      for (const config::TableConfig& t : tables) names.push_back(t.name);
      metrics_ = std::make_unique<ServerMetrics>(metrics_registry_, names);
    }
    OSPREY_RETURN_IF_ERROR(RestoreLocked(map));
    scheduler_ = std::make_unique<CheckpointScheduler>(
        static_cast<Replier*>(this),
        [this](const std::string& dir, int64_t clock) {
          work_mu_.AssertHeld();  // the scheduler is only called under work_mu_
          return CheckpointLocked(dir, clock);
        },
        rank);
    scheduler_->Start(checkpoint_, &tables_, NowUs());
  }
  if (timer) timer_ = std::thread([this] { TimerLoop(); });
  active_ = true;
  // Serve what arrived early, in order, before new messages (which now take the direct path but
  // must wait on mu_, which we hold, so ordering is kept).
  while (!held_.empty()) {
    budget_->Release(held_.front().peer, held_.front().bytes());
    Handle(std::move(held_.front()));
    held_.pop_front();
  }
  return Status::OK();
}

Status Server::CreateTables(const proto::ShardMap& map,
                            const std::vector<config::TableConfig>& tables, bool* timer) {
  for (int i = 0; i < map.tables_size(); ++i) {
    const proto::TableSpec& spec = map.tables(i);
    const uint32_t id = static_cast<uint32_t>(i);
    uint64_t num_chunks = 0;
    std::vector<uint64_t> owned;
    if (spec.type() == proto::TABLE_DENSE) {
      if (spec.chunk_floats() == 0) return InvalidArgument("dense table with chunk_floats 0");
      num_chunks = (spec.size() + spec.chunk_floats() - 1) / spec.chunk_floats();
      for (uint64_t c = 0; c < num_chunks; ++c) {
        if (ServerForChunk(id, c, num_servers_) == rank()) owned.push_back(c);
      }
    }
    OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<TableShard> shard,
                            TableShard::Create(id, spec, tables[i], std::move(owned), num_chunks,
                                               store_.get(), &counters_, this));
    if (live_known_) shard->SetLiveWorkers(live_, left_);
    shard->set_hold_budget(budget_.get());
    shard->set_apply_pool(apply_pool_.get());
    *timer = *timer || (!shard->bsp() && tables[i].consistency.merge_window_us > 0);
    tables_.push_back(std::move(shard));
  }
  return Status::OK();
}

Status Server::RestoreLocked(const proto::ShardMap& map) {
  restored_versions_.assign(tables_.size(), 0);
  if (restore_dir_.empty()) return Status::OK();
  CheckpointMeta now;
  now.epoch = epoch_;
  now.rank = rank();
  now.num_servers = num_servers_;
  for (int i = 0; i < map.tables_size(); ++i) {
    now.tables.push_back(map.tables(i));
    now.optimizers.push_back(OptimizerTypeName(table_configs_[i].optimizer.type));
  }
  RestoreInfo info;
  if (replacement_ && rollback_generation_ > 0) {  // bsp rollback: the newest common cut
    OSPREY_ASSIGN_OR_RETURN(const int64_t cut, RestoreCutLocked(restore_dir_, -1, &info));
    for (auto& t : tables_) {
      if (t->bsp()) t->set_done(cut);
    }
    rollback_cut_.store(cut);
    rollback_acked_.store(rollback_generation_);
    OSPREY_LOG_INFO("server {} (replacement) restored bsp cut clock {} of {} for rollback "
                    "generation {}", rank(), cut, restore_dir_, rollback_generation_);
    return Status::OK();
  }
  OSPREY_ASSIGN_OR_RETURN(std::vector<uint64_t> versions,
                          replacement_ ? RestoreReplacementCheckpoint(restore_dir_, now, store_.get(), &info)
                                       : RestoreCheckpoint(restore_dir_, now, store_.get(), &info));
  std::string list;
  for (size_t i = 0; i < tables_.size(); ++i) {
    admission::RowLifecycle* l = tables_[i]->lifecycle();
    if (l != nullptr && i < info.table_states.size()) {  // admission sketch, rows' last updates
      const auto& states = info.table_states[i];
      const std::string* own = info.files == num_servers_ ? &states[rank()] : nullptr;
      OSPREY_RETURN_IF_ERROR(l->RestoreState(states, own, NowUs(),
                                             "checkpoint " + restore_dir_ + " table '" +
                                                 tables_[i]->spec().name() + "'"));
    }
    tables_[i]->set_version(versions[i]);
    if (versions[i] > max_version_.load()) max_version_.store(versions[i]);
    list += (i ? ", " : "") + tables_[i]->spec().name() + "=" + std::to_string(versions[i]);
  }
  restored_versions_ = versions;
  if (replacement_) {  // server failover: bsp resumes at the cut, the workers are past it
    for (auto& t : tables_) {
      if (t->bsp()) t->set_done(info.min_clock);
    }
  }
  std::string clock = info.min_clock == info.max_clock
                          ? std::to_string(info.min_clock)
                          : std::to_string(info.min_clock) + ".." +
                                std::to_string(info.max_clock) + ", NOT one cut";
  OSPREY_LOG_INFO("server {} restored checkpoint {} ({} of {} files read, clock {}): versions [{}]; "
                  "{:.1f} MB: read {:.2f} s, verify {:.2f} s, import {:.2f} s", rank(), restore_dir_,
                  info.files_read, info.files, clock, list, static_cast<double>(info.bytes) / 1e6, info.read_seconds,
                  info.verify_seconds, info.import_seconds);
  return Status::OK();
}

}  // namespace osprey::server
