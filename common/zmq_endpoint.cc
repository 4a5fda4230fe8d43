#include "common/zmq_endpoint.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>

namespace osprey {
namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

Status CheckZmqEndpoint(const std::string& endpoint) {
  if ((StartsWith(endpoint, "tcp://") || StartsWith(endpoint, "ipc://")) && endpoint.size() > 6) {
    return Status::OK();
  }
  if (StartsWith(endpoint, "inproc://")) {
    return InvalidArgument("zmq transport: '" + endpoint +
                           "' is an in-process endpoint; use transport kind \"inproc\"");
  }
  return InvalidArgument("zmq transport: unsupported endpoint '" + endpoint +
                         "' (want tcp://host:port or ipc://path)");
}

Status CheckIpcPathFree(const std::string& endpoint) {
  std::string path = endpoint.substr(6);
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("zmq transport: ipc path too long in '" + endpoint + "'");
  }
  if (::access(path.c_str(), F_OK) != 0) return Status::OK();
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::OK();
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (live) return Unavailable("zmq transport: address in use: " + endpoint);
  return Status::OK();
}

Status ZmqBindError(const std::string& endpoint, int err) {
  std::string why = zmq_strerror(err);
  switch (err) {
    case EADDRINUSE:
      return Unavailable("zmq transport: address in use: " + endpoint);
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
    case EADDRNOTAVAIL:
    case ENODEV:
    case ENAMETOOLONG:
      return InvalidArgument("zmq transport: cannot bind '" + endpoint + "': " + why);
    default:
      return Unavailable("zmq transport: cannot bind '" + endpoint + "': " + why);
  }
}

}  // namespace osprey
