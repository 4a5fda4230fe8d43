// DenseRoute: where the chunks of a dense table live -- for each server that owns chunks of the
// table, their ids (the keys frame of a dense message) and their float ranges in the table. The
// placement (common/placement.h ServerForChunk) is fixed for a shard map's epoch, so the client
// routes every dense table once, at construction.
//
// Thread-safety: immutable after RouteDenseTables returns.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "proto/wire.h"

namespace osprey::worker {

struct DenseRoute {
  int server = 0;
  Buffer keys;                                        // chunk ids (the keys frame), ascending
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (first float, floats) per chunk
  std::vector<uint64_t> chunk_floats;                 // ranges[i].second: push / pull parts cut by it
  uint64_t floats = 0;                                // sum of the ranges' floats
  bool contiguous = true;                             // the chunks form one range of the table
};

// By table id: the routes of each dense table, in server order (servers without chunks left
// out); empty for sparse tables and dense tables without chunk_floats.
std::vector<std::vector<DenseRoute>> RouteDenseTables(const proto::ShardMap& map);

}  // namespace osprey::worker
