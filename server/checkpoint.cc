#include "server/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

#include "common/placement.h"
#include "server/checkpoint_cut.h"
#include "server/crc32c.h"

namespace osprey::server {
namespace {

constexpr char kMagic[8] = {'O', 'S', 'P', 'R', 'C', 'K', 'P', 'T'};
constexpr uint32_t kBlockMagic = 0x4B4F4C42;  // "BLOK"
constexpr uint32_t kEndMagic = 0x43444E45;    // "ENDC"
constexpr uint32_t kStateMagic = 0x45444953;  // "SIDE"
constexpr size_t kRecordsPerBlock = 4096;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Sequential reader over a file's bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}
  template <typename T>
  Status Get(T* v, const char* what) {
    if (b_.size() - pos_ < sizeof(T)) return Truncated(what);
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::OK();
  }
  Status Skip(size_t n, const char* what) {
    if (b_.size() - pos_ < n) return Truncated(what);
    pos_ += n;
    return Status::OK();
  }
  const char* at(size_t pos) const { return b_.data() + pos; }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == b_.size(); }
  Status Corrupt(const std::string& what) const {
    return DataLoss("checkpoint " + path_ + ": " + what + " at byte " + std::to_string(pos_) +
                    "; refusing to restore");
  }

 private:
  Status Truncated(const char* what) const {
    return DataLoss("checkpoint " + path_ + " is truncated (" + what + " at byte " +
                    std::to_string(pos_) + " of " + std::to_string(b_.size()) +
                    "); refusing to restore");
  }
  const std::string& b_;
  const std::string& path_;
  size_t pos_ = 0;
};

Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Internal("write " + path + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

void AppendBlock(std::string* out, uint32_t table, uint32_t records, const std::string& payload,
                 uint32_t magic = kBlockMagic) {
  size_t start = out->size();
  Put(out, magic);
  Put(out, table);
  Put(out, records);
  Put(out, uint32_t{0});
  Put(out, uint64_t{payload.size()});
  out->append(payload);
  uint32_t crc = Crc32c(0, out->data() + start, out->size() - start);
  Put(out, crc);
}

bool SameSpec(const proto::TableSpec& a, const proto::TableSpec& b) {
  return a.name() == b.name() && a.type() == b.type() && a.dim() == b.dim() &&
         a.size() == b.size() && a.chunk_floats() == b.chunk_floats();
}

// One parsed, verified file: the header and where each block's payload is.
struct ParsedFile {
  std::string path;
  std::string bytes;
  proto::CheckpointHeader header;
  struct Block {
    uint32_t table;
    uint32_t records;
    size_t payload;  // offset in bytes
  };
  std::vector<Block> blocks;
  std::vector<std::pair<uint32_t, std::string>> states;  // (table, payload) of SIDE blocks
};

Status ParseFile(const std::string& path, ParsedFile* f) {
  f->path = path;
  OSPREY_RETURN_IF_ERROR(ReadWholeFile(path, &f->bytes));  // checkpoint_cut.h: one sized read
  Reader r(f->bytes, f->path);
  char magic[8];
  OSPREY_RETURN_IF_ERROR(r.Get(&magic, "magic"));
  if (std::memcmp(magic, kMagic, 8) != 0) return r.Corrupt("not an Osprey checkpoint (bad magic)");
  uint32_t version = 0, header_bytes = 0, crc = 0;
  OSPREY_RETURN_IF_ERROR(r.Get(&version, "format version"));
  if (version < kCheckpointOldestFormatVersion || version > kCheckpointFormatVersion) {
    return FailedPrecondition("checkpoint " + path + " has format version " +
                              std::to_string(version) + "; this build reads versions " +
                              std::to_string(kCheckpointOldestFormatVersion) + " to " +
                              std::to_string(kCheckpointFormatVersion) + "; refusing to restore");
  }
  OSPREY_RETURN_IF_ERROR(r.Get(&header_bytes, "header size"));
  size_t hpos = r.pos();
  OSPREY_RETURN_IF_ERROR(r.Skip(header_bytes, "header"));
  OSPREY_RETURN_IF_ERROR(r.Get(&crc, "header checksum"));
  if (Crc32c(0, r.at(hpos), header_bytes) != crc) return r.Corrupt("header checksum mismatch");
  if (!f->header.ParseFromArray(r.at(hpos), static_cast<int>(header_bytes))) {
    return r.Corrupt("unreadable header");
  }
  uint64_t total = 0;
  while (true) {
    size_t start = r.pos();
    uint32_t magic32 = 0;
    OSPREY_RETURN_IF_ERROR(r.Get(&magic32, "block"));
    if (magic32 == kEndMagic) {
      uint32_t zero = 0;
      uint64_t records = 0;
      OSPREY_RETURN_IF_ERROR(r.Get(&zero, "end block"));
      OSPREY_RETURN_IF_ERROR(r.Get(&records, "end block"));
      OSPREY_RETURN_IF_ERROR(r.Get(&crc, "end block checksum"));
      if (Crc32c(0, r.at(start), 16) != crc) return r.Corrupt("end block checksum mismatch");
      if (records != total) return r.Corrupt("end block counts " + std::to_string(records) + " records, blocks hold " + std::to_string(total));
      if (!r.done()) return r.Corrupt("bytes after the end block");
      return Status::OK();
    }
    if (magic32 == kStateMagic && version >= 2) {
      uint32_t table = 0, zero = 0;
      uint64_t payload_bytes = 0;
      OSPREY_RETURN_IF_ERROR(r.Get(&table, "state block header"));
      OSPREY_RETURN_IF_ERROR(r.Get(&zero, "state block header"));
      OSPREY_RETURN_IF_ERROR(r.Get(&zero, "state block header"));
      OSPREY_RETURN_IF_ERROR(r.Get(&payload_bytes, "state block header"));
      const size_t payload = r.pos();
      OSPREY_RETURN_IF_ERROR(r.Skip(payload_bytes, "state block payload"));
      OSPREY_RETURN_IF_ERROR(r.Get(&crc, "state block checksum"));
      if (Crc32c(0, r.at(start), r.pos() - 4 - start) != crc) return r.Corrupt("state block checksum mismatch");
      if (table >= static_cast<uint32_t>(f->header.tables_size())) return r.Corrupt("state block of unknown table");
      f->states.emplace_back(table, std::string(r.at(payload), payload_bytes));
      continue;
    }
    if (magic32 != kBlockMagic) return r.Corrupt("bad block marker");
    ParsedFile::Block b;
    uint32_t zero = 0;
    uint64_t payload_bytes = 0;
    OSPREY_RETURN_IF_ERROR(r.Get(&b.table, "block header"));
    OSPREY_RETURN_IF_ERROR(r.Get(&b.records, "block header"));
    OSPREY_RETURN_IF_ERROR(r.Get(&zero, "block header"));
    OSPREY_RETURN_IF_ERROR(r.Get(&payload_bytes, "block header"));
    b.payload = r.pos();
    OSPREY_RETURN_IF_ERROR(r.Skip(payload_bytes, "block payload"));
    OSPREY_RETURN_IF_ERROR(r.Get(&crc, "block checksum"));
    if (Crc32c(0, r.at(start), r.pos() - 4 - start) != crc) return r.Corrupt("block checksum mismatch");
    if (b.table >= static_cast<uint32_t>(f->header.tables_size())) return r.Corrupt("block of unknown table");
    // Walk the records so that a payload whose records overrun it is caught here.
    size_t pos = b.payload, end = b.payload + payload_bytes;
    for (uint32_t i = 0; i < b.records; ++i) {
      uint32_t floats = 0;
      if (end - pos < 16) return r.Corrupt("record header past its block");
      std::memcpy(&floats, f->bytes.data() + pos + 8, 4);
      pos += 16;
      if ((end - pos) / sizeof(float) < floats) return r.Corrupt("record past its block");
      pos += size_t{floats} * sizeof(float);
    }
    if (pos != end) return r.Corrupt("block payload size disagrees with its records");
    total += b.records;
    f->blocks.push_back(b);
  }
}

// Calls fn(table, key, floats, data) for every record of f.
template <typename Fn>
Status ForEachRecord(const ParsedFile& f, Fn&& fn) {
  for (const ParsedFile::Block& b : f.blocks) {
    size_t pos = b.payload;
    for (uint32_t i = 0; i < b.records; ++i) {
      uint64_t key = 0;
      uint32_t floats = 0;
      std::memcpy(&key, f.bytes.data() + pos, 8);
      std::memcpy(&floats, f.bytes.data() + pos + 8, 4);
      pos += 16;
      // Record data may sit at any byte offset; the store copies it with memcpy.
      OSPREY_RETURN_IF_ERROR(
          fn(b.table, key, floats, reinterpret_cast<const float*>(f.bytes.data() + pos)));
      pos += size_t{floats} * sizeof(float);
    }
  }
  return Status::OK();
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank, int num_servers) {
  return dir + "/server-" + std::to_string(rank) + "-of-" + std::to_string(num_servers) + ".ckpt";
}

StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                      const Store& store) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create checkpoint directory " + dir + ": " + ec.message());
  proto::CheckpointHeader h;
  h.set_format_version(kCheckpointFormatVersion);
  h.set_epoch(meta.epoch);
  h.set_server_rank(meta.rank);
  h.set_num_servers(meta.num_servers);
  for (const auto& t : meta.tables) *h.add_tables() = t;
  for (uint64_t v : meta.versions) h.add_versions(v);
  for (const auto& o : meta.optimizers) h.add_optimizers(o);
  h.set_clock(meta.clock);
  std::string out(kMagic, 8);
  std::string hb = h.SerializeAsString();
  Put(&out, kCheckpointFormatVersion);
  Put(&out, static_cast<uint32_t>(hb.size()));
  out += hb;
  Put(&out, Crc32c(0, hb.data(), hb.size()));
  uint64_t total = 0;
  std::string payload;
  for (size_t t = 0; t < meta.tables.size(); ++t) {
    uint32_t records = 0;
    auto flush = [&] {
      if (records == 0) return;
      AppendBlock(&out, static_cast<uint32_t>(t), records, payload);
      total += records;
      records = 0;
      payload.clear();
    };
    OSPREY_RETURN_IF_ERROR(store.ExportRecords(
        static_cast<uint32_t>(t), [&](uint64_t key, const float* data, size_t floats) {
          Put(&payload, key);
          Put(&payload, static_cast<uint32_t>(floats));
          Put(&payload, uint32_t{0});
          payload.append(reinterpret_cast<const char*>(data), floats * sizeof(float));
          if (++records == kRecordsPerBlock) flush();
          return Status::OK();
        }));
    flush();
  }
  for (size_t t = 0; t < meta.table_states.size(); ++t) {
    if (meta.table_states[t].empty()) continue;
    AppendBlock(&out, static_cast<uint32_t>(t), 0, meta.table_states[t], kStateMagic);
  }
  size_t end = out.size();
  Put(&out, kEndMagic);
  Put(&out, uint32_t{0});
  Put(&out, total);
  Put(&out, Crc32c(0, out.data() + end, 16));

  std::string path = CheckpointPath(dir, meta.rank, meta.num_servers);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create " + tmp + ": " + std::strerror(errno));
  Status s = WriteAll(fd, out, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Internal("fsync " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  // A bsp cut keeps the cut before it (checkpoint_cut.h) until the next is complete everywhere.
  if (s.ok() && meta.clock > 0) s = KeepPreviousCut(dir, path);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Internal("rename " + tmp + " -> " + path + ": " + std::strerror(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return path;
}

namespace {

// The server count N of the server-R-of-N files in `dir`, every one of 0..N-1 present.
StatusOr<int> CheckpointFiles(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    return NotFound("checkpoint directory " + dir + " does not exist or is not a directory");
  }
  static const std::regex kName(R"(server-(\d+)-of-(\d+)\.ckpt)");
  int n = -1;
  std::vector<bool> seen;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, kName)) continue;
    int rank = std::stoi(m[1]), of = std::stoi(m[2]);
    if (n != -1 && of != n) {
      return FailedPrecondition("checkpoint " + dir + " mixes files of " + std::to_string(n) +
                                " and " + std::to_string(of) + " servers; refusing to restore");
    }
    n = of;
    seen.resize(n, false);
    if (rank < n) seen[rank] = true;
  }
  if (ec) return NotFound("cannot read checkpoint directory " + dir + ": " + ec.message());
  if (n <= 0) return NotFound("no checkpoint files (server-R-of-N.ckpt) in " + dir);
  for (int r = 0; r < n; ++r) {
    if (!seen[r]) return FailedPrecondition("checkpoint " + dir + " lacks " + CheckpointPath(dir, r, n) + "; refusing to restore");
  }
  return n;
}

