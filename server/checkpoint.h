// Checkpoint files: one per server, `DIR/server-R-of-N.ckpt`, holding every record (sparse row or
// owned dense chunk: weights then optimizer state) of that server's stores.
//
// File layout (little-endian):
//   "OSPRCKPT"  u32 format_version  u32 header_bytes  CheckpointHeader (protobuf)  u32 crc32c(header)
//   blocks:     u32 'BLOK'  u32 table  u32 records  u32 0  u64 payload_bytes  payload
//               u32 crc32c(the 24 bytes before the payload + payload)
//               payload: per record u64 key, u32 floats, u32 0, floats x fp32
//   end:        u32 'ENDC'  u32 0  u64 total records  u32 crc32c(the 16 bytes before)
// A file is written to a temporary name, fsynced, renamed over the final name, and the directory
// fsynced, so a crash leaves either the old file or the new one.
//
// Restore reads EVERY server-*-of-N.ckpt of a directory (all N must be there, all from the same
// N), verifies all of them completely (magic, format version, CRCs, end block, table specs equal
// to the running job's, record sizes equal to this server's layout) and only then imports the
// records the placement function gives to this server (rank of num_servers, which may differ from
// N). Any problem is FailedPrecondition / DataLoss naming the file and what is wrong, with nothing
// imported.
//
// Consistency: a file is one server's snapshot taken under its work lock between two optimizer
// steps (gradients still in an open merge window are not in it). Across servers, checkpoints
// written on demand or every_seconds are each server's own cut; every_steps checkpoints are taken
// right after the server's busiest table closed a multiple of every_steps windows, which in bsp is
// a clock boundary of that table (other tables of the server may be one clock behind: their own
// window of that clock may still be open). Gradients in open windows are not saved.
//
// Thread-safety: none; the server calls these under its work lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "osprey.pb.h"
#include "server/store.h"

namespace osprey::server {

constexpr uint32_t kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  uint64_t epoch = 0;
  int rank = 0;
  int num_servers = 1;
  std::vector<proto::TableSpec> tables;
  std::vector<uint64_t> versions;        // per table
  std::vector<std::string> optimizers;   // per table
};

// "DIR/server-R-of-N.ckpt".
std::string CheckpointPath(const std::string& dir, int rank, int num_servers);

// Writes `store`'s records as server meta.rank's file in `dir` (created if missing). Returns the
// path written. Errors: Internal / Unavailable for I/O failures (the old file stays).
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                      const Store& store);

// Verifies every file of the checkpoint in `dir`, then imports into `store` the records owned by
// server `current.rank` of `current.num_servers`. `current.tables` are the running job's tables.
// Returns per table the highest version any file recorded.
StatusOr<std::vector<uint64_t>> RestoreCheckpoint(const std::string& dir,
                                                  const CheckpointMeta& current, Store* store);

}  // namespace osprey::server
