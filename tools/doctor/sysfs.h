// Small readers of /sys and /proc for the doctor's checks. Pure reads; thread-safe.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace osprey::tools::doctor {

// The file's contents with trailing whitespace removed; "" when it cannot be read.
inline std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Names in `dir` (no . and ..), sorted; empty when it cannot be read.
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A Linux cpu list ("0-3,8,10-11") as CPU numbers; empty for an empty or bad list.
inline std::vector<int> ParseCpuList(const std::string& list) {
  std::vector<int> cpus;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    const size_t dash = part.find('-');
    try {
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      for (int c = lo; c <= hi && c - lo < 65536; ++c) cpus.push_back(c);
    } catch (...) {
      return {};
    }
  }
  return cpus;
}

inline std::string JoinStrings(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace osprey::tools::doctor
