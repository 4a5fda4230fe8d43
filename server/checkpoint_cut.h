// bsp rollback's checkpoint files (issue 12): which cut every server can go back to.
//
// A bsp cut at clock D (checkpoint.h "Consistency") is written by each server when it reaches D,
// not at one instant, so when a server dies the newest files of the servers may be of two cuts
// (D and D - every_steps). Each server therefore keeps, next to its newest file
// `DIR/server-R-of-N.ckpt`, the cut before it: `DIR/previous-cut/server-R-of-N.ckpt` (a hard link
// to the file being replaced, made before the new one is renamed in, so a crash leaves both
// intact). The consistent cut is the newest clock that every rank has in one of its two files.
// Per-server snapshots (clock 0) are not cuts and are not kept.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace osprey::server {

// "DIR/previous-cut".
std::string PreviousCutDir(const std::string& dir);

// Before `path` (a file of `dir`) is replaced by a newer cut: links it into PreviousCutDir(dir)
// (replacing what is there). Nothing to do when `path` does not exist yet. Errors: Internal.
Status KeepPreviousCut(const std::string& dir, const std::string& path);

// The whole file in one sized read. NotFound / Internal naming the path.
Status ReadWholeFile(const std::string& path, std::string* bytes);

// The header clock of a checkpoint file (reads only its header). DataLoss / NotFound naming it.
StatusOr<int64_t> CheckpointClock(const std::string& path);

// The newest clock D > 0 such that every rank 0..n-1 has a file of clock D in `dir` or its
// previous cut. FailedPrecondition naming each rank's clocks when there is none.
StatusOr<int64_t> ConsistentCut(const std::string& dir, int n);

// Server `rank`'s file of cut `clock` (of n): the newest file or the previous cut.
// FailedPrecondition when neither has that clock.
StatusOr<std::string> CutFile(const std::string& dir, int rank, int n, int64_t clock);

}  // namespace osprey::server
