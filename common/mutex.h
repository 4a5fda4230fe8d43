// Mutex, MutexLock and CondVar: std::mutex / std::unique_lock / std::condition_variable with the
// capability annotations of common/thread_annotations.h, so clang's -Wthread-safety checks every
// GUARDED_BY field and REQUIRES function. Use these instead of the std types for any mutex that
// guards fields.
//
//   Mutex mu_;
//   std::deque<Item> queue_ GUARDED_BY(mu_);
//   CondVar cv_;
//   ...
//   MutexLock lock(&mu_);
//   cv_.Wait(&lock, [&]() REQUIRES(mu_) { return !queue_.empty(); });
//
// Thread-safety: as the std types they wrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace osprey {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex (where it cannot see it, e.g. a callback).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // For std::lock_guard / std::scoped_lock in code the analysis does not check.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock / Lock let a scope drop it for a while (e.g. around a
// callback or a blocking call), as std::unique_lock does.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable waited on with a MutexLock. The predicate runs with the mutex held:
// annotate it `[&]() REQUIRES(mu_) { ... }` when it reads guarded fields.
class CondVar {
 public:
  void Wait(MutexLock* lock) { cv_.wait(lock->lock_); }
  template <typename Pred>
  void Wait(MutexLock* lock, Pred pred) {
    cv_.wait(lock->lock_, pred);
  }
  // Returns false when `timeout` passed with the predicate still false.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(MutexLock* lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    return cv_.wait_for(lock->lock_, timeout, pred);
  }
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(MutexLock* lock, std::chrono::time_point<Clock, Duration> deadline, Pred pred) {
    return cv_.wait_until(lock->lock_, deadline, pred);
  }
  // Returns false on timeout.
  template <typename Rep, typename Period>
  bool WaitFor(MutexLock* lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(lock->lock_, timeout) == std::cv_status::no_timeout;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace osprey
