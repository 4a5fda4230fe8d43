// RedisClient: routing, pipelining and retries (implementation in progress).
#include "common/redis/redis_client.h"

namespace osprey::redis {

struct RedisClient::Impl {};

RedisClient::RedisClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisClient::~RedisClient() = default;

StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(const RedisOptions& options) {
  return Unimplemented("redis client: Connect not implemented yet");
}

Status RedisClient::Execute(const std::vector<Command>& commands, std::vector<Reply>* replies) {
  return Unimplemented("redis client: Execute not implemented yet");
}

Status RedisClient::ExecuteOnAllMasters(const Command& command, std::vector<Reply>* replies) {
  return Unimplemented("redis client: ExecuteOnAllMasters not implemented yet");
}

size_t RedisClient::num_masters() const { return 0; }
std::vector<Endpoint> RedisClient::masters() const { return {}; }
RedisClient::Counters RedisClient::counters() const { return {}; }

}  // namespace osprey::redis
