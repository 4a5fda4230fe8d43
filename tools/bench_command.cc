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

// `--plot PNG` / `--plot=PNG` taken out of *args into *png; false when it has no value.
bool TakePlotFlag(std::vector<std::string>* args, std::string* png) {
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    if (a == "--plot") {
      if (i + 1 >= args->size()) return false;
      *png = (*args)[i + 1];
      args->erase(args->begin() + static_cast<long>(i), args->begin() + static_cast<long>(i) + 2);
      return true;
    }
    if (a.rfind("--plot=", 0) == 0) {
      *png = a.substr(7);
      args->erase(args->begin() + static_cast<long>(i));
      return true;
    }
  }
  return true;
}

// The value of --json in args, or "".
std::string JsonFlag(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json" && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind("--json=", 0) == 0) return args[i].substr(7);
  }
  return "";
}

int BenchAndPlot(const std::string& bin_dir, const std::string& binary, const std::string& what,
                 std::vector<std::string> args, const std::string& png,
                 const std::string& python) {
  if (what != "transport" && what != "codec" && what != "dlrm") {
    std::fprintf(stderr, "osprey bench: --plot draws transport, codec and dlrm results, not %s\n",
                 what.c_str());
    return 2;
  }
  std::string json = JsonFlag(args);
  if (json.empty()) {
    json = png + ".json";
    args.insert(args.end(), {"--json", json});
  }
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  if (int rc = RunAndWait(argv); rc != 0) {
    std::fprintf(stderr, "osprey bench: %s failed (exit %d); no plot\n", binary.c_str(), rc);
    return rc;
  }
  return RunPlot(bin_dir, python, what, json, png);
}

}  // namespace

int RunBench(const std::string& bin_dir, const std::string& what,
             const std::vector<std::string>& args_in, const std::string& python) {
  std::vector<std::string> args = args_in;
  std::string png;
  if (!TakePlotFlag(&args, &png) || (png.empty() && args.size() != args_in.size())) {
    std::fprintf(stderr, "osprey bench: --plot needs a PNG path\n");
    return 2;
  }
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
  if (!png.empty()) return BenchAndPlot(bin_dir, binary, what, args, png, python);
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
