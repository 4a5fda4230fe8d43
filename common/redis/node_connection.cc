// NodeConnection on the synchronous hiredis 0.14 API (redisAppendCommandArgv + redisGetReply).
#include "common/redis/node_connection.h"

#include <hiredis/hiredis.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace osprey::redis {

namespace {

timeval Millis(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

}  // namespace

Reply CopyReply(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = Reply::Type::kString; break;
    case REDIS_REPLY_STATUS: out.type = Reply::Type::kStatus; break;
    case REDIS_REPLY_ERROR: out.type = Reply::Type::kError; break;
    case REDIS_REPLY_INTEGER: out.type = Reply::Type::kInteger; break;
    case REDIS_REPLY_ARRAY: out.type = Reply::Type::kArray; break;
    default: out.type = Reply::Type::kNil; break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    out.str.assign(r->str, r->len);
  } else if (r->type == REDIS_REPLY_INTEGER) {
    out.integer = r->integer;
  } else if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(CopyReply(r->element[i]));
  }
  return out;
}

StatusOr<std::unique_ptr<NodeConnection>> NodeConnection::Open(const Endpoint& endpoint,
                                                               const RedisOptions& options) {
  redisContext* ctx =
      redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, Millis(options.connect_timeout_ms));
  if (ctx == nullptr) return Unavailable("redis " + endpoint.ToString() + ": out of memory at connect");
  if (ctx->err != 0) {
    const std::string why = ctx->errstr;
    redisFree(ctx);
    return Unavailable("redis " + endpoint.ToString() + ": cannot connect (" + why + ")");
  }
  if (redisSetTimeout(ctx, Millis(options.io_timeout_ms)) != REDIS_OK) {
    const std::string why = ctx->errstr;
    redisFree(ctx);
    return Unavailable("redis " + endpoint.ToString() + ": cannot set io timeout (" + why + ")");
  }
  std::unique_ptr<NodeConnection> conn(new NodeConnection(endpoint, ctx, options.io_timeout_ms));
  if (!options.password.empty()) {
    std::vector<std::string> argv = {"AUTH"};
    if (!options.user.empty()) argv.push_back(options.user);
    argv.push_back(options.password);
    Reply reply;
    OSPREY_RETURN_IF_ERROR(conn->Call(argv, &reply));
    if (reply.is_error()) {
      return PermissionDenied("redis " + endpoint.ToString() + ": AUTH" +
                              (options.user.empty() ? "" : " as user '" + options.user + "'") +
                              " refused: " + reply.str);
    }
  }
  return conn;
}

NodeConnection::~NodeConnection() { redisFree(ctx_); }

Status NodeConnection::ContextError(const char* during) {
  broken_ = true;
  // hiredis 0.14 reports a read/write past SO_RCVTIMEO/SO_SNDTIMEO as REDIS_ERR_IO with errno
  // EAGAIN ("Resource temporarily unavailable"); it has no timeout error code of its own.
  const int err = errno;
  const std::string why = ctx_->errstr;
  if (ctx_->err == REDIS_ERR_IO &&
      (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT ||
       why.find("temporarily unavailable") != std::string::npos)) {
    return DeadlineExceeded("redis " + endpoint_.ToString() + ": no reply within io timeout of " +
                            std::to_string(io_timeout_ms_) + " ms (" + during + ")");
  }
  return Unavailable("redis " + endpoint_.ToString() + ": connection failed while " + during +
                     " (" + why + ")");
}

Status NodeConnection::Send(const std::vector<const Command*>& commands,
                            const std::vector<bool>* asking) {
  if (broken_) return Unavailable("redis " + endpoint_.ToString() + ": connection is broken");
  static const char* kAsking = "ASKING";
  static const size_t kAskingLen = 6;
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (size_t i = 0; i < commands.size(); ++i) {
    if (asking != nullptr && (*asking)[i]) {
      if (redisAppendCommandArgv(ctx_, 1, &kAsking, &kAskingLen) != REDIS_OK) {
        return ContextError("appending ASKING");
      }
    }
    const Command& c = *commands[i];
    if (!c.resp.empty()) {
      if (redisAppendFormattedCommand(ctx_, c.resp.data(), c.resp.size()) != REDIS_OK) {
        return ContextError("appending a command");
      }
      continue;
    }
    ptrs.clear();
    lens.clear();
    for (const std::string& a : c.args) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(c.args.size()), ptrs.data(), lens.data()) != REDIS_OK) {
      return ContextError("appending a command");
    }
  }
  // Write the whole pipeline now so every node of a batch works while we read the first one.
  int done = 0;
  errno = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return ContextError("sending commands");
  }
  return Status::OK();
}

Status NodeConnection::Receive(const std::vector<bool>* asking, size_t n, std::vector<Reply>* out) {
  if (broken_) return Unavailable("redis " + endpoint_.ToString() + ": connection is broken");
  for (size_t i = 0; i < n; ++i) {
    const int reads = (asking != nullptr && (*asking)[i]) ? 2 : 1;
    for (int k = 0; k < reads; ++k) {
      void* raw = nullptr;
      errno = 0;
      if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return ContextError("reading replies");
      redisReply* r = static_cast<redisReply*>(raw);
      // The reply of ASKING (+OK) is dropped; the command's reply follows it.
      if (k + 1 == reads) out->push_back(CopyReply(r));
      freeReplyObject(r);
    }
  }
  return Status::OK();
}

Status NodeConnection::Call(const std::vector<std::string>& argv, Reply* reply) {
  std::vector<Reply> replies;
  const Command c{argv, -1, {}};
  OSPREY_RETURN_IF_ERROR(Send({&c}, nullptr));
  OSPREY_RETURN_IF_ERROR(Receive(nullptr, 1, &replies));
  *reply = std::move(replies[0]);
  return Status::OK();
}

void RespWriter::Header(char kind, size_t n) {
  char buf[24];
  int len = std::snprintf(buf, sizeof(buf), "%c%zu\r\n", kind, n);
  out_->append(buf, static_cast<size_t>(len));
}

void RespWriter::ArgU64(uint64_t v) {
  char buf[24];
  int len = std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(v));
  Arg(buf, static_cast<size_t>(len));
}

}  // namespace osprey::redis
