// What tests read from their environment and the file system, in one place: ctest sets
// OSPREY_BIN_DIR (the built binaries) and OSPREY_SOURCE_DIR (the source tree) for every test
// (tests/CMakeLists.txt). Tests read them only through these helpers.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace osprey::testing {

// The environment variable `name`, or `fallback` when it is not set.
inline std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// OSPREY_SOURCE_DIR, or null when it is not set (for tests that must fail without it).
inline const char* SourceDirFromEnv() { return std::getenv("OSPREY_SOURCE_DIR"); }

inline std::string BinDir() { return EnvOr("OSPREY_BIN_DIR", "build/bin"); }
inline std::string SourceDir() { return EnvOr("OSPREY_SOURCE_DIR", "."); }

// The whole file; "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace osprey::testing
