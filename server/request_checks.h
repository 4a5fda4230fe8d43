// The checks of a data request's frames against its table that need no table state: key and
// chunk ownership, the keys frame's size, a sparse pull's row cast. Each returns the error the
// requester gets (InvalidArgument / FailedPrecondition naming the table and the problem).
// Thread-safety: pure functions of their arguments.
#pragma once

#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/table_shard.h"

namespace osprey::server {

// Every frame of `msg` is at most limits.max_frame_bytes: ResourceExhausted naming the frame, its
// size and the limit. (ZeroMQ enforces it before reading, through ZMQ_MAXMSGSIZE; this covers
// every transport.)
Status CheckFrameLimits(const Message& msg, const config::LimitsConfig& limits);
// h.num_keys() is at most limits.max_keys_per_request: ResourceExhausted naming both. Checked
// right after the header parses, before anything is sized from the count.
Status CheckKeyLimit(const proto::Header& h, const config::LimitsConfig& limits);

// The keys frame holds h.num_keys() u64s, every sparse key belongs to server `rank` of
// `num_servers` and every dense chunk id exists and belongs to it.
Status ValidateKeys(const proto::Header& h, const Message& msg, const TableShard& t, int rank,
                    int num_servers);
// The most parts one push may be sent in (Header push_parts).
constexpr uint32_t kMaxPushParts = 64;
// A push's part fields: both 0 (not split), or 1 <= push_part <= push_parts <= kMaxPushParts, and
// on push ops only. InvalidArgument naming the fields otherwise.
Status ValidatePushPart(const proto::Header& h);
// h is a leading part of a push sent in parts: checked and applied, but not yet the worker's push
// (TableShard::Push).
inline bool LeadingPushPart(const proto::Header& h) { return h.push_part() < h.push_parts(); }
// A sparse pull's codec asks for its rows as fp16 or bf16 (common/codec/row_cast.h):
// InvalidArgument unless codec and value type name one of those and codec_count is the rows'
// float count.
Status ValidatePullCast(const proto::Header& h, const TableShard& t);

}  // namespace osprey::server