// Whether server current.rank of current.num_servers owns record `key` of `table`.
bool Owns(const CheckpointMeta& current, uint32_t table, uint64_t key) {
  const proto::TableSpec& spec = current.tables[table];
  int owner = spec.type() == proto::TABLE_SPARSE ? ServerForKey(table, key, current.num_servers)
                                                 : ServerForChunk(table, key, current.num_servers);
  return owner == current.rank;
}

// Verifies parsed file f (server r of n) against the running job and this server's layout.
Status VerifyFile(const ParsedFile& f, int r, int n, const CheckpointMeta& current,
                  const Store& store) {
  const proto::CheckpointHeader& h = f.header;
  if (h.num_servers() != n || h.server_rank() != r) {
    return FailedPrecondition("checkpoint " + f.path + " says it is server " +
                              std::to_string(h.server_rank()) + " of " +
                              std::to_string(h.num_servers()) + "; refusing to restore");
  }
  if (h.tables_size() != static_cast<int>(current.tables.size())) {
    return FailedPrecondition("checkpoint " + f.path + " has " + std::to_string(h.tables_size()) +
                              " tables, the job has " + std::to_string(current.tables.size()));
  }
  for (int t = 0; t < h.tables_size(); ++t) {
    if (!SameSpec(h.tables(t), current.tables[t]) ||
        (t < h.optimizers_size() && t < static_cast<int>(current.optimizers.size()) &&
         h.optimizers(t) != current.optimizers[t])) {
      return FailedPrecondition("checkpoint " + f.path + ": table " + std::to_string(t) + " ('" +
                                h.tables(t).name() + "') differs from the job's table '" +
                                current.tables[t].name() +
                                "' (name, type, dim, size, chunking or optimizer)");
    }
  }
  return ForEachRecord(f, [&](uint32_t t, uint64_t key, uint32_t floats, const float*) -> Status {
    if (!Owns(current, t, key)) return Status::OK();
    size_t want = store.RecordFloats(t, key);
    if (floats != want) {
      return FailedPrecondition("checkpoint " + f.path + ": record " + std::to_string(key) +
                                " of table '" + current.tables[t].name() + "' has " +
                                std::to_string(floats) + " floats, this server needs " +
                                std::to_string(want));
    }
    return Status::OK();
  });
}

}  // namespace

