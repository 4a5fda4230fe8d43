#include "tools/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

namespace osprey::tools {
namespace {

// The launcher's one global: written by the signal handler, polled by the main loop.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void OnStopSignal(int sig) {
  int expected = 0;
  g_stop_signal.compare_exchange_strong(expected, sig);
}

Status ErrnoStatus(const std::string& what, int err) {
  return Unavailable(what + ": " + std::strerror(err));
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(pid_t launcher, int log_fd, int null_fd, int err_fd,
                            const std::vector<char*>& argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(126);  // the launcher died before prctl took effect
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) {
    int err = errno;
    (void)!::write(err_fd, &err, sizeof(err));
    ::_exit(127);
  }
  ::execve(argv[0], argv.data(), envp);
  int err = errno;
  (void)!::write(err_fd, &err, sizeof(err));
  ::_exit(127);
}

}  // namespace

std::string ExitInfo::ToString() const {
  if (exited) return "exited with status " + std::to_string(code);
  const char* name = ::strsignal(signal);
  return "was killed by signal " + std::to_string(signal) + " (" + (name ? name : "?") + ")";
}

ExitInfo ExitInfo::FromWaitStatus(int wait_status) {
  ExitInfo info;
  if (WIFEXITED(wait_status)) {
    info.exited = true;
    info.code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    info.signal = WTERMSIG(wait_status);
  }
  return info;
}

ChildSet::~ChildSet() { StopAll(std::chrono::milliseconds(1000)); }

StatusOr<size_t> ChildSet::Spawn(const ChildSpec& spec) {
  // Everything the child needs is prepared here: after fork it may not allocate.
  std::vector<std::string> args{spec.binary};
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment: the launcher's, with spec.env's entries replacing those of the same name.
  std::vector<std::string> env_strings = spec.env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& mine : spec.env) replaced = replaced || mine.compare(0, name.size() + 1, name + "=") == 0;
    if (!replaced) env_strings.push_back(entry);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoStatus("cannot create log file " + spec.log_path, errno);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int err_pipe[2] = {-1, -1};
  if (null_fd < 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return ErrnoStatus("cannot prepare " + spec.name, err);
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(launcher, log_fd, null_fd, err_pipe[1], argv, envp.data());
  int fork_errno = errno;
  ::close(log_fd);
  ::close(null_fd);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(err_pipe[0]);
    return ErrnoStatus("cannot fork " + spec.name, fork_errno);
  }
  ::setpgid(pid, pid);  // also from this side, so the group exists before we ever signal it
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &exec_errno, sizeof(exec_errno));  // EOF once exec succeeded
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }  // it _exit()s right after reporting
    return ErrnoStatus("cannot start " + spec.name + " (" + spec.binary + ")", exec_errno);
  }
  children_.push_back(Child{spec, pid, true, ExitInfo{}});
  return children_.size() - 1;
}

namespace {

enum class Peek { kRunning, kExited, kGone };

// Whether `pid` has exited, looked at without reaping it (WNOWAIT: the zombie keeps the group id
// reserved while the rest of its group is killed). kGone: reaped behind our back.
Peek PeekChild(pid_t pid) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return errno == ECHILD ? Peek::kGone : Peek::kRunning;
  }
  return info.si_pid == pid ? Peek::kExited : Peek::kRunning;
}

}  // namespace

bool ChildSet::HasExited(size_t i) const {
  return !children_[i].running || PeekChild(children_[i].pid) != Peek::kRunning;
}

std::vector<size_t> ChildSet::ReapExited() {
  std::vector<size_t> exited;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (!c.running) continue;
    const Peek peek = PeekChild(c.pid);
    if (peek == Peek::kRunning) continue;
    if (peek == Peek::kGone) {
      c.running = false;  // nothing to wait for
      c.exit = ExitInfo{false, 0, SIGKILL};
      exited.push_back(i);
      continue;
    }
    ::kill(-c.pid, SIGKILL);
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    c.running = false;
    c.exit = ExitInfo::FromWaitStatus(status);
    exited.push_back(i);
  }
  return exited;
}

size_t ChildSet::running() const {
  size_t n = 0;
  for (const Child& c : children_) n += c.running ? 1 : 0;
  return n;
}

void ChildSet::SignalGroup(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0 && errno == ESRCH) ::kill(pid, sig);
}

void ChildSet::WaitUntil(std::chrono::steady_clock::time_point deadline) {
  while (running() > 0 && std::chrono::steady_clock::now() < deadline) {
    ReapExited();
    if (running() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ChildSet::StopAll(std::chrono::milliseconds grace) {
  for (const Child& c : children_) {
    if (c.running) SignalGroup(c.pid, SIGTERM);
  }
  WaitUntil(std::chrono::steady_clock::now() + grace);
  for (const Child& c : children_) {
    if (c.running) SignalGroup(c.pid, SIGKILL);
  }
  WaitUntil(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  for (const Child& c : children_) {
    if (c.running) {
      std::fprintf(stderr, "osprey: %s (pid %d) did not die after SIGKILL\n", c.spec.name.c_str(),
                   static_cast<int>(c.pid));
    }
  }
}

void InstallStopSignalHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

int ReceivedStopSignal() { return g_stop_signal.load(); }

void ResetStopSignal() { g_stop_signal.store(0); }

std::string TailOfFile(const std::string& path, int n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > 65536 ? size - 65536 : 0;
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  size_t pos = text.size();
  for (int lines = 0; lines < n && pos != std::string::npos && pos > 0; ++lines) {
    pos = text.rfind('\n', pos - 1);
  }
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

}  // namespace osprey::tools
