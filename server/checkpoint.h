// Checkpoint files: one per server, `DIR/server-R-of-N.ckpt`, holding every record (sparse row or
// owned dense chunk: weights then optimizer state) of that server's stores.
//
// File layout (little-endian):
//   "OSPRCKPT"  u32 format_version  u32 header_bytes  CheckpointHeader (protobuf)  u32 crc32c(header)
//   blocks:     u32 'BLOK'  u32 table  u32 records  u32 0  u64 payload_bytes  payload
//               u32 crc32c(the 24 bytes before the payload + payload)
//               payload: per record u64 key, u32 floats, u32 0, floats x fp32
//   state:      (format 2, optional, after the blocks, at most one per table)
//               u32 'SIDE'  u32 table  u32 0  u32 0  u64 payload_bytes  payload
//               u32 crc32c(the 24 bytes before the payload + payload)
//               payload: the table's admission / eviction state (RowLifecycle::SaveState:
//               its count-min sketch and each row's last update), opaque here
//   end:        u32 'ENDC'  u32 0  u64 total records  u32 crc32c(the 16 bytes before)
// Format 1 (no state blocks) is still read.
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
// steps (gradients still in an open merge window are not in it).
//   bsp (the server holds a bsp table): checkpoints from every_steps and from `osprey checkpoint`
//     are a consistent cut across servers at a clock boundary: every server saves right after
//     its bsp tables closed the window of clock D-1 (done() == D) and before any closes clock D,
//     with D = a multiple of every_steps (the same on every server) or the clock the caller
//     picked; the header's `clock` is D on every file of the cut (Server::SetCheckpointConfig,
//     OP_CHECKPOINT). ssp/async tables of such a server are saved as they are at that moment.
//   ssp/async only, and every_seconds in any mode: each server's own snapshot plus its tables'
//     versions (clock 0), taken when the timer or request reaches it; files of different
//     servers are not from one instant.
// Thread-safety: none; the server calls these under its work lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "osprey.pb.h"
#include "server/store.h"

namespace osprey::server {

constexpr uint32_t kCheckpointFormatVersion = 2;
constexpr uint32_t kCheckpointOldestFormatVersion = 1;  // still restored

struct CheckpointMeta {
  uint64_t epoch = 0;
  int rank = 0;
  int num_servers = 1;
  std::vector<proto::TableSpec> tables;
  std::vector<uint64_t> versions;        // per table
  std::vector<std::string> optimizers;   // per table
  int64_t clock = 0;                     // bsp cut clock (see above); 0: per-server snapshot
  // Per table (or empty): the admission / eviction state to save; "" for none.
  std::vector<std::string> table_states;
};

// What RestoreCheckpoint found, for the restoring server's log.
struct RestoreInfo {
  int files = 0;             // N of the server-R-of-N files
  int files_read = 0;        // N, or 1 where only this server's own file was read
  int64_t min_clock = 0;     // over the files; equal when the files are one bsp cut
  int64_t max_clock = 0;
  // [table][file rank]: the admission / eviction state of each file ("" where it has none).
  std::vector<std::vector<std::string>> table_states;
  // Where the time went (the restore speed's log line): reading and parsing the files, checking
  // every record against this server's layout, importing into the store; the bytes read.
  double read_seconds = 0;
  double verify_seconds = 0;
  double import_seconds = 0;
  uint64_t bytes = 0;
};

// "DIR/server-R-of-N.ckpt".
std::string CheckpointPath(const std::string& dir, int rank, int num_servers);

// Writes `store`'s records as server meta.rank's file in `dir` (created if missing). Returns the
// path written. Errors: Internal / Unavailable for I/O failures (the old file stays).
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                      const Store& store);

// Verifies every file of the checkpoint in `dir`, then imports into `store` the records owned by
// server `current.rank` of `current.num_servers`. `current.tables` are the running job's tables.
// Returns per table the highest version any file recorded; fills *info when not null.
StatusOr<std::vector<uint64_t>> RestoreCheckpoint(const std::string& dir,
                                                  const CheckpointMeta& current, Store* store,
                                                  RestoreInfo* info = nullptr);

// The same from one file only: `path` is server current.rank's own file of a checkpoint of
// current.num_servers servers (the bsp rollback's cut file, checkpoint_cut.h), so every record
// this server owns is in it. Verified completely before anything is imported, like the above.
StatusOr<std::vector<uint64_t>> RestoreOwnCheckpointFile(const std::string& path,
                                                         const CheckpointMeta& current,
                                                         Store* store,
                                                         RestoreInfo* info = nullptr);

// A failover replacement's restore: when `dir` holds a checkpoint of current.num_servers servers,
// only server current.rank's own file is read and verified (every record it owns is there, and
// the other files belong to live servers that keep their state); with another server count, all
// of them (RestoreCheckpoint). Halves the restore of a two-server job on the failover path.
StatusOr<std::vector<uint64_t>> RestoreReplacementCheckpoint(const std::string& dir,
                                                             const CheckpointMeta& current,
                                                             Store* store,
                                                             RestoreInfo* info = nullptr);

}  // namespace osprey::server
