#include "server/request_checks.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/codec/row_cast.h"
#include "common/placement.h"

namespace osprey::server {

Status CheckFrameLimits(const Message& msg, const config::LimitsConfig& limits) {
  const std::pair<const char*, size_t> frames[] = {
      {"header", msg.header.size()}, {"keys", msg.keys.size()}, {"values", msg.values.size()}};
  for (const auto& [name, size] : frames) {
    if (size > limits.max_frame_bytes) {
      return ResourceExhausted(std::string(name) + " frame of " + std::to_string(size) +
                               " bytes: limits.max_frame_bytes is " +
                               std::to_string(limits.max_frame_bytes));
    }
  }
  return Status::OK();
}

Status CheckKeyLimit(const proto::Header& h, const config::LimitsConfig& limits) {
  if (h.num_keys() > limits.max_keys_per_request) {
    return ResourceExhausted("request " + std::to_string(h.request_id()) + " claims " +
                             std::to_string(h.num_keys()) + " keys: limits.max_keys_per_request is " +
                             std::to_string(limits.max_keys_per_request));
  }
  return Status::OK();
}

Status ValidatePullCast(const proto::Header& h, const TableShard& t) {
  const std::string what = "table '" + t.spec().name() + "': pull with codec " + std::to_string(h.codec());
  const bool fp16 = h.codec() == proto::CODEC_FP16 && h.codec_value_type() == uint32_t(codec::ValueType::kFp16);
  const bool bf16 = h.codec() == proto::CODEC_BF16 && h.codec_value_type() == uint32_t(codec::ValueType::kBf16);
  if (!fp16 && !bf16) {
    return InvalidArgument(what + " and value type " + std::to_string(h.codec_value_type()) +
                           ": a sparse pull may ask for its rows as fp16 or bf16 only");
  }
  if (h.codec_count() != h.num_keys() * static_cast<uint64_t>(t.spec().dim())) {
    return InvalidArgument(what + ": codec_count " + std::to_string(h.codec_count()) + " is not the " +
                           std::to_string(h.num_keys()) + " keys x dim " + std::to_string(t.spec().dim()));
  }
  return Status::OK();
}

Status ValidatePushPart(const proto::Header& h) {
  if (h.push_part() == 0 && h.push_parts() == 0) return Status::OK();
  const bool push = h.op() == proto::OP_PUSH_SPARSE || h.op() == proto::OP_PUSH_DENSE;
  if (!push || h.push_part() == 0 || h.push_part() > h.push_parts() || h.push_parts() > kMaxPushParts) {
    return InvalidArgument("push part " + std::to_string(h.push_part()) + " of " + std::to_string(h.push_parts()) +
                           " on op " + std::to_string(h.op()) + ": parts are 1.." +
                           std::to_string(kMaxPushParts) + ", of pushes only");
  }
  return Status::OK();
}

Status ValidateKeys(const proto::Header& h, const Message& msg, const TableShard& t, int rank,
                    int num_servers) {
  // Divided, not multiplied: num_keys * 8 wraps for a claimed 2^61 keys and an empty frame.
  if (msg.keys.size() % sizeof(uint64_t) != 0 || msg.keys.size() / sizeof(uint64_t) != h.num_keys()) {
    return InvalidArgument("table '" + t.spec().name() + "': keys frame has " +
                           std::to_string(msg.keys.size()) + " bytes but num_keys is " +
                           std::to_string(h.num_keys()));
  }
  const uint64_t* keys = msg.keys.as<uint64_t>();
  uint32_t id = h.table();
  bool sparse = t.spec().type() == proto::TABLE_SPARSE;
  // One server owns every key: only dense chunk ids need a range check.
  if (num_servers == 1 && sparse) return Status::OK();
  if (sparse) {
    // Owners a block at a time (ServersForKeys: 8 keys side by side, 2.5x the one-by-one speed).
    constexpr size_t kBlock = 512;
    int32_t owners[kBlock];
    for (size_t begin = 0; begin < h.num_keys(); begin += kBlock) {
      const size_t n = std::min<size_t>(kBlock, h.num_keys() - begin);
      ServersForKeys(id, keys + begin, n, num_servers, owners);
      for (size_t i = 0; i < n; ++i) {
        if (owners[i] != rank) {
          return FailedPrecondition("table '" + t.spec().name() + "': key " + std::to_string(keys[begin + i]) +
                                    " belongs to server " + std::to_string(owners[i]) + ", not to server " +
                                    std::to_string(rank));
        }
      }
    }
    return Status::OK();
  }
  for (size_t i = 0; i < h.num_keys(); ++i) {  // dense chunk ids
    if (keys[i] >= t.num_chunks()) {
      return InvalidArgument("table '" + t.spec().name() + "': chunk " + std::to_string(keys[i]) +
                             " does not exist (" + std::to_string(t.num_chunks()) + " chunks)");
    }
    if (num_servers == 1) continue;
    int owner = ServerForChunk(id, keys[i], num_servers);
    if (owner != rank) {
      return FailedPrecondition("table '" + t.spec().name() + "': chunk " +
                                std::to_string(keys[i]) + " belongs to server " +
                                std::to_string(owner) + ", not to server " + std::to_string(rank));
    }
  }
  return Status::OK();
}

}  // namespace osprey::server
