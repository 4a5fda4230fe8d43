// Helpers for tests that run real processes: temp dirs, running a binary with its output in
// files, bounded waits for exit, and checking that a pid is gone.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "tests/testing/test_env.h"
#include <vector>

namespace osprey::tools::testing {

// A fresh directory under /tmp, removed at scope exit unless the test failed (then its logs are
// kept for a look).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/osprey-test-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    path_ = dir ? dir : "";
    if (path_.empty()) ADD_FAILURE() << "mkdtemp failed";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty() && !::testing::Test::HasFailure()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using ::osprey::testing::ReadFile;

// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
inline bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

// Waits up to `timeout` for every pid to be gone.
inline bool AllGone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    bool all = true;
    for (pid_t p : pids) all = all && ProcessGone(p);
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A process started by the test, stdout and stderr in files.
struct Proc {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
};

inline Proc Spawn(const std::vector<std::string>& argv, const std::string& dir) {
  Proc p{-1, dir + "/stdout.txt", dir + "/stderr.txt"};
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  p.pid = ::fork();
  if (p.pid == 0) {
    int out = ::open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(120);
    ::execv(cargv[0], cargv.data());
    ::_exit(121);
  }
  return p;
}

// The wait status once `pid` exited, or nullopt after `timeout` (the process is then killed).
inline std::optional<int> WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

// The pids the launcher wrote to LOG_DIR/pids.txt ("<name> <pid>" lines).
inline std::vector<std::pair<std::string, pid_t>> ReadPids(const std::string& log_dir) {
  std::vector<std::pair<std::string, pid_t>> pids;
  std::ifstream in(log_dir + "/pids.txt");
  std::string name;
  pid_t pid;
  while (in >> name >> pid) pids.emplace_back(name, pid);
  return pids;
}

using ::osprey::testing::EnvOr;

}  // namespace osprey::tools::testing
