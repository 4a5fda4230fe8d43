// The Redis functions every write of the Redis store goes through (a library loaded with
// FUNCTION LOAD REPLACE on every master: functions, unlike EVALSHA scripts, survive restarts and
// need no per-node script cache).
//
//   FCALL osprey_claim 1 <fence> <rank> <incarnation>
//       takes a bucket over: refused ("FENCED ...") when a newer incarnation owns it.
//   FCALL osprey_put 2 <fence> <rows hash> <rank> <incarnation> <field1> <blob1> ...
//       writes rows of one bucket (one slot) atomically (HSET) after the fencing check; returns
//       how many were new. Refused ("FENCED ...") for a replaced incarnation.
//   FCALL osprey_set 2 <fence> <key> <rank> <incarnation> <blob>
//       the same for one string key (a dense chunk).
#pragma once

#include <string>

namespace osprey::server::redis_store {

// The library's source ("#!lua name=osprey_store_v1 ...").
const std::string& FunctionLibrary();

// Prefix of the error a fenced write gets back.
constexpr const char* kFencedError = "FENCED";

}  // namespace osprey::server::redis_store
