#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdio>
#include <cstdlib>

namespace osprey {

Status InitLogging(const std::string& level, const std::string& role) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return InvalidArgument("log level '" + level +
                           "' is not one of trace, debug, info, warn, error, off");
  }
  auto logger = spdlog::stderr_logger_mt("osprey-" + role);
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] [" + role + "] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return Status::OK();
}

void CheckFailed(const char* file, int line, const char* expr) {
  std::fprintf(stderr, "%s:%d: OSPREY_CHECK failed: %s\n", file, line, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace osprey
