// JobState's rules for a worker that registers after the rendezvous (issue 12, worker failover):
// a restarted `osprey-worker --rank R` takes rank R over.
//
//  - It must name its rank (requested_rank in [0, num_workers)) and the job must not be shutting
//    down (OnRegister refuses that before dispatching here); a rank that has sent its final
//    report is refused (its work is done).
//  - The same process again (same incarnation, pid and host: a retried registration) gets the
//    same reply again and changes nothing.
//  - A new process replaces the old one whether the old one was marked dead or is still believed
//    alive (killed less than heartbeat_timeout_ms ago): the new incarnation supersedes it at once
//    -- heartbeats carrying the old incarnation are refused from then on -- and the rank is alive
//    again, so barriers and the "every live worker reported" rule wait for it again, and the
//    servers, which take their live-worker set from the heartbeat snapshot, count it again.
//  - The rank's barrier waits by the old process are dropped (no one would receive their
//    release); the new process arrives on its own.
//  - The reply is the rendezvous reply (rank, shard map, session, host group place) plus
//    rejoined = true and resume_clock = the clock of the rank's last heartbeat: the new process
//    resumes from what the servers applied (worker/resume_plan.h), with this clock as the
//    fallback where a server cannot say. Its clock stays there (never goes back), so servers, which keep each
//    worker's highest clock, do not count a clock twice.
#include "common/logging.h"
#include "coordinator/job_state.h"
#include "proto/wire.h"

namespace osprey::coordinator {

void JobState::RejoinWorker(const ReplyAddress& from, const proto::RegisterRequest& req,
                            Clock::time_point now, Outbox* out) {
  const std::string who = "worker (pid " + std::to_string(req.pid()) + " on host '" + req.host() + "')";
  const int rank = req.requested_rank();
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) {
    out->push_back(OutgoingReply{from, FailedPrecondition(
        "the rendezvous is already complete; " + who + " may only rejoin with its rank (--rank R, R in [0, " +
        std::to_string(workers_.size()) + ")), got " + std::to_string(rank)), Buffer()});
    return;
  }
  Node& node = workers_[rank];
  if (node.reported) {
    out->push_back(OutgoingReply{from, FailedPrecondition(
        who + " asks for worker rank " + std::to_string(rank) +
        ", which has already sent its final report; refusing to restart it"), Buffer()});
    return;
  }
  const bool same_process = req.incarnation() == node.incarnation && req.pid() == node.pid &&
                            req.host() == node.host && node.alive;
  if (!same_process) {
    OSPREY_LOG_WARN("worker {}: pid {} (incarnation {:x}) takes over from pid {} ({}); resumes at clock {} "
                    "(rejoin {})",
                    rank, req.pid(), req.incarnation(), node.pid,
                    node.alive ? "still believed alive: superseded" : "marked dead", node.clock,
                    node.rejoins + 1);
    node.pid = req.pid();
    node.host = req.host();
    node.incarnation = req.incarnation();
    node.metrics_endpoint = req.metrics_endpoint();
    node.alive = true;
    node.told = false;
    ++node.rejoins;
    for (auto& [key, waiters] : barriers_) {
      if (key.second == proto::ROLE_WORKER) waiters.erase(rank);
    }
  }
  node.last_seen = now;  // heartbeats are due from now on
  proto::RegisterReply reply;
  reply.set_rank(rank);
  reply.set_num_servers(cluster_.num_servers);
  reply.set_num_workers(cluster_.num_workers);
  *reply.mutable_shard_map() = shard_map_;
  reply.set_session_id(session_id_);
  reply.set_local_rank(node.local_rank);
  reply.set_local_size(node.local_size);
  reply.set_rejoined(true);
  reply.set_resume_clock(node.clock);
  reply.set_rollback_generation(rollback_.generation);  // bsp rollback: its requests stamp it
  out->push_back(OutgoingReply{from, Status::OK(), SerializeMessage(reply)});
}

}  // namespace osprey::coordinator
