#include "server/admission/count_min_sketch.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/placement.h"

namespace osprey::server::admission {
namespace {

constexpr uint32_t kMaxDepth = 16;
constexpr uint32_t kMaxWidth = 1u << 28;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

CountMinSketch::CountMinSketch(uint32_t width, uint32_t depth, uint64_t seed)
    : width_(std::max<uint32_t>(1, width)),
      depth_(std::clamp<uint32_t>(depth, 1, kMaxDepth)),
      seed_(seed),
      counters_(size_t{width_} * depth_, 0) {}

void CountMinSketch::Index(uint64_t key, uint32_t* idx) const {
  const uint64_t h1 = Mix64(key ^ seed_);
  const uint64_t h2 = Mix64(h1 ^ 0x9e3779b97f4a7c15ull) | 1;
  for (uint32_t i = 0; i < depth_; ++i) {
    const uint64_t h = h1 + i * h2;
    idx[i] = i * width_ + static_cast<uint32_t>(((h >> 32) * uint64_t{width_}) >> 32);
  }
}

uint32_t CountMinSketch::Add(uint64_t key) {
  uint32_t idx[kMaxDepth];
  Index(key, idx);
  uint32_t min = std::numeric_limits<uint32_t>::max();
  for (uint32_t i = 0; i < depth_; ++i) min = std::min(min, counters_[idx[i]]);
  ++adds_;
  if (min == std::numeric_limits<uint32_t>::max()) return min;  // saturated
  // Conservative update: only the counters at the minimum move (to min + 1); the others already
  // over-count this key by at least one.
  for (uint32_t i = 0; i < depth_; ++i) {
    if (counters_[idx[i]] == min) counters_[idx[i]] = min + 1;
  }
  return min + 1;
}

uint32_t CountMinSketch::Estimate(uint64_t key) const {
  uint32_t idx[kMaxDepth];
  Index(key, idx);
  uint32_t min = std::numeric_limits<uint32_t>::max();
  for (uint32_t i = 0; i < depth_; ++i) min = std::min(min, counters_[idx[i]]);
  return min;
}

Status CountMinSketch::MergeFrom(const CountMinSketch& other) {
  if (other.width_ != width_ || other.depth_ != depth_ || other.seed_ != seed_) {
    return InvalidArgument("count-min sketches of different shapes (" + std::to_string(width_) +
                           "x" + std::to_string(depth_) + " vs " + std::to_string(other.width_) +
                           "x" + std::to_string(other.depth_) + ") cannot be merged");
  }
  for (size_t i = 0; i < counters_.size(); ++i) {
    const uint64_t sum = uint64_t{counters_[i]} + other.counters_[i];
    counters_[i] = static_cast<uint32_t>(std::min<uint64_t>(sum, std::numeric_limits<uint32_t>::max()));
  }
  adds_ += other.adds_;
  return Status::OK();
}

void CountMinSketch::AppendTo(std::string* out) const {
  Put(out, width_);
  Put(out, depth_);
  Put(out, seed_);
  Put(out, adds_);
  out->append(reinterpret_cast<const char*>(counters_.data()), counters_.size() * sizeof(uint32_t));
}

StatusOr<CountMinSketch> CountMinSketch::Parse(const char* data, size_t size, size_t* pos,
                                               const std::string& what) {
  constexpr size_t kHead = 4 + 4 + 8 + 8;
  if (size - *pos < kHead) return DataLoss(what + ": count-min sketch header is truncated");
  uint32_t width = 0, depth = 0;
  uint64_t seed = 0, adds = 0;
  std::memcpy(&width, data + *pos, 4);
  std::memcpy(&depth, data + *pos + 4, 4);
  std::memcpy(&seed, data + *pos + 8, 8);
  std::memcpy(&adds, data + *pos + 16, 8);
  if (width < 1 || width > kMaxWidth || depth < 1 || depth > kMaxDepth) {
    return DataLoss(what + ": count-min sketch shape " + std::to_string(width) + "x" +
                    std::to_string(depth) + " is out of range");
  }
  const size_t bytes = size_t{width} * depth * sizeof(uint32_t);
  if (size - *pos - kHead < bytes) return DataLoss(what + ": count-min sketch counters are truncated");
  CountMinSketch s(width, depth, seed);
  s.adds_ = adds;
  std::memcpy(s.counters_.data(), data + *pos + kHead, bytes);
  *pos += kHead + bytes;
  return s;
}

}  // namespace osprey::server::admission
