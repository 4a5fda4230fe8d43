#include "coordinator/final_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace osprey::coordinator {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Unavailable(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status st = Errno("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    Status st = Errno("cannot flush", tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = Errno("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    return st;
  }
  return Status::OK();
}

Status WriteFinalState(const std::string& path, const proto::ClusterState& state) {
  return WriteFileAtomically(path, state.SerializeAsString());
}

StatusOr<proto::ClusterState> ReadFinalState(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("no final state file " + path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  proto::ClusterState state;
  if (!state.ParseFromString(bytes.str())) {
    return DataLoss("final state file " + path + " is not a valid ClusterState");
  }
  return state;
}

}  // namespace osprey::coordinator
