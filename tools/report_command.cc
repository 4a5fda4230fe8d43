// `osprey report FINAL_STATE [--json PATH]`: the launcher's report from a coordinator's
// --final-state file, for jobs started without `osprey launch` (Slurm, Kubernetes).
#include <algorithm>
#include <cstdio>

#include "coordinator/final_state.h"
#include "tools/commands.h"
#include "tools/report.h"

namespace osprey::tools {

int RunReport(const std::string& final_state, const std::string& json_path) {
  StatusOr<proto::ClusterState> state = coordinator::ReadFinalState(final_state);
  if (!state.ok()) {
    std::fprintf(stderr, "osprey report: %s\n", state.status().ToString().c_str());
    return 2;
  }
  if (!state->done()) {
    std::fprintf(stderr, "osprey report: %s: the job did not finish%s%s\n", final_state.c_str(),
                 state->failure().empty() ? "" : ": ", state->failure().c_str());
    return 1;
  }
  // No launcher measured the wall time: the longest worker's training time stands in for it.
  double wall = 0;
  for (const proto::WorkerReport& w : state->reports()) wall = std::max(wall, w.train_seconds());
  const JobReport report = SummarizeReports(*state, wall);
  std::printf("%s", FormatReport(report).c_str());
  if (!json_path.empty()) {
    Status st = coordinator::WriteFileAtomically(json_path, ReportJson(report));
    if (!st.ok()) {
      std::fprintf(stderr, "osprey report: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace osprey::tools
