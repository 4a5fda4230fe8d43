#include "bench/transport_raw/child_server.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <future>

namespace osprey::bench {
namespace {

// Reads one '\n'-terminated line from `fd`, waiting at most `timeout_ms` in total.
bool ReadLine(int fd, int timeout_ms, std::string* line) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char c;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = ::read(fd, &c, 1);
    if (n <= 0) return false;  // child exited before reporting
    if (c == '\n') return true;
    line->push_back(c);
  }
}

}  // namespace

double CpuSeconds(const rusage& u) {
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double ChildServer::CpuSecondsSoFar() const {
  clockid_t clock;
  timespec ts{};
  if (pid_ <= 0 || ::clock_getcpuclockid(pid_, &clock) != 0 || ::clock_gettime(clock, &ts) != 0) {
    return 0;
  }
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return CpuSeconds(u);
}

StatusOr<std::unique_ptr<ChildServer>> ChildServer::Start(ServeFn serve, bool in_process) {
  std::unique_ptr<ChildServer> cs(new ChildServer());
  if (in_process) {
    auto ready = std::make_shared<std::promise<std::string>>();
    std::future<std::string> endpoint = ready->get_future();
    ChildServer* raw = cs.get();
    cs->thread_ = std::thread([raw, serve = std::move(serve), ready] {
      raw->thread_rc_ = serve([&](const std::string& ep) { ready->set_value(ep); });
    });
    if (endpoint.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      cs->thread_.detach();  // a server that never bound cannot be told to quit
      return DeadlineExceeded("in-process echo server did not report its endpoint in 10 s");
    }
    cs->endpoint_ = endpoint.get();
    return cs;
  }
  int fds[2];
  if (::pipe(fds) != 0) return Internal("pipe() failed");
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Internal("fork() failed");
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    int wfd = fds[1];
    int rc = serve([wfd](const std::string& ep) {
      std::string line = ep + "\n";
      ssize_t n = ::write(wfd, line.data(), line.size());
      (void)n;
    });
    ::_exit(rc);
  }
  ::close(fds[1]);
  cs->pid_ = pid;
  bool ok = ReadLine(fds[0], 10000, &cs->endpoint_);
  ::close(fds[0]);
  if (!ok) return DeadlineExceeded("echo server child did not report its endpoint in 10 s");
  return cs;
}

Status ChildServer::Wait(double* cpu_seconds) {
  if (cpu_seconds != nullptr) *cpu_seconds = 0;
  if (thread_.joinable()) {
    thread_.join();
    return thread_rc_ == 0 ? Status::OK() : Internal("in-process echo server failed");
  }
  if (pid_ < 0) return Status::OK();
  for (int i = 0; i < 500; ++i) {
    int wstatus = 0;
    rusage usage{};
    pid_t r = ::wait4(pid_, &wstatus, WNOHANG, &usage);
    if (r == pid_) {
      pid_ = -1;
      if (cpu_seconds != nullptr) *cpu_seconds = CpuSeconds(usage);
      bool fine = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
      return fine ? Status::OK() : Internal("echo server child failed");
    }
    ::usleep(10000);
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return DeadlineExceeded("echo server child did not exit in 5 s; killed");
}

ChildServer::~ChildServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace osprey::bench
