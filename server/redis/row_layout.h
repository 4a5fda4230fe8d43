// How the Redis store lays out a table in Redis (format version kFormatVersion).
//
// Keys (P = key_prefix, t = table id, r = the owning server's rank, b = bucket of a row key):
//   {P:t<t>}:meta                 the table's spec (SpecString); checked at CreateTable
//   {P}:incarnation:r<r>          INCR'd by every server of rank r that starts (its fencing token)
//   {P}:pushes:r<r>               hash: rank r's push marks (push_marks.cc): seq, applied, and
//                                 t<t>:w<w> -> "<worker incarnation> <highest applied request id>"
//   {P:t<t>:r<r>:b<b>}:rows       hash: field <key> (decimal) -> the row's RowBlob
//   {P:t<t>:r<r>:b<b>}:fence      hash rank -> the incarnation that owns this bucket
//   {P:t<t>:c<chunk>}             a dense chunk's weights then optimizer state (floats)
//   {P:t<t>:c<chunk>}:fence       as for a bucket
// A bucket is Mix(key) % kBuckets: the hash tag puts a bucket's rows in one slot (so one function
// call writes them all atomically) while a table's kBuckets slots spread over the masters. A
// bucket's rows are one Redis hash rather than one string key each: a window's misses of a
// bucket are one HMGET and its dirty rows one HSET (inside the fenced function), which measured
// ~2x fewer Redis CPU per row than EXISTS + SET per row key (and num_rows is HLEN).
//
// A row blob is little-endian, no text: row_floats floats (dim weights, then the optimizer
// state) followed by kRowHistory u64 update versions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "server/store.h"

namespace osprey::server::redis_store {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "row blobs are memcpy'd little-endian");

constexpr int kFormatVersion = 1;
constexpr uint32_t kBuckets = 64;
// The most rows (or fields) one function call writes or deletes: a call's arguments are unpacked
// onto Lua's stack, which holds ~8000 values (a scale step's import can dirty 5k rows a bucket).
constexpr size_t kRowsPerCall = 2048;

inline uint32_t BucketOf(uint64_t key) {
  uint64_t x = key + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((x ^ (x >> 31)) % kBuckets);
}

class Layout {
 public:
  Layout(std::string prefix, int rank) : prefix_(std::move(prefix)), rank_(rank) {}
  int rank() const { return rank_; }
  std::string Meta(uint32_t t) const { return "{" + prefix_ + ":t" + std::to_string(t) + "}:meta"; }
  std::string Incarnation() const { return "{" + prefix_ + "}:incarnation:r" + std::to_string(rank_); }
  std::string PushMarks() const { return "{" + prefix_ + "}:pushes:r" + std::to_string(rank_); }
  std::string BucketTag(uint32_t t, uint32_t b) const {
    return "{" + prefix_ + ":t" + std::to_string(t) + ":r" + std::to_string(rank_) + ":b" +
           std::to_string(b) + "}";
  }
  std::string Rows(uint32_t t, uint32_t b) const { return BucketTag(t, b) + ":rows"; }
  static std::string Field(uint64_t key) { return std::to_string(key); }
  std::string ChunkTag(uint32_t t, uint64_t c) const {
    return "{" + prefix_ + ":t" + std::to_string(t) + ":c" + std::to_string(c) + "}";
  }

 private:
  std::string prefix_;
  int rank_;
};

// The spec a metadata key holds, e.g. "osprey-redis-store/1 sparse dim=16 size=0 chunk=0
// state=16 init=normal/7/0.01".
std::string SpecString(const StoreTableSpec& spec);

inline size_t RowBlobBytes(size_t row_floats) {
  return row_floats * sizeof(float) + kRowHistory * sizeof(uint64_t);
}
inline std::string EncodeRow(const float* row, size_t row_floats, const uint64_t* history) {
  std::string blob(RowBlobBytes(row_floats), '\0');
  std::memcpy(blob.data(), row, row_floats * sizeof(float));
  std::memcpy(blob.data() + row_floats * sizeof(float), history, kRowHistory * sizeof(uint64_t));
  return blob;
}
// False when the blob has the wrong size (another layout wrote it).
inline bool DecodeRow(const std::string& blob, size_t row_floats, float* row, uint64_t* history) {
  if (blob.size() != RowBlobBytes(row_floats)) return false;
  std::memcpy(row, blob.data(), row_floats * sizeof(float));
  std::memcpy(history, blob.data() + row_floats * sizeof(float), kRowHistory * sizeof(uint64_t));
  return true;
}

}  // namespace osprey::server::redis_store
