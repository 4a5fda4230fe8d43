#include "worker/client/dense_routes.h"

#include <algorithm>

#include "common/placement.h"

namespace osprey::worker {

std::vector<std::vector<DenseRoute>> RouteDenseTables(const proto::ShardMap& map) {
  const int num_servers = map.server_endpoints_size();
  std::vector<std::vector<DenseRoute>> routes(map.tables_size());
  for (int t = 0; t < map.tables_size(); ++t) {
    const proto::TableSpec& spec = map.tables(t);
    if (spec.type() != proto::TABLE_DENSE || spec.chunk_floats() == 0) continue;
    const uint64_t size = spec.size(), chunk = spec.chunk_floats();
    std::vector<std::vector<uint64_t>> chunks(num_servers);
    for (uint64_t c = 0; c * chunk < size; ++c) {
      chunks[ServerForChunk(static_cast<uint32_t>(t), c, num_servers)].push_back(c);
    }
    for (int s = 0; s < num_servers; ++s) {
      if (chunks[s].empty()) continue;
      DenseRoute r;
      r.server = s;
      r.keys = Buffer::Copy(chunks[s].data(), chunks[s].size() * sizeof(uint64_t));
      for (size_t i = 0; i < chunks[s].size(); ++i) {
        const uint64_t first = chunks[s][i] * chunk, len = std::min(chunk, size - first);
        r.ranges.emplace_back(first, len);
        r.chunk_floats.push_back(len);
        r.floats += len;
        r.contiguous = r.contiguous && (i == 0 || chunks[s][i] == chunks[s][i - 1] + 1);
      }
      routes[t].push_back(std::move(r));
    }
  }
  return routes;
}

}  // namespace osprey::worker
