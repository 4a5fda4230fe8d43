// Thread-safety annotations the compiler checks (clang's -Wthread-safety), as leveldb and abseil
// use them. Under any other compiler they expand to nothing.
//
//   class Foo {
//     Mutex mu_;
//     int n_ GUARDED_BY(mu_) = 0;
//     void Bump() REQUIRES(mu_) { ++n_; }
//     void Use() EXCLUDES(mu_) { MutexLock l(&mu_); Bump(); }
//   };
//
// The annotated mutex and lock types are in common/mutex.h. CI builds the non-CUDA code with
// clang and -Wthread-safety -Werror=thread-safety (deploy/check-thread-safety.sh).
#pragma once

#if defined(__clang__) && !defined(SWIG)
#define OSPREY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OSPREY_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (Mutex) or a scoped holder of one (MutexLock).
#define CAPABILITY(x) OSPREY_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY OSPREY_THREAD_ANNOTATION(scoped_lockable)

// Data members: read and written only while holding the given mutex.
#define GUARDED_BY(x) OSPREY_THREAD_ANNOTATION(guarded_by(x))
// Pointer members: the pointee is protected by the given mutex.
#define PT_GUARDED_BY(x) OSPREY_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock ordering.
#define ACQUIRED_BEFORE(...) OSPREY_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) OSPREY_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// Functions: the caller must hold (REQUIRES) or must not hold (EXCLUDES) the mutex.
#define REQUIRES(...) OSPREY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) OSPREY_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) OSPREY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Functions that take or release a mutex and return with it held / released.
#define ACQUIRE(...) OSPREY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) OSPREY_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) OSPREY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) OSPREY_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) OSPREY_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// Asserts (to the analysis) that the mutex is held, e.g. in a callback run under a lock.
#define ASSERT_CAPABILITY(x) OSPREY_THREAD_ANNOTATION(assert_capability(x))
// Returns a reference to the given mutex (accessors).
#define RETURN_CAPABILITY(x) OSPREY_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function; say why next to every use.
#define NO_THREAD_SAFETY_ANALYSIS OSPREY_THREAD_ANNOTATION(no_thread_safety_analysis)
