// The final ClusterState file: how osprey-coordinator hands the job's outcome to `osprey launch`.
//
// The launcher polls the coordinator while the job runs, but the coordinator may exit between two
// polls; so with --final-state PATH it also writes the last ClusterState (binary protobuf) to PATH
// just before exiting, and the launcher reads the reports from there. The file is written
// atomically (temp file + rename), so a reader sees the whole state or no file.
//
// Pure functions of the file system; thread-safe for distinct paths.
#pragma once

#include <string>

#include "common/status.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

// Writes `content` to `path` through `path.tmp.<pid>` + fsync + rename. Errors: Unavailable with
// the path and errno text.
Status WriteFileAtomically(const std::string& path, const std::string& content);

Status WriteFinalState(const std::string& path, const proto::ClusterState& state);
// NotFound when there is no file, DataLoss when it does not parse.
StatusOr<proto::ClusterState> ReadFinalState(const std::string& path);

}  // namespace osprey::coordinator
