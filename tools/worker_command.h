// The worker processes of a job whose config sets worker.command (users' own training scripts,
// e.g. [python3, examples/train_dlrm.py]): `osprey launch` runs the command once per worker rank
// in place of osprey-worker. The script joins the job through osprey.connect(), which reads
//   OSPREY_CONFIG       the job config (absolute path)
//   OSPREY_SETS         the launcher's --set overrides, one per line (the coordinator endpoint and
//                       the CURVE key directory included, as every other child gets them)
//   OSPREY_COORDINATOR  the coordinator's endpoint
//   OSPREY_RANK         this worker's rank (asked of the coordinator at registration)
//   OSPREY_WORLD_SIZE   cluster.workers
// and reports through the client (heartbeats for the progress line, a final report at the end).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tools/child_process.h"

namespace osprey::tools {

// The ChildSpec of worker `rank`. `command` is worker.command; its first word is looked up in
// PATH unless it holds a '/'. NotFound when it is not an executable there.
StatusOr<ChildSpec> WorkerCommandSpec(const std::vector<std::string>& command, int rank, int world_size,
                                      const std::string& config_path, const std::vector<std::string>& sets,
                                      const std::string& coordinator, const std::string& log_path);

}  // namespace osprey::tools
