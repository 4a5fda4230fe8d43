// Client's server failover (client.h OnClusterState): servers reported dead hold their requests'
// deadlines; a replacement (a server rank with a new incarnation) gets every unanswered request.
#include "common/logging.h"
#include <algorithm>

#include "worker/client/client.h"

namespace osprey::worker {

PeerId Client::PeerOf(int server) const {
  MutexLock lock(&route_mu_);
  return peers_[server];
}

void Client::OnClusterState(const proto::ClusterState& state) {
  using Clock = std::chrono::steady_clock;
  std::vector<int> replaced;
  {
    MutexLock lock(&route_mu_);
    for (const proto::NodeState& n : state.nodes()) {
      if (n.role() != proto::ROLE_SERVER || n.rank() < 0 || n.rank() >= static_cast<int>(peers_.size())) continue;
      const int rank = n.rank();
      if (!n.alive()) {
        requests_.SetServerDown(rank, Clock::now() + std::chrono::milliseconds(options_.replace_timeout_ms));
        continue;
      }
      if (n.incarnation() == 0 || n.incarnation() == incarnations_[rank]) continue;
      const bool first = incarnations_[rank] == 0;
      incarnations_[rank] = n.incarnation();
      if (first && n.endpoint() == endpoints_[rank]) continue;  // the process we started with
      if (n.endpoint() != endpoints_[rank]) {
        auto peer = transport_->Connect(n.endpoint());
        if (!peer.ok()) {
          OSPREY_LOG_ERROR("worker {}: cannot connect to the replacement of server {} at {}: {}",
                           options_.worker_rank, rank, n.endpoint(), peer.status().ToString());
          continue;
        }
        peers_[rank] = *peer;
        endpoints_[rank] = n.endpoint();
      }
      replaced.push_back(rank);
    }
    announced_generation_ = std::max(announced_generation_, state.rollback_generation());
    if (state.rollback_ready() && state.rollback_generation() > ready_generation_) {
      ready_generation_ = state.rollback_generation();
      ready_clock_ = state.rollback_clock();
    }
    if (state.epoch() > epoch_.load(std::memory_order_acquire)) {
      epoch_.store(state.epoch(), std::memory_order_release);
    }
  }
  for (int rank : replaced) {
    const PeerId peer = PeerOf(rank);
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    size_t n = requests_.Resend(rank, [&](uint64_t id, const Buffer& header, const Buffer& keys,
                                          const Buffer& values) {
      auto h = ParseHeader(header);
      if (!h.ok()) return;
      h->set_epoch(epoch);
      Message m;
      m.peer = peer;
      m.header = SerializeHeader(*h);
      m.keys = keys;
      m.values = values;
      Status s = transport_->Send(std::move(m));
      if (!s.ok()) requests_.SendFailed(id, s);
    });
    OSPREY_LOG_WARN("worker {}: server {} was replaced (shard-map epoch {}): re-sent {} unanswered requests",
                    options_.worker_rank, rank, epoch, n);
  }
}

bool Client::RollbackAnnounced() const {
  MutexLock lock(&route_mu_);
  return announced_generation_ > rollback_generation_.load(std::memory_order_acquire);
}

bool Client::ReadyRollback(uint64_t* generation, int64_t* clock) const {
  MutexLock lock(&route_mu_);
  if (ready_generation_ <= rollback_generation_.load(std::memory_order_acquire)) return false;
  *generation = ready_generation_;
  *clock = ready_clock_;
  return true;
}

}  // namespace osprey::worker
