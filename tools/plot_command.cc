// `osprey plot REPORT.json OUT.png` and `osprey bench WHAT ... --plot OUT.png`: run the plot
// script (bench/plot/plot.py, copied next to the binaries as osprey-plot.py) with `python`.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tools/commands.h"
#include "tools/paths.h"

namespace osprey::tools {

int RunAndWait(const std::vector<std::string>& argv_s) {
  std::vector<char*> argv;
  std::vector<std::string> copy = argv_s;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "osprey: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "osprey: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int RunPlot(const std::string& bin_dir, const std::string& python, const std::string& kind,
            const std::string& input, const std::string& png) {
  const std::string script = bin_dir + "/osprey-plot.py";
  if (::access(script.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "osprey plot: no %s (it is copied there from bench/plot/plot.py at "
                 "configure time)\n", script.c_str());
    return 2;
  }
  const int rc = RunAndWait({python.empty() ? "python3" : python, script, kind, input, png});
  if (rc == 3) {
    std::fprintf(stderr, "osprey plot: no plot drawn (matplotlib is optional; see above)\n");
  }
  return rc;
}

}  // namespace osprey::tools
