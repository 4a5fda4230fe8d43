#include "tools/worker_command.h"

#include <cstdlib>

#include "tools/paths.h"

namespace osprey::tools {
namespace {

// `name` as an executable path: as it is when it has a '/', else the first match in PATH.
StatusOr<std::string> ResolveExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (IsExecutable(name)) return name;
    return NotFound("worker.command: " + name + " is not an executable file");
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (IsExecutable(candidate)) return candidate;
    start = end + 1;
  }
  return NotFound("worker.command: " + name + " was not found in PATH");
}

}  // namespace

StatusOr<ChildSpec> WorkerCommandSpec(const std::vector<std::string>& command, int rank, int world_size,
                                      const std::string& config_path, const std::vector<std::string>& sets,
                                      const std::string& coordinator, const std::string& log_path) {
  if (command.empty()) return InvalidArgument("worker.command is empty");
  OSPREY_ASSIGN_OR_RETURN(std::string binary, ResolveExecutable(command[0]));
  ChildSpec spec;
  spec.name = "worker-" + std::to_string(rank);
  spec.binary = binary;
  spec.args.assign(command.begin() + 1, command.end());
  spec.log_path = log_path;
  std::string joined;
  for (const std::string& s : sets) joined += (joined.empty() ? "" : "\n") + s;
  spec.env = {"OSPREY_CONFIG=" + config_path, "OSPREY_SETS=" + joined, "OSPREY_COORDINATOR=" + coordinator,
              "OSPREY_RANK=" + std::to_string(rank), "OSPREY_WORLD_SIZE=" + std::to_string(world_size)};
  return spec;
}

}  // namespace osprey::tools
