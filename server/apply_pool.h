// ApplyPool: the threads one server spreads an optimizer step, or a large pull's row reads, over
// (cluster.server_apply_threads).
//
// A merge window's apply is the largest piece of work a server does, and it is memory-latency
// bound: each row is a few cache lines nobody can predict, so one core keeps only so many misses
// in flight. The rows of one step are disjoint and each row's step runs the same instructions
// wherever it runs, so splitting them into contiguous ranges over several threads changes no bit
// of the result (tests/server/merge_buffer_test.cc, parallel_pull_test.cc). Only stores that allow it are visited from
// several threads at once (Store::concurrent_row_visits).
//
// A range is handed to a pool thread only when it is worth a wake-up (min_grain items): a small
// step runs on the calling thread alone, with no synchronization.
//
// Thread-safety: Run is called by one thread at a time (the server's work lock); `fn` runs on the
// caller and on the pool's threads concurrently, on disjoint ranges.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace osprey::server {

class ApplyPool {
 public:
  using RangeFn = std::function<Status(size_t begin, size_t end)>;

  // threads >= 1: the caller plus threads - 1 pool threads (started here).
  explicit ApplyPool(int threads);
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs that were split over more than one thread so far.
  uint64_t split_runs() const { return split_runs_.load(std::memory_order_relaxed); }

  // The min_grain of rows of `dim` floats worth a wake-up of their own when a range must hold
  // at least `min_floats` floats: min_floats / dim rows, at least 1.
  static size_t RowGrain(size_t min_floats, size_t dim) {
    return dim == 0 || min_floats <= dim ? 1 : min_floats / dim;
  }
  // How many ranges Run splits n items into: min(threads, n / min_grain), at least 1.
  size_t Ranges(size_t n, size_t min_grain) const;

  // Calls fn(begin, end) for contiguous ranges covering [0, n) in order (Ranges() of them, the
  // first on this thread) and returns when every call returned: the first failed range's status
  // in range order, else OK. n == 0 calls nothing.
  Status Run(size_t n, size_t min_grain, const RangeFn& fn) EXCLUDES(mu_);

 private:
  void Work(size_t index) EXCLUDES(mu_);

  Mutex mu_;
  CondVar start_cv_, done_cv_;
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // one per Run that used the pool
  bool stop_ GUARDED_BY(mu_) = false;
  const RangeFn* fn_ GUARDED_BY(mu_) = nullptr;
  size_t n_ GUARDED_BY(mu_) = 0, ranges_ GUARDED_BY(mu_) = 0;
  size_t running_ GUARDED_BY(mu_) = 0;            // pool threads still inside this Run
  std::vector<Status> results_ GUARDED_BY(mu_);   // one per range
  std::atomic<uint64_t> split_runs_{0};
  std::vector<std::thread> workers_;
};

}  // namespace osprey::server
