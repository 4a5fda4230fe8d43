// JobState's bsp rollback (issue 12): a native-store bsp job whose server was replaced goes back,
// on every server and every worker, to the last consistent cut, so bsp stays exactly bsp.
//
// Rules (the generation is the job's count of rollbacks, 0: none yet):
//  - A server replacement (job_state_replace.cc) whose RegisterRequest has bsp_rollback starts a
//    new generation G: the cut clock is unknown, no server has acknowledged. Its RegisterReply
//    carries G (the replacement refuses requests of an earlier generation from then on).
//  - The first server heartbeat with rollback_acked == G fixes the cut clock C to its
//    rollback_cut_clock (the replacement, which picked the newest cut every server's checkpoint
//    directory holds: server/checkpoint_cut.h). ClusterState carries G and C from then on; every
//    other server rolls back to its own file of cut C and acknowledges (rollback_acked == G,
//    rollback_cut_clock == C). A server that acknowledges G at another clock fails the job (the
//    cut is not one cut any more).
//  - Once every live server acknowledged G, ClusterState.rollback_ready is set: workers drop
//    what they had in flight and rewind to clock C, stamping G in their requests.
//  - A replacement during a rollback starts the next generation (the earlier one is abandoned:
//    everyone rolls back again, to the cut the new replacement finds).
#include "common/logging.h"
#include "coordinator/job_state.h"

namespace osprey::coordinator {

void JobState::BeginRollback(int replaced_rank) {
  ++rollback_.generation;
  rollback_.clock_known = false;
  rollback_.clock = 0;
  rollback_.acked.assign(servers_.size(), false);
  rollback_.ready = false;
  OSPREY_LOG_WARN("bsp rollback generation {}: server {} was replaced; every server rolls back to the "
                  "last consistent cut and the workers rewind to its clock",
                  rollback_.generation, replaced_rank);
}

void JobState::OnRollbackAck(const Node& server, const proto::Heartbeat& hb, Clock::time_point now,
                             Outbox* out) {
  if (rollback_.generation == 0 || hb.rollback_acked() != rollback_.generation) return;
  const int rank = server.rank;
  if (rank < 0 || rank >= static_cast<int>(rollback_.acked.size()) || rollback_.acked[rank]) return;
  if (!rollback_.clock_known) {
    rollback_.clock_known = true;
    rollback_.clock = hb.rollback_cut_clock();
    OSPREY_LOG_INFO("bsp rollback generation {}: the cut is clock {} (from server {})",
                    rollback_.generation, rollback_.clock, rank);
  } else if (hb.rollback_cut_clock() != rollback_.clock) {
    BeginShutdown("bsp rollback generation " + std::to_string(rollback_.generation) + ": " +
                      NodeName(server.role, rank, server.pid) + " rolled back to clock " +
                      std::to_string(hb.rollback_cut_clock()) + ", the cut is clock " +
                      std::to_string(rollback_.clock),
                  now, out);
    return;
  }
  rollback_.acked[rank] = true;
  for (size_t r = 0; r < servers_.size(); ++r) {
    if (servers_[r].alive && !servers_[r].reported && !rollback_.acked[r]) return;
  }
  rollback_.ready = true;
  OSPREY_LOG_INFO("bsp rollback generation {}: every server is at clock {}; workers rewind",
                  rollback_.generation, rollback_.clock);
}

void JobState::FillRollback(proto::ClusterState* s) const {
  if (rollback_.generation == 0) return;
  s->set_rollback_generation(rollback_.generation);
  s->set_rollback_clock_known(rollback_.clock_known);
  s->set_rollback_clock(rollback_.clock);
  s->set_rollback_ready(rollback_.ready);
}

}  // namespace osprey::coordinator
