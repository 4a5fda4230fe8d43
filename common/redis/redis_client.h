// RedisClient: a pipelined Redis client on hiredis 0.14 (Debian 12's), for one node or a Redis
// Cluster. Debian has no C/C++ cluster client (hiredis-cluster needs hiredis >= 1.0), so the
// cluster part is hand-written here: CRC16-XMODEM slots with hash tags, a slot map read with
// CLUSTER SLOTS, one pipelined connection per master, MOVED / ASK redirections, and retries with
// backoff on TRYAGAIN / CLUSTERDOWN / connection errors.
//
//   OSPREY_ASSIGN_OR_RETURN(auto client, RedisClient::Connect(options));
//   std::vector<Reply> replies;
//   OSPREY_RETURN_IF_ERROR(client->Execute({{{"SET", key, blob}}, {{"GET", key}}}, &replies));
//
// Errors: a Redis error reply (WRONGTYPE, a function's error, ...) is a Reply of kError, not a
// failed Status. The Status fails only when a batch could not be delivered: Unavailable (naming
// the endpoint) when a node cannot be reached within max_retries, DeadlineExceeded when a node
// did not answer within io_timeout_ms, PermissionDenied on a refused AUTH, InvalidArgument on bad
// input (an empty command, a key_index past the arguments).
//
// Thread-safety: a RedisClient may be called from several threads; calls are serialized by an
// internal mutex (one batch in flight per client). Use one client per thread for parallelism.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace osprey::redis {

struct Endpoint {
  std::string host;
  int port = 6379;
  std::string ToString() const;  // "host:port"
  bool operator==(const Endpoint& o) const { return host == o.host && port == o.port; }
};

// "host:port,host:port" -> endpoints (InvalidArgument naming the bad entry). Spaces around
// entries are ignored; a missing port means 6379; an empty list is refused.
StatusOr<std::vector<Endpoint>> ParseEndpoints(const std::string& list);

struct RedisOptions {
  std::vector<Endpoint> seeds;        // one node, or the seed nodes of a cluster
  bool cluster = false;               // route by slot (CRC16-XMODEM, hash tags, MOVED/ASK)
  std::string user;                   // ACL user ("" = default user)
  std::string password;               // AUTH ("" = none)
  int connect_timeout_ms = 2000;
  int io_timeout_ms = 5000;
  int max_retries = 5;                // per command batch, on connection errors/TRYAGAIN/CLUSTERDOWN
  int backoff_ms = 50;                // doubled per retry, capped at 2 s
};

// A reply, copied out of hiredis (binary-safe).
struct Reply {
  enum class Type { kString, kStatus, kInteger, kNil, kArray, kError };
  Type type = Type::kNil;
  std::string str;              // kString / kStatus / kError
  long long integer = 0;        // kInteger
  std::vector<Reply> elements;  // kArray
  bool is_error() const { return type == Type::kError; }
  bool is_nil() const { return type == Type::kNil; }
  std::string DebugString() const;  // for logs and test failures; strings are truncated
};

// One command: binary-safe arguments (argv). `key_index`: which argument is the key that routes
// it in cluster mode (1 for GET/SET/HSET..., 3 for FCALL name numkeys key...; -1 = any node).
// `resp`: when not empty, the whole command already in the Redis protocol (RespWriter) and sent
// as is; `args` then holds only its leading arguments (name ... key), for routing and messages.
// The store's row writes use it: one buffer per command instead of a string per argument.
struct Command {
  Command(std::vector<std::string> a = {}, int key = 1, std::string r = {})  // NOLINT: implicit
      : args(std::move(a)), key_index(key), resp(std::move(r)) {}
  std::vector<std::string> args;
  int key_index = 1;
  std::string resp;
};

