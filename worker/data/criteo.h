// CriteoReader: streams the Criteo click logs TSV format (Kaggle Display Advertising Challenge and
// the Terabyte logs) into Batches, one shard of the lines per reader.
//
// Format: one sample per line, 40 tab-separated columns, '\n' or "\r\n" line ends:
//   column 1        label, "0" or "1"
//   columns 2..14   13 integer features (decimal, may be negative), or empty
//   columns 15..40  26 categorical features, hex strings of 1 to 8 digits, or empty
// Preprocessing (the usual DLRM recipe):
//   dense value  = log(1 + max(x, 0)); empty -> 0
//   sparse id    = the hex value (< 2^32); empty -> kMissingId, which no hex value can equal and
//                  which survives FeatureKey's 48-bit mask unchanged.
// Batches have num_dense = 13, num_sparse = 26 and no oracle_prob.
//
// Sharding: line i (0-based, counting every line of the file) belongs to shard i % num_shards.
// Lines of other shards are skipped without being parsed, so each shard reports only its own
// malformed lines.
//
// Errors: a malformed line of this shard makes Next() return InvalidArgument
// "<path>:<line>: column <N>: <what was wrong>" (line and column 1-based); the reader is then
// positioned after that line, and the batch's contents are unspecified. A read failure is
// DataLoss.
//
// Thread-safety: not thread-safe; one reader per thread. The reader owns its file handle and closes
// it on destruction.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/batch.h"

namespace osprey::data {

class CriteoReader {
 public:
  static constexpr int kNumDense = 13;
  static constexpr int kNumSparse = 26;
  static constexpr int kNumColumns = 1 + kNumDense + kNumSparse;
  // Id of an empty categorical field: 2^48 - 1.
  static constexpr uint64_t kMissingId = kFeatureIdMask;

  // Opens `path` for shard `shard` of `num_shards`. Errors: InvalidArgument when num_shards < 1 or
  // shard is outside [0, num_shards); NotFound naming the path when it does not exist;
  // FailedPrecondition when it exists but cannot be opened.
  static StatusOr<std::unique_ptr<CriteoReader>> Open(const std::string& path, int shard, int num_shards);

  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Fills *out with up to batch_size samples of this shard (fewer only at the end of the file);
  // out->size == 0 means the shard is exhausted. Errors: InvalidArgument for batch_size < 1 or a
  // malformed line (see above), DataLoss for a read error.
  Status Next(int batch_size, Batch* out);

  // Moves past the next `n` samples (lines) of this shard without parsing them, e.g. to resume a
  // restarted worker's stream; *skipped < n only at the end of the file. Errors: DataLoss for a
  // read error.
  Status SkipSamples(int64_t n, int64_t* skipped);

  const std::string& path() const { return path_; }
  // Lines of the whole file consumed so far (all shards).
  int64_t lines_read() const { return line_number_; }

 private:
  CriteoReader(std::string path, std::FILE* file, int shard, int num_shards);

  // Sets [*begin, *end) to the next line without its terminator; false at end of file.
  Status NextLine(const char** begin, const char** end, bool* found);
  // Moves the unconsumed tail to the front of the buffer and reads more; grows the buffer when a
  // single line does not fit.
  Status Refill();
  // Parses one line into sample b of *out.
  Status ParseLine(const char* begin, const char* end, int b, Batch* out) const;
  // Parses a categorical field (empty -> kMissingId).
  Status ParseHexId(const char* begin, const char* end, int column, uint64_t* id) const;
  Status LineError(int column, const std::string& what) const;

  std::string path_;
  std::FILE* file_;
  int shard_;
  int num_shards_;
  std::vector<char> buffer_;
  size_t pos_ = 0;  // start of unconsumed data in buffer_
  size_t end_ = 0;  // end of valid data in buffer_
  bool eof_ = false;
  int64_t line_number_ = 0;  // 1-based number of the line last returned by NextLine
};

}  // namespace osprey::data
