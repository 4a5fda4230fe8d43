// NodeConnection: one synchronous hiredis connection to one Redis node, pipelined: Send appends
// every command (binary-safe argv) and writes them out, Receive reads their replies in order.
// Internal to osprey::redis (RedisClient owns one per node it talks to).
//
// Errors: Unavailable naming the endpoint when the node cannot be reached or the connection
// breaks; DeadlineExceeded when the node did not answer within the io timeout; PermissionDenied
// when AUTH is refused. After any failed Status the connection is broken() and must be dropped
// (hiredis contexts cannot recover from an I/O error).
//
// Thread-safety: none; the owning RedisClient serializes its use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/redis/redis_client.h"

struct redisContext;
struct redisReply;

namespace osprey::redis {

// Copies a hiredis reply (recursively, binary-safe) into a Reply.
Reply CopyReply(const redisReply* r);

class NodeConnection {
 public:
  // Connects within options.connect_timeout_ms, sets the io timeout, and sends AUTH when
  // options.password is set (AUTH user password with an ACL user, else AUTH password).
  static StatusOr<std::unique_ptr<NodeConnection>> Open(const Endpoint& endpoint,
                                                       const RedisOptions& options);
  ~NodeConnection();
  NodeConnection(const NodeConnection&) = delete;
  NodeConnection& operator=(const NodeConnection&) = delete;

  // Appends each argv (an ASKING first where asking[i]; `asking` may be null) and writes them
  // all to the socket. The replies are then read with Receive in the same order.
  Status Send(const std::vector<const Command*>& commands, const std::vector<bool>* asking);
  // Reads `n` replies into `out` (appended), dropping the reply of each ASKING sent with them.
  Status Receive(const std::vector<bool>* asking, size_t n, std::vector<Reply>* out);
  // Send + Receive of one command.
  Status Call(const std::vector<std::string>& argv, Reply* reply);

  bool broken() const { return broken_; }
  const Endpoint& endpoint() const { return endpoint_; }

 private:
  NodeConnection(Endpoint endpoint, redisContext* ctx, int io_timeout_ms)
      : endpoint_(std::move(endpoint)), ctx_(ctx), io_timeout_ms_(io_timeout_ms) {}
  // The Status for the context's current error; marks the connection broken.
  Status ContextError(const char* during);

  Endpoint endpoint_;
  redisContext* ctx_;  // owned; freed by the destructor
  int io_timeout_ms_;
  bool broken_ = false;
};

}  // namespace osprey::redis
