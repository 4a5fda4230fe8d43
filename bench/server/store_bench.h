// `osprey bench server --store native|redis|redis-cluster`: merge-then-apply rows/s of the Redis
// store against the native store in the same run (store_bench.cc).
#pragma once

#include <string>

namespace osprey::server {

struct StoreBenchOptions {
  std::string store;  // native | redis | redis-cluster
  size_t rows = 100000;
  size_t keys = 8192;  // per push
  int pushes = 8;      // per timed pass
  int runs = 3;
  int dim = 0;         // 0: 16 and 64
};

// Starts its own Redis (tools/local_redis) under a temp dir; prints one line per case.
int RunStoreBench(const StoreBenchOptions& o);

}  // namespace osprey::server
