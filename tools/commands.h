// The small subcommands of the `osprey` front door. Each returns the process exit code and writes
// to stdout/stderr; called from osprey_main.cc on the main thread.
#pragma once

#include <string>
#include <vector>

namespace osprey::tools {

// `osprey bench WHAT [ARGS...]`: replaces this process with BIN_DIR/osprey-bench-WHAT ARGS...
// With no or an unknown WHAT, lists the osprey-bench-* binaries in `bin_dir` and returns 2
// (0 for `osprey bench --help`). `args` are passed on exactly as given.
int RunBench(const std::string& bin_dir, const std::string& what,
             const std::vector<std::string>& args);

// `osprey doctor`: prints what this build has and what this machine offers (GPUs, RDMA devices,
// redis-server, the osprey binaries in `bin_dir`). Returns 0.
int RunDoctor(const std::string& bin_dir);

// `osprey checkpoint --coordinator ENDPOINT [--dir DIR]`: asks the job's coordinator for its live
// servers and has each write its checkpoint now (into DIR, or the job's checkpoint.dir when empty).
// Each server writes its own snapshot when the request reaches it (not a cut at one clock across
// servers). Returns 0 when every live server wrote its file, 1 otherwise (each failure printed).
// With a non-empty `keys_dir` (a job under security: curve) it connects with the admin keypair
// from there; a server refuses a DIR outside its checkpoint.dir.
int RunCheckpoint(const std::string& coordinator, const std::string& dir, int timeout_ms,
                  const std::string& keys_dir);

// `osprey keygen DIR [--force]`: writes the job's CURVE keypairs (coordinator, server, worker,
// admin; secrets 0600) into DIR. Returns 0, 2 when a key file exists and not `force`, 1 for
// other errors (each printed).
int RunKeygen(const std::string& dir, bool force);

// `osprey redis-inspect --config C [--set k=v] [--table T] [--rows N]`: the Redis store of a
// job (store.type: redis): the table's spec key, each server's row count and up to N rows each
// (key, blob size, first weights). 0, 2 for a bad config, 1 when Redis cannot be reached.
// Only in builds with hiredis.
int RunRedisInspect(const std::string& config_path, const std::vector<std::string>& sets,
                    const std::string& table, int rows);

}  // namespace osprey::tools
