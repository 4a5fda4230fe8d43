#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tools/commands.h"
#include "tools/paths.h"

namespace osprey::tools {
namespace {

constexpr char kPrefix[] = "osprey-bench-";

void ListAvailable(const std::string& bin_dir) {
  std::vector<std::string> found = ListBinaries(bin_dir, kPrefix);
  if (found.empty()) {
    std::fprintf(stderr, "no %s* binaries in %s (build the bench targets, or pass --bin-dir)\n",
                 kPrefix, bin_dir.c_str());
    return;
  }
  std::fprintf(stderr, "available in %s:\n", bin_dir.c_str());
  for (const std::string& name : found) {
    std::fprintf(stderr, "  osprey bench %s\n", name.c_str() + std::strlen(kPrefix));
  }
}

}  // namespace

int RunBench(const std::string& bin_dir, const std::string& what,
             const std::vector<std::string>& args) {
  if (what.empty() || what == "--help" || what == "-h") {
    std::fprintf(stderr, "usage: osprey bench WHAT [ARGS...] (runs osprey-bench-WHAT ARGS...)\n");
    ListAvailable(bin_dir);
    return what.empty() ? 2 : 0;
  }
  const std::string binary = bin_dir + "/" + kPrefix + what;
  if (what.find('/') != std::string::npos || !IsExecutable(binary)) {
    std::fprintf(stderr, "osprey bench: unknown benchmark '%s' (no %s)\n", what.c_str(),
                 binary.c_str());
    ListAvailable(bin_dir);
    return 2;
  }
  std::vector<std::string> argv_s{binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(binary.c_str(), argv.data());
  std::fprintf(stderr, "osprey bench: cannot run %s: %s\n", binary.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace osprey::tools
