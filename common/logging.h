// Logging (spdlog) and OSPREY_CHECK for programmer bugs.
//
// Binaries call InitLogging once from main; library code logs through the OSPREY_LOG_* macros,
// which go to spdlog's default logger (stderr, "[time] [level] [role] message").
// OSPREY_CHECK(cond) aborts with file:line when an internal invariant is broken; it is never used
// for bad input, network or config errors -- those are Statuses.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

#include "common/status.h"

namespace osprey {

// level: trace|debug|info|warn|error|off. `role` tags every line (e.g. "server-1").
Status InitLogging(const std::string& level, const std::string& role);

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr);

}  // namespace osprey

#define OSPREY_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define OSPREY_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define OSPREY_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define OSPREY_LOG_ERROR(...) spdlog::error(__VA_ARGS__)

#define OSPREY_CHECK(cond)                                           \
  do {                                                               \
    if (!(cond)) ::osprey::CheckFailed(__FILE__, __LINE__, #cond);   \
  } while (0)
