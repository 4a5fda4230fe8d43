// Where `osprey` finds things on this machine: its own bin dir, programs on PATH, and the
// osprey-* binaries next to it. Reads the file system only; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace osprey::tools {

// The directory of /proc/self/exe ("" when it cannot be read).
std::string SelfBinDir();

// True when `path` is a regular file this user may execute.
bool IsExecutable(const std::string& path);

// The full path of `name` on $PATH, or "".
std::string FindOnPath(const std::string& name);

// Executable files in `dir` whose names start with `prefix`, sorted.
std::vector<std::string> ListBinaries(const std::string& dir, const std::string& prefix);

}  // namespace osprey::tools
