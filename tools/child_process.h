// ChildSet: the processes `osprey launch` starts, and how it makes sure none outlives it.
//
// Every child is fork/exec'd with:
//  - its own process group (so Ctrl-C in the terminal reaches only the launcher, which then stops
//    the children in order, and so that stopping a child also stops anything *it* started);
//  - prctl(PR_SET_PDEATHSIG, SIGKILL), followed by a check that the launcher is still its parent
//    (closing the race where the launcher died before the prctl), so a launcher killed with
//    SIGKILL still takes its children down;
//  - stdin from /dev/null, stdout and stderr appended to its own log file.
// An exec failure is reported to Spawn() through a close-on-exec pipe, as a Status.
//
// When a child exits, whatever is left in its process group (its own children) gets SIGKILL
// before the child is reaped -- while its zombie still reserves the group id, so the signal
// cannot hit an unrelated process that reused the id. StopAll() sends SIGTERM to every running
// child's group, waits up to the grace period, sends SIGKILL to what is left, and reaps every
// child: no orphans, no zombies. The destructor does the same with a short grace.
//
// The stop-signal functions install handlers for SIGINT, SIGTERM and SIGHUP that only record the
// signal in a lock-free atomic (the one global of the launcher); the launcher's loop polls it.
//
// Thread-safety: a ChildSet is used from one thread (the launcher's main thread, which must be
// the thread that forks: PDEATHSIG fires when the forking *thread* exits).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::tools {

struct ChildSpec {
  std::string name;               // "server-1": used in messages and logs
  std::string binary;             // path of the executable
  std::vector<std::string> args;  // argv[1..]
  std::string log_path;           // stdout + stderr go here (created or truncated)
  std::vector<std::string> env;   // "KEY=VALUE" added to (or replacing in) the inherited environment
};

// How a child ended.
struct ExitInfo {
  bool exited = false;  // false: killed by `signal`
  int code = 0;
  int signal = 0;

  bool success() const { return exited && code == 0; }
  // "exited with status 3" / "was killed by signal 9 (Killed)".
  std::string ToString() const;
  static ExitInfo FromWaitStatus(int wait_status);
};

class ChildSet {
 public:
  ChildSet() = default;
  ~ChildSet();
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;

  // Starts a child as described above and returns its index. Errors: Unavailable when the log
  // file cannot be created, fork fails or exec fails (with the errno text).
  StatusOr<size_t> Spawn(const ChildSpec& spec);

  // Reaps the children that exited since the last call, without blocking (killing what is left
  // of their process groups first); returns their indices.
  std::vector<size_t> ReapExited();

  // See above. Returns when every child is reaped (or, for a process that ignores even SIGKILL,
  // e.g. stuck in the kernel, after a further 5 s, with a warning on stderr).
  void StopAll(std::chrono::milliseconds grace);

  size_t size() const { return children_.size(); }
  size_t running() const;
  bool running(size_t i) const { return children_[i].running; }
  // Whether child i has exited, looked at without reaping it (ReapExited still reports it).
  bool HasExited(size_t i) const;
  pid_t pid(size_t i) const { return children_[i].pid; }
  const ChildSpec& spec(size_t i) const { return children_[i].spec; }
  // Precondition: !running(i).
  const ExitInfo& exit_info(size_t i) const { return children_[i].exit; }

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = -1;
    bool running = false;
    ExitInfo exit;
  };
  // Sends `sig` to the child's process group (falls back to the pid alone).
  static void SignalGroup(pid_t pid, int sig);
  void WaitUntil(std::chrono::steady_clock::time_point deadline);

  std::vector<Child> children_;
};

// Installs the SIGINT / SIGTERM / SIGHUP handlers (idempotent).
void InstallStopSignalHandlers();
// The first stop signal received, or 0.
int ReceivedStopSignal();
// Clears the recorded signal (tests).
void ResetStopSignal();

// The last `n` lines of the file at `path` (at most the last 64 KiB are read); "" if unreadable.
std::string TailOfFile(const std::string& path, int n);

}  // namespace osprey::tools
