// `osprey bench server --store native|redis|redis-cluster`: merge-then-apply rows/s of the Redis
// store against the native store in the same run (store_bench.cc).
#pragma once

#include <string>

namespace osprey::server {

struct StoreBenchOptions {
  std::string store;  // native | redis | redis-cluster
  size_t rows = 100000;
  size_t keys = 8192;  // drawn per push (distinct ones are pushed)
  int pushes = 8;      // per pass
  int runs = 3;        // timed runs per case
  double seconds = 1.0;  // a timed run repeats passes until it lasted this long
  double zipf = 0;     // key popularity: 0 uniform, else Zipf with this exponent (e.g. 1.05)
  int dim = 0;         // 0: 16 and 64
  std::string policies = "write_through,write_back,merge_redis";  // which Redis cases run
  std::string caches = "0,10,100";  // hot-row cache sizes, percent of the rows
};

// Starts its own Redis (tools/local_redis) under a temp dir; prints one line per case.
int RunStoreBench(const StoreBenchOptions& o);

}  // namespace osprey::server
