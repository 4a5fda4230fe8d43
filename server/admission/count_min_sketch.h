// CountMinSketch: approximate counts of u64 keys in a fixed depth x width table of saturating u32
// counters (Cormode & Muthukrishnan), with conservative update (Estan & Varghese): an Add raises
// only the key's counters that equal its current minimum, which keeps the over-count of the
// one-sided estimate lower than incrementing all of them.
//
// Bound: Estimate(k) >= the true count of k always; with width w and depth d, after N adds
// Estimate(k) <= true(k) + (e / w) * N with probability >= 1 - e^-d per key (the classic bound;
// conservative update only lowers the error).
//
// Row i's counter of a key is chosen by the i-th of d hashes derived from two 64-bit mixes of
// (seed, key) (Kirsch-Mitzenmacher), reduced to [0, w) by a multiply-shift.
//
// Thread-safety: none (TableShard calls it under the server's work lock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::server::admission {

class CountMinSketch {
 public:
  // width >= 1, depth >= 1 (validated by the config: 16..2^28, 1..16).
  CountMinSketch(uint32_t width, uint32_t depth, uint64_t seed = 0x5eed);

  // Counts one more sighting of `key`; returns its new estimate.
  uint32_t Add(uint64_t key);
  uint32_t Estimate(uint64_t key) const;

  uint32_t width() const { return width_; }
  uint32_t depth() const { return depth_; }
  uint64_t adds() const { return adds_; }
  // Adds `other`'s counters into this one (saturating): the sketch of the union of both streams
  // (estimates stay upper bounds). InvalidArgument when the shapes or seeds differ.
  Status MergeFrom(const CountMinSketch& other);

  // Serialized form (little-endian): u32 width, u32 depth, u64 seed, u64 adds, width*depth u32.
  void AppendTo(std::string* out) const;
  // Parses one serialized sketch at data[*pos..size), advancing *pos. DataLoss naming `what` when
  // it is truncated or its shape is out of range.
  static StatusOr<CountMinSketch> Parse(const char* data, size_t size, size_t* pos,
                                        const std::string& what);

 private:
  // The counter index of `key` in row i, for every row, into idx_.
  void Index(uint64_t key, uint32_t* idx) const;

  uint32_t width_;
  uint32_t depth_;
  uint64_t seed_;
  uint64_t adds_ = 0;
  std::vector<uint32_t> counters_;  // row-major: depth_ rows of width_
};

}  // namespace osprey::server::admission
