#include "server/apply_pool.h"

#include <algorithm>

namespace osprey::server {
namespace {

// Range r of `ranges` over [0, n): the first n % ranges ranges get one item more.
void RangeBounds(size_t n, size_t ranges, size_t r, size_t* begin, size_t* end) {
  const size_t base = n / ranges, extra = n % ranges;
  *begin = r * base + std::min(r, extra);
  *end = *begin + base + (r < extra ? 1 : 0);
}

}  // namespace

ApplyPool::ApplyPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) {
    workers_.emplace_back([this, i] { Work(static_cast<size_t>(i)); });
  }
}

ApplyPool::~ApplyPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  start_cv_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

size_t ApplyPool::Ranges(size_t n, size_t min_grain) const {
  const size_t by_grain = n / std::max<size_t>(min_grain, 1);
  return std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads()), by_grain));
}

Status ApplyPool::Run(size_t n, size_t min_grain, const RangeFn& fn) {
  if (n == 0) return Status::OK();
  const size_t ranges = Ranges(n, min_grain);
  if (ranges == 1) return fn(0, n);
  split_runs_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock l(&mu_);
    fn_ = &fn;
    n_ = n;
    ranges_ = ranges;
    running_ = ranges - 1;
    results_.assign(ranges, Status::OK());
    ++generation_;
  }
  start_cv_.SignalAll();
  size_t begin, end;
  RangeBounds(n, ranges, 0, &begin, &end);
  Status first = fn(begin, end);
  MutexLock l(&mu_);
  done_cv_.Wait(&l, [this]() REQUIRES(mu_) { return running_ == 0; });
  fn_ = nullptr;
  if (!first.ok()) return first;
  for (size_t r = 1; r < ranges; ++r) {
    if (!results_[r].ok()) return results_[r];
  }
  return Status::OK();
}

void ApplyPool::Work(size_t index) {
  uint64_t seen = 0;
  MutexLock l(&mu_);
  while (true) {
    start_cv_.Wait(&l, [&]() REQUIRES(mu_) { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= ranges_) continue;  // this Run needs fewer threads
    const RangeFn* fn = fn_;
    size_t begin, end;
    RangeBounds(n_, ranges_, index, &begin, &end);
    l.Unlock();
    Status s = (*fn)(begin, end);
    l.Lock();
    results_[index] = std::move(s);
    if (--running_ == 0) done_cv_.Signal();
  }
}

}  // namespace osprey::server
