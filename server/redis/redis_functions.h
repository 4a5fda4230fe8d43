// The Redis functions every write of the Redis store goes through (a library loaded with
// FUNCTION LOAD REPLACE on every master: functions, unlike EVALSHA scripts, survive restarts and
// need no per-node script cache).
//
//   FCALL osprey_claim 1 <fence> <rank> <incarnation>
//       takes a bucket over: refused ("FENCED ...") when a newer incarnation owns it.
//   FCALL osprey_put N+2 <fence> <count> <key1..keyN> <rank> <incarnation> <blob1..blobN>
//       writes N rows of one bucket (one slot) atomically after the fencing check; returns how
//       many were new (added to <count>). Refused ("FENCED ...") for a replaced incarnation.
//   FCALL osprey_adagrad / osprey_sgd N+2 <fence> <count> <key1..keyN> <rank> <incarnation>
//         <dim> <row_floats> <lr> <eps> <init_acc> <grad blobs + initial rows ...>
//       merge: redis -- applies a merged gradient to each row on the Redis side (row_updates.lua
//       below; float32 via string.pack / struct).
#pragma once

#include <string>

namespace osprey::server::redis_store {

// The library's source ("#!lua name=osprey_store_v1 ...").
const std::string& FunctionLibrary();

// Prefix of the error a fenced write gets back.
constexpr const char* kFencedError = "FENCED";

}  // namespace osprey::server::redis_store
