// Moved rows: which records leave a server when the job goes from one server count to another
// (osprey scale). Placement is common/placement.h's jump hash over the servers of the shard map, so
// growing from n to m > n servers moves a key only to one of the new ranks n..m-1 (about
// (m-n)/m of the keys), and shrinking from n to m < n moves only the keys of the removed ranks
// m..n-1, to the survivors; every other key stays where it is. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey::server::migration {

// The records of one table that server `self` must send away: by_dest[d] holds, in input order,
// the keys whose owner at `to_servers` is d (by_dest[self] stays empty); `kept`
// counts the others. by_dest has max(to_servers, self + 1) entries.
struct MovePlan {
  std::vector<std::vector<uint64_t>> by_dest;
  size_t kept = 0;
  size_t moved() const;
};

// Sparse: keys[0, n) of `table`, all held by `self`.
MovePlan PlanKeyMoves(uint32_t table, const uint64_t* keys, size_t n, int self, int to_servers);
// The chunks of a dense table of `num_chunks` chunks that `rank` owns among `servers` (ascending).
std::vector<uint64_t> OwnedChunks(uint32_t table, uint64_t num_chunks, int rank, int servers);

}  // namespace osprey::server::migration
