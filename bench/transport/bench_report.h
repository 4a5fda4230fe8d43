// Results of osprey-bench-transport: one BenchRecord per (case, transport, op, size), printed as a
// table next to the raw ZeroMQ baseline and written as a JSON array.
//
// JSON: an array of objects with exactly these keys (null where a figure does not apply):
//   case          "dense", "sparse" or "raw_zmq"
//   transport     "tcp" or "ipc"
//   op            "push", "pull", "pushpull", "pipelined_push", "pull_buffer", "pull_x3",
//                 "push_bf16" or "pull_bf16"
//   bytes         payload of one request: dense and raw_zmq the values frame (the table size);
//                 sparse keys * (8 + 4 * dim), the key and value frames moved by one push
//                 (push_bf16 / pull_bf16: keys * (8 + 2 * dim))
//   keys, dim     sparse only
//   median_us     median time per operation; pipelined_push: per request (batch time / window);
//                 pull_x3: per pull (time of the 3 concurrent pulls / 3);
//                 pushpull: one push plus one pull
//   gbps          payload GB/s (1e9 bytes/s); pushpull counts both directions (2 * bytes)
//   keys_per_sec  sparse only: keys / median time (pushpull: keys pushed and pulled once each;
//                 pull_x3: the keys of all 3 pulls)
//   req_per_sec   pipelined_push only: requests completed per second
//   cpu_us        user+system CPU time of the client and server processes together per request
//                 (per pull for pull_x3): Osprey's over its timed runs, raw_zmq's over the whole
//                 case; cpu_us / median_us is how many of the machine's cores the case kept busy
//
// Threading: plain functions and values; no shared state.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/transport/osprey_cases.h"
#include "common/status.h"

namespace osprey::bench {

struct BenchRecord {
  std::string kind;       // "case" in JSON
  std::string transport;
  std::string op;
  uint64_t bytes = 0;
  std::optional<uint64_t> keys;
  std::optional<uint64_t> dim;
  double median_us = 0;
  std::optional<double> gbps;
  std::optional<double> keys_per_sec;
  std::optional<double> req_per_sec;
  std::optional<double> cpu_us;
};

// Builds a record from `seconds` per operation, where one operation is `requests` requests
// (the window for kPipelinedPush, kPullThreads for kThreadedPull, else 1). `keys`/`dim` are set for sparse records only.
// `cpu_seconds` is the CPU time of one operation (negative: not measured).
BenchRecord MakeRecord(const std::string& kind, const std::string& transport, BenchOp op,
                       uint64_t bytes, std::optional<uint64_t> keys, std::optional<uint64_t> dim,
                       double seconds, int requests, double cpu_seconds = -1);

// The JSON array described above (one record per line).
std::string RecordsToJson(const std::vector<BenchRecord>& records);
// Writes RecordsToJson to `path`. Unavailable when the file cannot be written.
Status WriteJson(const std::string& path, const std::vector<BenchRecord>& records);

// Prints one row per Osprey record with the matching raw_zmq figures on the same row and the
// throughput ratio osprey/raw (raw time / osprey time; pushpull against raw push + raw pull).
void PrintTable(std::FILE* out, const std::vector<BenchRecord>& records);

}  // namespace osprey::bench
