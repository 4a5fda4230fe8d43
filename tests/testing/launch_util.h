// Helpers of the tests that run real binaries (`osprey launch ...`) and read what they wrote:
// where the binaries and the source tree are (ctest sets OSPREY_BIN_DIR and OSPREY_SOURCE_DIR),
// running a shell command, starting `osprey launch` and waiting (bounded) for it, reading a file,
// and reading values out of our flat JSON reports.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/test_env.h"  // BinDir, SourceDir, ReadFile

namespace osprey::testing {

// Runs `cmd` through the shell; its exit status, or -1 when it did not exit normally.
inline int RunCommand(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Starts the executable `path` with `args` (argv[1..]), its stdout and stderr both in `log_path`
// (created or truncated), and returns at once: the child's pid (-1 when fork failed).
inline pid_t SpawnLogged(const std::string& path, const std::vector<std::string>& args,
                         const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv{const_cast<char*>(path.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Starts `osprey launch SOURCE/configs/CONFIG --quiet --log-dir DIR/logs --report-json
// DIR/report.json ARGS...` (the binaries of BinDir()) with its stdout and stderr both in
// DIR/launch.out, and returns at once: the launcher's pid (-1 when fork failed).
inline pid_t StartLaunch(const std::string& config, const std::string& dir,
                         const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv = {BinDir() + "/osprey", "launch", SourceDir() + "/configs/" + config,
                                   "--quiet", "--log-dir", dir + "/logs", "--report-json", dir + "/report.json"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = dir + "/launch.out";
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    if (!std::freopen(out.c_str(), "w", stderr) || !std::freopen(out.c_str(), "a", stdout)) ::_exit(126);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  return pid;
}

// The exit code of `pid` once it exits; -1 when it died of a signal, or when it did not exit within
// `timeout` (it is then killed with SIGKILL and reaped).
inline int WaitLaunch(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds(600)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The number after "key": in a flat JSON object; NaN when missing (or null).
inline double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  std::regex re("\"" + key + "\"\\s*:\\s*([-+0-9.eE]+)");
  if (!std::regex_search(json, m, re)) return std::nan("");
  return std::stod(m[1]);
}

// The numbers of a flat JSON array value ("key": [1, 2, 3]); empty when missing.
inline std::vector<double> JsonArray(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)\\]"))) return {};
  std::vector<double> out;
  const std::string body = m[1];
  std::regex num("[-+0-9.eE]+");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), num); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod(it->str()));
  }
  return out;
}

}  // namespace osprey::testing