namespace {

// Restores from files[r] = the path of server r's file (of n; one entry when only this server's
// own file is read, `own_rank` then its rank).
StatusOr<std::vector<uint64_t>> RestoreFiles(const std::vector<std::string>& paths, int n,
                                             int own_rank, const CheckpointMeta& current,
                                             Store* store, RestoreInfo* info) {
  // Pass 1: read and verify everything; nothing is imported before all files passed.
  using SteadyClock = std::chrono::steady_clock;
  auto since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  double read_s = 0, verify_s = 0;
  std::vector<ParsedFile> files(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const int r = paths.size() == 1 && own_rank >= 0 ? own_rank : static_cast<int>(i);
    auto t0 = SteadyClock::now();
    OSPREY_RETURN_IF_ERROR(ParseFile(paths[i], &files[i]));
    read_s += since(t0);
    t0 = SteadyClock::now();
    OSPREY_RETURN_IF_ERROR(VerifyFile(files[i], r, n, current, *store));
    verify_s += since(t0);
  }
  const auto import_start = SteadyClock::now();
  // Pass 2: import what this server owns.
  if (info != nullptr) {
    info->files = n;
    info->files_read = static_cast<int>(paths.size());
    info->min_clock = files[0].header.clock();
    info->max_clock = files[0].header.clock();
    for (const ParsedFile& f : files) {
      info->min_clock = std::min<int64_t>(info->min_clock, f.header.clock());
      info->max_clock = std::max<int64_t>(info->max_clock, f.header.clock());
    }
  }
  std::vector<uint64_t> versions(current.tables.size(), 0);
  if (info != nullptr) {
    info->table_states.assign(current.tables.size(), std::vector<std::string>(n));
    for (size_t i = 0; i < files.size(); ++i) {
      const int r = files[i].header.server_rank();
      for (auto& [t, state] : files[i].states) info->table_states[t][r] = std::move(state);
    }
  }
  // Size the index once: this server's file's records (same server count), else an even share.
  std::vector<uint64_t> expect(current.tables.size(), 0);
  for (const ParsedFile& f : files) {
    const bool own = n == current.num_servers && static_cast<int>(f.header.server_rank()) == current.rank;
    for (const ParsedFile::Block& b : f.blocks) {
      if (b.table >= expect.size()) continue;
      expect[b.table] += n == current.num_servers ? (own ? b.records : 0)
                                                  : b.records / std::max(1, current.num_servers);
    }
  }
  for (size_t t = 0; t < expect.size(); ++t) store->ReserveRecords(static_cast<uint32_t>(t), expect[t]);
  for (const ParsedFile& f : files) {
    for (int t = 0; t < f.header.versions_size() && t < static_cast<int>(versions.size()); ++t) {
      versions[t] = std::max(versions[t], f.header.versions(t));
    }
    OSPREY_RETURN_IF_ERROR(ForEachRecord(f, [&](uint32_t t, uint64_t key, uint32_t floats,
                                                const float* data) -> Status {
      return Owns(current, t, key) ? store->ImportRecord(t, key, data, floats) : Status::OK();
    }));
  }
  if (info != nullptr) {
    info->read_seconds = read_s;
    info->verify_seconds = verify_s;
    info->import_seconds = since(import_start);
    for (const ParsedFile& f : files) info->bytes += f.bytes.size();
  }
  return versions;
}

}  // namespace

