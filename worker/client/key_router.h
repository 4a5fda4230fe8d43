// KeyRouter: which server each key of a sparse call goes to -- the one partition that Pull, Push
// and PushByServer share. It cuts a call's keys into one slice per server involved:
//
//   Route:   by the placement hash (common/placement.h ServersForKeys, 8 keys at a time). With
//            one server there is nothing to hash: the slice is the call's keys in order.
//   Grouped: the caller already grouped the keys by owner (counts per server, as a GPU worker's
//            device-side grouping does); the slices are contiguous runs of the call, unhashed.
//
// A slice says where its keys are in the call (a contiguous run [first, first + count), or the
// call index of each key), so the client can gather the matching rows (push) or scatter the
// replies (pull), and carries the keys frame to send: a slice of the caller's key Buffer when one
// was given and the run is contiguous (no copy), else a new Buffer.
//
// Thread-safety: a KeyRouter is immutable; Route and Grouped may run on any thread at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"

namespace osprey::worker {

// One server's share of a sparse call.
struct KeySlice {
  int server = 0;
  size_t count = 0;   // keys
  Buffer keys;        // the keys frame: count u64
  size_t first = 0;   // positions empty: the keys are the call's [first, first + count)
  Buffer positions;   // else: the call index (u32) of each key, in frame order
  const uint32_t* position_data() const { return positions.empty() ? nullptr : positions.as<uint32_t>(); }
};

class KeyRouter {
 public:
  explicit KeyRouter(int num_servers) : num_servers_(num_servers) {}
  int num_servers() const { return num_servers_; }

  // Partitions keys[0, n) of `table` by owner; `key_buffer`, when not null, is a Buffer holding
  // the same n keys (its slices become the keys frames where no gather is needed). Slices come
  // in server order, servers without keys left out. n > 0.
  std::vector<KeySlice> Route(uint32_t table, const uint64_t* keys, size_t n, const Buffer* key_buffer) const;

  // The slices of keys grouped by owner: keys[0, counts[0]) for server 0, the next counts[1] for
  // server 1, ... (`counts` has num_servers() entries). InvalidArgument naming the push and
  // `table_name` when a count is negative or the counts do not sum to n.
  StatusOr<std::vector<KeySlice>> Grouped(const uint64_t* keys, size_t n, const int32_t* counts,
                                          const Buffer* key_buffer, const std::string& table_name,
                                          const char* op = "push") const;

 private:
  const int num_servers_;
};

}  // namespace osprey::worker
