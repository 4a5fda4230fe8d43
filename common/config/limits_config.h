// LimitsConfig: what one peer may ask of a server (the `limits` section of a job config). Each
// limit turns a request beyond it into an error reply that names the limit and its value, so a
// stranger or a buggy worker costs the server a bounded amount of memory, never an out-of-memory.
//
//   limits:
//     max_frame_bytes: 1073741824     # any one frame of a request (header, keys, values)
//     max_keys_per_request: 16777216  # a request's num_keys (checked before anything is sized)
//     max_inflight_per_peer: 4096     # requests of one peer in flight at the server, i.e. held
//                                     # unanswered (pulls waiting for their clock, held acks)
//     max_held_bytes: 1073741824      # memory of all held requests (pulls, acks, early ones)
//     max_control_frame_bytes: 16777216  # any one frame the coordinator reads (its messages are
//                                        # registrations, heartbeats, reports: KBs)
//
// A request the server answers at once is never "in flight" here: the I/O thread handles one
// request at a time, so only held ones accumulate.
//
// Over ZeroMQ the frame limit is also the server socket's ZMQ_MAXMSGSIZE: a larger frame is never
// read into memory (ZeroMQ drops that connection; the peer's next connection is served again).
// The coordinator's sockets (CURVE and the sealed data port alike) take max_control_frame_bytes
// the same way, so no stranger makes it buffer a large frame before any check.
#pragma once

#include <cstdint>

namespace osprey::config {

class YamlFields;

struct LimitsConfig {
  uint64_t max_frame_bytes = uint64_t{1} << 30;
  uint64_t max_keys_per_request = uint64_t{1} << 24;
  int max_inflight_per_peer = 4096;
  uint64_t max_held_bytes = uint64_t{1} << 30;
  uint64_t max_control_frame_bytes = uint64_t{16} << 20;
};

// Reads the `limits` section into *l: every value > 0; max_keys_per_request * 8 (the keys frame)
// must fit in max_frame_bytes.
void ParseLimits(YamlFields& f, LimitsConfig* l);

}  // namespace osprey::config
