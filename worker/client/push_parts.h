// Push parts (issue 17): one large push message to a server, cut into a few messages the server
// applies one after the other while the next is still on the wire.
//
// A push of 16 MiB sent whole is a chain: the client sends, the server receives all of it, then
// checks and applies it, then replies; on the 2-core machine that keeps 1.2 cores busy and the
// apply (~2.7 ms of 9.4) overlaps nothing. Sent as parts of ~1 MiB, the server's apply of part p
// runs while part p + 1 is received (bench/results/2026-12-07-push-parts-2core.md).
//
// What a part is on the wire: Header push_part / push_parts (proto/osprey.proto). What the
// server does with one: TableShard::Push. Each part is a request of its own (own id, reply and
// re-send after a server failover); the push's ticket completes when every part is answered.
// The client (Client::SendPushParts) copies or slices each part only as it sends it, so the copy
// of part p + 1 overlaps the sending of part p.
//
// Encoded rows: a push whose encoder EncodesPartsAlone (the fp16 / bf16 row casts) is cut the same
// way (parts of push_part_bytes of fp32 rows), each part cast as it goes out; other encoders (a
// selection or scale over the whole message) send it whole.
//
// Atomicity: a server rejects a non-finite part alone, so the client splits a push only when all
// its values are finite (PushValues::AllFinite, one vectorized pass before the first part goes
// out); a push with a NaN goes whole, and the server's non_finite policy treats it exactly as
// before.
//
// Pulls in parts: a sparse pull's reply rows to one server are asked for the same way, as pull
// requests of their own for consecutive runs of the slice's keys (RowPartStarts over the reply's
// row bytes, Client::SendSparsePull). The server needs nothing new: each part is a pull. A pull
// was never atomic across servers (each replies at its own version); with parts it is not atomic
// across the parts of one server either, which only matters under async, where any pull races
// the pushes anyway; bsp and ssp hold each part until its clock is ready, as they hold a pull.
// A dense pull into an array goes in parts of whole chunks (PartStarts); a pull into a Buffer that
// one server answers whole stays one message (its frame is taken without a copy).
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/all_finite.h"  // AllFiniteFloats, the check before a push is split

namespace osprey::worker {

// The most parts the client cuts one message into (the server accepts up to 64).
constexpr size_t kMaxClientPushParts = 16;

// The key index each part starts at, for a message whose key i has key_floats[i] floats: parts
// of at least part_bytes of values each (whole keys), the last part taking the remainder when it
// would be smaller than that. {0} (one part: send it whole) when part_bytes is 0 or the message
// has less than two parts' worth of values or a single key. At most `max_parts` parts (larger
// parts then).
std::vector<size_t> PartStarts(const std::vector<uint64_t>& key_floats, size_t part_bytes,
                               size_t max_parts);
// The same for `num_keys` keys of `floats_per_key` floats each (a sparse message).
std::vector<size_t> UniformPartStarts(size_t num_keys, size_t floats_per_key, size_t part_bytes,
                                      size_t max_parts);
// The same for keys of `row_bytes` bytes each (a sparse pull's reply rows, fp32 or 16-bit).
std::vector<size_t> RowPartStarts(size_t num_keys, size_t row_bytes, size_t part_bytes, size_t max_parts);

}  // namespace osprey::worker
