#include "worker/scale_pause.h"

#include <chrono>

#include "common/logging.h"

namespace osprey::worker {

ScalePause::ScalePause(int rank, Client* first, Call call, MakeClient make_client)
    : rank_(rank), call_(std::move(call)), make_client_(std::move(make_client)), current_(first) {}

ScalePause::~ScalePause() {
  for (auto& c : owned_) c->Stop();
}

void ScalePause::OnState(const proto::ClusterState& state) {
  // A reply from before this worker's switch still carries the old epoch: not for this map.
  // The client's epoch follows server replacements (Client::OnClusterState runs first).
  pending_.store(state.scale().phase() == proto::SCALE_PAUSING && state.epoch() == current()->epoch());
}

bool ScalePause::Pending(int64_t step) const {
  if (run_to_ >= 0) return step >= run_to_;
  return pending_.load();
}

StatusOr<Client*> ScalePause::Pause(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  proto::ScaleRequest req;
  req.set_kind(proto::SCALE_PAUSE);
  req.set_rank(rank_);
  req.set_clock(step);
  StatusOr<proto::ScaleReply> reply = call_(req);
  paused_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!reply.ok()) return reply.status().WithContext("scale: worker " + std::to_string(rank_) + " pause");
  run_to_ = -1;
  pending_.store(false);
  if (reply->run_to_clock() > step) {
    run_to_ = reply->run_to_clock();
    return current();
  }
  // The map the client routes by, not its epoch(): a cluster state of the committed step may have
  // raised that (it follows every epoch change) before this reply came, and the client would then
  // keep routing by the old map (CI: a pull refused "key ... belongs to server 2, not to server 0").
  if (reply->shard_map().epoch() <= current()->shard_map().epoch()) return current();
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Client> next, make_client_(reply->shard_map()));
  Client* old = current();
  owned_.push_back(std::move(next));
  current_.store(owned_.back().get());
  old->Stop();
  OSPREY_LOG_INFO("worker {}: shard map epoch {} ({} servers) from step {}; paused {:.3f} s", rank_,
                  reply->shard_map().epoch(), reply->shard_map().server_endpoints_size(), step,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return current();
}

}  // namespace osprey::worker
