#include "server/checkpoint_cut.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "osprey.pb.h"
#include "server/checkpoint.h"

namespace osprey::server {
namespace {

// Reads up to `n` bytes at `offset`; returns how many were read.
StatusOr<size_t> ReadAt(int fd, char* out, size_t n, off_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Internal("read " + path + ": " + std::strerror(errno));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace

std::string PreviousCutDir(const std::string& dir) { return dir + "/previous-cut"; }

Status KeepPreviousCut(const std::string& dir, const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return Status::OK();
  const std::string prev_dir = PreviousCutDir(dir);
  std::error_code ec;
  std::filesystem::create_directories(prev_dir, ec);
  if (ec) return Internal("cannot create " + prev_dir + ": " + ec.message());
  const std::string prev = prev_dir + "/" + std::filesystem::path(path).filename().string();
  const std::string tmp = prev + ".tmp";
  ::unlink(tmp.c_str());
  if (::link(path.c_str(), tmp.c_str()) != 0) {
    return Internal("link " + path + " -> " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), prev.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Internal("rename " + tmp + " -> " + prev + ": " + std::strerror(errno));
  }
  return Status::OK();
}

Status ReadWholeFile(const std::string& path, std::string* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open checkpoint " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Internal("stat " + path + ": " + std::strerror(errno));
  }
  bytes->resize(static_cast<size_t>(st.st_size));
  StatusOr<size_t> n = ReadAt(fd, bytes->data(), bytes->size(), 0, path);
  ::close(fd);
  if (!n.ok()) return n.status();
  bytes->resize(*n);  // a shorter file is reported truncated by the parser
  return Status::OK();
}

StatusOr<int64_t> CheckpointClock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open checkpoint " + path + ": " + std::strerror(errno));
  char head[16];
  StatusOr<size_t> n = ReadAt(fd, head, sizeof(head), 0, path);
  uint32_t header_bytes = 0;
  std::string header;
  if (n.ok() && *n == sizeof(head) && std::memcmp(head, "OSPRCKPT", 8) == 0) {
    std::memcpy(&header_bytes, head + 12, 4);
    if (header_bytes < (1u << 26)) {
      header.resize(header_bytes);
      n = ReadAt(fd, header.data(), header.size(), sizeof(head), path);
    }
  }
  ::close(fd);
  if (!n.ok()) return n.status();
  proto::CheckpointHeader h;
  if (header.size() != header_bytes || header.empty() || *n != header.size() ||
      !h.ParseFromString(header)) {
    return DataLoss("checkpoint " + path + ": unreadable header");
  }
  return static_cast<int64_t>(h.clock());
}

StatusOr<int64_t> ConsistentCut(const std::string& dir, int n) {
  std::vector<std::vector<int64_t>> clocks(static_cast<size_t>(n));
  std::string seen;
  for (int r = 0; r < n; ++r) {
    const std::string name = std::filesystem::path(CheckpointPath(dir, r, n)).filename().string();
    seen += (r ? "; server " : "server ") + std::to_string(r) + ":";
    for (const std::string& d : {dir, PreviousCutDir(dir)}) {
      const std::string path = d + "/" + name;
      if (::access(path.c_str(), F_OK) != 0) continue;
      OSPREY_ASSIGN_OR_RETURN(int64_t c, CheckpointClock(path));
      clocks[r].push_back(c);
      seen += " " + std::to_string(c);
    }
  }
  int64_t best = -1;
  for (int64_t c : clocks.empty() ? std::vector<int64_t>{} : clocks[0]) {
    if (c <= 0 || c <= best) continue;
    bool everywhere = true;
    for (const auto& cs : clocks) {
      everywhere = everywhere && std::find(cs.begin(), cs.end(), c) != cs.end();
    }
    if (everywhere) best = c;
  }
  if (best < 0) {
    return FailedPrecondition("checkpoint " + dir + " holds no bsp cut that every one of the " +
                              std::to_string(n) + " servers has (clocks: " + seen +
                              "); cannot roll back");
  }
  return best;
}

StatusOr<std::string> CutFile(const std::string& dir, int rank, int n, int64_t clock) {
  const std::string name = std::filesystem::path(CheckpointPath(dir, rank, n)).filename().string();
  for (const std::string& d : {dir, PreviousCutDir(dir)}) {
    const std::string path = d + "/" + name;
    if (::access(path.c_str(), F_OK) != 0) continue;
    OSPREY_ASSIGN_OR_RETURN(int64_t c, CheckpointClock(path));
    if (c == clock) return path;
  }
  return FailedPrecondition("checkpoint " + dir + " has no file of server " + std::to_string(rank) +
                            " at cut clock " + std::to_string(clock) + " (nor in " +
                            PreviousCutDir(dir) + "); cannot roll back");
}

}  // namespace osprey::server