// Writes a command in the Redis protocol (RESP arrays of bulk strings) into `out`:
//   RespWriter w(&c.resp, 2 + 2 * n); w.Arg("HSET"); w.Arg(key); for (...) { w.Arg(f); w.Arg(v); }
// The argument count is given up front; Arg must then be called exactly that many times.
class RespWriter {
 public:
  RespWriter(std::string* out, size_t nargs) : out_(out) { Header('*', nargs); }
  void Arg(const char* data, size_t len) {
    Header('$', len);
    out_->append(data, len);
    out_->append("\r\n", 2);
  }
  void Arg(const std::string& s) { Arg(s.data(), s.size()); }
  // One argument made of two byte ranges back to back (e.g. a row's floats, then its versions).
  void Arg(const char* a, size_t la, const char* b, size_t lb) {
    Header('$', la + lb);
    out_->append(a, la);
    out_->append(b, lb);
    out_->append("\r\n", 2);
  }
  // A decimal unsigned integer argument, formatted in place (no temporary string).
  void ArgU64(uint64_t v);

 private:
  void Header(char kind, size_t n);
  std::string* out_;
};

// CRC16-XMODEM (poly 0x1021, init 0) of `data`, as the Redis Cluster spec defines it.
uint16_t Crc16(const char* data, size_t len);

class NodeConnection;  // common/redis/node_connection.h
class SlotMap;         // common/redis/slot_map.h

class RedisClient {
 public:
  static constexpr int kNumSlots = 16384;

  // Connects to the seeds (single node: the first seed; cluster: the first seed that answers
  // CLUSTER SLOTS, then every master), authenticating when a password is set. Unavailable naming
  // the endpoint when none can be reached; PermissionDenied when AUTH is refused;
  // InvalidArgument for bad options (no seeds, non-positive timeouts).
  static StatusOr<std::unique_ptr<RedisClient>> Connect(const RedisOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends every command pipelined (in cluster mode grouped per owning master, one pipelined
  // round per node), follows MOVED (refresh the slot map, resend) and ASK (ASKING + resend once),
  // retries TRYAGAIN/CLUSTERDOWN/connection errors with backoff up to max_retries, and returns
  // one reply per command IN THE ORDER GIVEN. A Redis error reply (e.g. from a function) is a
  // Reply of kError, not a failed Status; the Status fails only when the batch could not be
  // delivered (Unavailable naming the endpoint, DeadlineExceeded on io timeout).
  // Delivery: a MOVED/ASK/TRYAGAIN/CLUSTERDOWN reply means the command did not run, so following
  // it never applies a command twice (tests/redis/cluster_test.cc reshards under INCRs). A command
  // whose reply a broken connection lost IS sent again on retry (replies read before the break
  // are kept), so a non-idempotent command (INCR, a function that adds) may apply twice in that
  // case only; guard such writes with a version or fencing check on the Redis side.
  // On a failed Status some commands of the batch may have run; `replies` is then unspecified.
  Status Execute(const std::vector<Command>& commands, std::vector<Reply>* replies);
  // Runs one command on every master (e.g. FUNCTION LOAD REPLACE, FLUSHALL); replies per master,
  // in the order of masters() (single node: one reply).
  Status ExecuteOnAllMasters(const Command& command, std::vector<Reply>* replies);
  // Slot of a key (hash tag aware) -- exposed for layout decisions and tests.
  static uint16_t KeySlot(const std::string& key);
  size_t num_masters() const;
  // The masters as last read from the slot map (single node: the one node).
  std::vector<Endpoint> masters() const;
  // How many times the slot map was (re)read, MOVED / ASK replies followed and retries made
  // since Connect: observable for tests and reports.
  struct Counters {
    long long map_refreshes = 0;
    long long moved = 0;
    long long asks = 0;
    long long retries = 0;
  };
  Counters counters() const;

 private:
  struct Impl;
  explicit RedisClient(std::unique_ptr<Impl> impl);
  mutable Mutex mu_;
  std::unique_ptr<Impl> impl_ GUARDED_BY(mu_);
};

}  // namespace osprey::redis