StatusOr<std::vector<uint64_t>> RestoreCheckpoint(const std::string& dir,
                                                  const CheckpointMeta& current, Store* store,
                                                  RestoreInfo* info) {
  OSPREY_ASSIGN_OR_RETURN(const int n, CheckpointFiles(dir));
  std::vector<std::string> paths;
  for (int r = 0; r < n; ++r) paths.push_back(CheckpointPath(dir, r, n));
  return RestoreFiles(paths, n, -1, current, store, info);
}

StatusOr<std::vector<uint64_t>> RestoreOwnCheckpointFile(const std::string& path,
                                                         const CheckpointMeta& current,
                                                         Store* store, RestoreInfo* info) {
  return RestoreFiles({path}, current.num_servers, current.rank, current, store, info);
}

StatusOr<std::vector<uint64_t>> RestoreReplacementCheckpoint(const std::string& dir,
                                                             const CheckpointMeta& current,
                                                             Store* store, RestoreInfo* info) {
  OSPREY_ASSIGN_OR_RETURN(const int n, CheckpointFiles(dir));
  if (n != current.num_servers) return RestoreCheckpoint(dir, current, store, info);
  return RestoreOwnCheckpointFile(CheckpointPath(dir, current.rank, n), current, store, info);
}

}  // namespace osprey::server
