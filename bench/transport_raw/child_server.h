// ChildServer: runs a benchmark's echo server in a forked child process (or, on request, in a
// thread of this process) and hands its bound endpoint back to the parent.
//
// Why a child process: the real worker/server pair lives in two processes, with separate address
// spaces, malloc arenas and ZeroMQ contexts; a server thread in the client's process would share
// the client's heap and ZeroMQ I/O threads and flatter the numbers. The child is started with
// fork() and no exec, so the caller should have no threads holding locks that the child needs
// (benchmark mains call this before starting anything else; glibc's malloc is fork-safe). The
// child dies with the parent (PR_SET_PDEATHSIG) so an aborted benchmark leaves nothing behind.
//
// Threading: one ChildServer is used by one thread.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace osprey::bench {

class ChildServer {
 public:
  // Called by the server once it is bound, with the endpoint clients should connect to.
  using ReadyFn = std::function<void(const std::string& endpoint)>;
  // The server body: binds, calls ready(endpoint) once, serves until a client tells it to quit,
  // returns an exit code (0 = fine).
  using ServeFn = std::function<int(const ReadyFn& ready)>;

  // Starts `serve` in a child process (in_process == false) or a thread, and waits up to 10 s for
  // its endpoint. Errors: Internal (fork/pipe failed), DeadlineExceeded (no endpoint in time).
  static StatusOr<std::unique_ptr<ChildServer>> Start(ServeFn serve, bool in_process);

  // Kills a child that is still running (after a short grace period); joins a thread.
  ~ChildServer();

  const std::string& endpoint() const { return endpoint_; }

  // Waits up to 5 s for the server to finish (after the client told it to quit); returns its
  // failure as Internal, or DeadlineExceeded (the child is then killed). When `cpu_seconds` is
  // given, stores the user+system CPU time the child used (0 for an in-process server, whose
  // time shows in this process's own usage).
  Status Wait(double* cpu_seconds = nullptr);

  // User+system CPU seconds the running child (all its threads) has used so far, read from its
  // CPU-time clock (clock_getcpuclockid); 0 for an in-process server or when it cannot be read.
  double CpuSecondsSoFar() const;

 private:
  ChildServer() = default;

  std::string endpoint_;
  pid_t pid_ = -1;
  std::thread thread_;
  int thread_rc_ = 0;
};

// User+system seconds in `u`; the calling process's own (all threads) so far.
double CpuSeconds(const rusage& u);
double SelfCpuSeconds();

}  // namespace osprey::bench
