// Helpers of the tests that run real binaries (`osprey launch ...`) and read what they wrote:
// where the binaries and the source tree are (ctest sets OSPREY_BIN_DIR and OSPREY_SOURCE_DIR),
// running a shell command, reading a file, and reading values out of our flat JSON reports.
#pragma once

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/test_env.h"  // BinDir, SourceDir, ReadFile

namespace osprey::testing {

// Runs `cmd` through the shell; its exit status, or -1 when it did not exit normally.
inline int RunCommand(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
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
