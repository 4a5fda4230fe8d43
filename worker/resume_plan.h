// ResumePlan: where a restarted worker resumes so that none of its rank's pushes is applied twice
// and none is skipped (issue 12, worker failover), from what every server says it took from the
// rank (OP_APPLIED_CLOCKS, server/applied_clocks.h) and the coordinator's clock (the rank's last
// heartbeat, RegisterReply.resume_clock).
//
// Why a floor per (server, table) and not one step: a step sends one push per (server, table)
// it touches, and a kill -9 may land between them, so a server may hold step k's push while
// another does not. The rule:
//  - floor[s][t] = the highest clock server s took from the rank for table t. Where the server
//    did not answer, or is a replacement that never got a push from the rank for t (it started
//    empty), floor = heard - 1: the old rule, steps below the heartbeat's clock count as taken.
//    A server whose record spans the job and holds nothing for t keeps -1 (the rank never
//    pushed there: replaying a step sends it nothing new either, the data stream being
//    deterministic).
//  - start = max(heard - 1, min over (s, t) of floor + 1), within [0, steps]: every step below
//    heard - 1 was acknowledged by every server before the heartbeat said heard (a step's pushes
//    are waited before the next step's are sent), and no step at or above min floor + 1 is
//    known to be complete everywhere.
//  - The worker replays from `start` (reading the same samples, recomputing the gradient from
//    the parameters pulled now) and sends a step's push to (s, t) only when its clock is above
//    floor[s][t] (Client::SetPushFloors). So each (step, server, table) push is taken once.
// bsp: a replayed push for a clock whose window is still open (the rank was alive, so the window
// waited for it) completes that window: one window per clock, each with every live worker's
// gradient once. A push for a clock whose window closed without the rank (it was marked dead)
// joins the open window, as any late push does.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace osprey::worker {

class Client;

// One server's OP_APPLIED_CLOCKS answer.
struct ServerClocks {
  bool answered = false;
  bool complete = false;         // its record spans the whole job (not a replacement)
  std::vector<int64_t> applied;  // by table id; -1: nothing taken
};

struct ResumePlan {
  int64_t start = 0;
  std::vector<std::vector<int64_t>> floors;  // [server][table]: pushes with clock <= floor are not sent
};

// The plan for `num_tables` tables and servers.size() servers; `heard` is the coordinator's
// resume_clock, `steps` train.steps.
ResumePlan PlanResume(int64_t heard, int64_t steps, size_t num_tables, const std::vector<ServerClocks>& servers);

// Decodes an OP_APPLIED_CLOCKS reply of (num_tables + 1) words; InvalidArgument naming the
// server when the size is wrong.
StatusOr<ServerClocks> DecodeServerClocks(int server, size_t num_tables, const std::vector<int64_t>& words);

// Asks every server of `client`'s shard map (a server that fails to answer within the client's
// timeout counts as not answered, logged), plans, and sets the client's push floors.
ResumePlan PlanExactResume(Client* client, int rank, int64_t heard, int64_t steps);

}  // namespace osprey::worker
