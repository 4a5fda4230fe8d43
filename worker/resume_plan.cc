#include "worker/resume_plan.h"

#include <algorithm>
#include <limits>

#include "common/logging.h"
#include "worker/client/client.h"

namespace osprey::worker {

ResumePlan PlanResume(int64_t heard, int64_t steps, size_t num_tables, const std::vector<ServerClocks>& servers) {
  ResumePlan plan;
  const int64_t fallback = heard - 1;
  int64_t lowest = std::numeric_limits<int64_t>::max();
  for (const ServerClocks& s : servers) {
    std::vector<int64_t> floors(num_tables, fallback);
    for (size_t t = 0; t < num_tables; ++t) {
      const int64_t got = s.answered && t < s.applied.size() ? s.applied[t] : -1;
      if (s.answered && (got >= 0 || s.complete)) floors[t] = got;
      lowest = std::min(lowest, floors[t]);
    }
    plan.floors.push_back(std::move(floors));
  }
  int64_t start = std::max<int64_t>(0, heard - 1);
  if (lowest != std::numeric_limits<int64_t>::max()) start = std::max(start, lowest + 1);
  plan.start = std::min(start, steps);
  return plan;
}

StatusOr<ServerClocks> DecodeServerClocks(int server, size_t num_tables, const std::vector<int64_t>& words) {
  if (words.size() != num_tables + 1) {
    return InvalidArgument("applied clocks of server " + std::to_string(server) + ": " +
                           std::to_string(words.size()) + " words, expected " + std::to_string(num_tables + 1) +
                           " (a flag and one clock per table)");
  }
  if (words[0] != 0 && words[0] != 1) {
    return InvalidArgument("applied clocks of server " + std::to_string(server) + ": first word " +
                           std::to_string(words[0]) + " is not 0 or 1");
  }
  ServerClocks c;
  c.answered = true;
  c.complete = words[0] == 1;
  c.applied.assign(words.begin() + 1, words.end());
  return c;
}

ResumePlan PlanExactResume(Client* client, int rank, int64_t heard, int64_t steps) {
  const int num_servers = client->shard_map().server_endpoints_size();
  const size_t num_tables = static_cast<size_t>(client->shard_map().tables_size());
  std::vector<std::vector<int64_t>> words(num_servers);
  std::vector<Ticket> tickets;
  for (int s = 0; s < num_servers; ++s) tickets.push_back(client->AppliedClocks(s, &words[s]));
  std::vector<ServerClocks> servers(num_servers);
  std::string said;
  for (int s = 0; s < num_servers; ++s) {
    Status st = client->Wait(tickets[s]);
    StatusOr<ServerClocks> c = st.ok() ? DecodeServerClocks(s, num_tables, words[s]) : StatusOr<ServerClocks>(st);
    if (!c.ok()) {
      OSPREY_LOG_WARN("worker {}: server {} did not say what it applied ({}); steps below clock {} count as "
                      "applied there", rank, s, c.status().ToString(), heard);
      continue;
    }
    servers[s] = std::move(*c);
    said += " server " + std::to_string(s) + (servers[s].complete ? "" : " (replacement)") + ":";
    for (int64_t a : servers[s].applied) said += " " + std::to_string(a);
  }
  ResumePlan plan = PlanResume(heard, steps, num_tables, servers);
  client->SetPushFloors(plan.floors);
  OSPREY_LOG_INFO("worker {}: the servers applied its pushes up to clocks (by table){}; heartbeat clock {}; "
                  "replays from step {}", rank, said, heard, plan.start);
  return plan;
}

}  // namespace osprey::worker
