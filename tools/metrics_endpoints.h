// The metrics URLs of a job's processes, from the coordinator's ClusterState (each node gives its
// own at registration; the coordinator adds its own), for `osprey launch --metrics`.
#pragma once

#include <string>

#include "osprey.pb.h"

namespace osprey::tools {

// One "NAME URL" line per process (coordinator, server-R, worker-R), or "" until every node of
// the job has registered a metrics URL (so a caller prints the list once, complete).
std::string MetricsEndpointsText(const proto::ClusterState& state);

}  // namespace osprey::tools
