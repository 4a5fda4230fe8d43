#include "worker/data/criteo.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

namespace osprey::data {
namespace {

constexpr size_t kInitialBufferBytes = size_t{1} << 20;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses [begin, end) as a decimal int64; false on anything else (including overflow).
bool ParseInt64(const char* begin, const char* end, int64_t* value) {
  bool negative = false;
  if (begin < end && (*begin == '-' || *begin == '+')) negative = *begin++ == '-';
  if (begin == end) return false;
  uint64_t magnitude = 0;
  const uint64_t limit = negative ? uint64_t{1} << 63 : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (; begin < end; ++begin) {
    const unsigned digit = static_cast<unsigned char>(*begin) - '0';
    if (digit > 9 || magnitude > (limit - digit) / 10) return false;
    magnitude = magnitude * 10 + digit;
  }
  *value = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  return true;
}

std::string Quote(const char* begin, const char* end) {
  constexpr ptrdiff_t kMaxShown = 32;
  if (end - begin > kMaxShown) return "'" + std::string(begin, kMaxShown) + "...'";
  return "'" + std::string(begin, end) + "'";
}

}  // namespace

StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const std::string& path, int shard, int num_shards) {
  if (num_shards < 1) return InvalidArgument("criteo: num_shards must be >= 1, got " + std::to_string(num_shards));
  if (shard < 0 || shard >= num_shards) {
    return InvalidArgument("criteo: shard must be in [0, " + std::to_string(num_shards) + "), got " +
                           std::to_string(shard));
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    const std::string what = "criteo: cannot open '" + path + "': " + std::strerror(err);
    return err == ENOENT ? NotFound(what) : FailedPrecondition(what);
  }
  return std::unique_ptr<CriteoReader>(new CriteoReader(path, file, shard, num_shards));
}

CriteoReader::CriteoReader(std::string path, std::FILE* file, int shard, int num_shards)
    : path_(std::move(path)), file_(file), shard_(shard), num_shards_(num_shards), buffer_(kInitialBufferBytes) {}

CriteoReader::~CriteoReader() { std::fclose(file_); }

Status CriteoReader::Next(int batch_size, Batch* out) {
  if (batch_size < 1) return InvalidArgument("criteo: batch_size must be >= 1, got " + std::to_string(batch_size));
  out->num_dense = kNumDense;
  out->num_sparse = kNumSparse;
  out->dense.resize(static_cast<size_t>(batch_size) * kNumDense);
  out->ids.resize(static_cast<size_t>(batch_size) * kNumSparse);
  out->labels.resize(batch_size);
  out->oracle_prob.clear();
  int b = 0;
  while (b < batch_size) {
    const char* begin;
    const char* end;
    bool found;
    OSPREY_RETURN_IF_ERROR(NextLine(&begin, &end, &found));
    if (!found) break;
    if ((line_number_ - 1) % num_shards_ != shard_) continue;
    OSPREY_RETURN_IF_ERROR(ParseLine(begin, end, b, out));
    ++b;
  }
  out->size = b;
  out->dense.resize(static_cast<size_t>(b) * kNumDense);
  out->ids.resize(static_cast<size_t>(b) * kNumSparse);
  out->labels.resize(b);
  return Status::OK();
}

Status CriteoReader::SkipSamples(int64_t n, int64_t* skipped) {
  *skipped = 0;
  while (*skipped < n) {
    const char* begin;
    const char* end;
    bool found;
    OSPREY_RETURN_IF_ERROR(NextLine(&begin, &end, &found));
    if (!found) break;
    if ((line_number_ - 1) % num_shards_ == shard_) ++*skipped;
  }
  return Status::OK();
}

Status CriteoReader::NextLine(const char** begin, const char** end, bool* found) {
  for (;;) {
    const char* data = buffer_.data();
    const auto* newline = static_cast<const char*>(std::memchr(data + pos_, '\n', end_ - pos_));
    if (newline != nullptr || (eof_ && pos_ < end_)) {
      // A final line without '\n' ends at the end of the file.
      const char* line_end = newline != nullptr ? newline : data + end_;
      *begin = data + pos_;
      pos_ = static_cast<size_t>(line_end - data) + (newline != nullptr ? 1 : 0);
      if (line_end > *begin && line_end[-1] == '\r') --line_end;
      *end = line_end;
      ++line_number_;
      *found = true;
      return Status::OK();
    }
    if (eof_) {
      *found = false;
      return Status::OK();
    }
    OSPREY_RETURN_IF_ERROR(Refill());
  }
}

Status CriteoReader::Refill() {
  const size_t pending = end_ - pos_;
  if (pending == buffer_.size()) {
    buffer_.resize(buffer_.size() * 2);  // one line longer than the buffer
  } else if (pos_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, pending);
  }
  pos_ = 0;
  end_ = pending;
  const size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
  end_ += got;
  if (got == 0) {
    if (std::ferror(file_)) return DataLoss("criteo: read error on '" + path_ + "': " + std::strerror(errno));
    eof_ = true;
  }
  return Status::OK();
}

Status CriteoReader::LineError(int column, const std::string& what) const {
  return InvalidArgument(path_ + ":" + std::to_string(line_number_) + ": column " + std::to_string(column) + ": " +
                         what);
}

Status CriteoReader::ParseHexId(const char* begin, const char* end, int column, uint64_t* id) const {
  if (begin == end) {
    *id = kMissingId;
    return Status::OK();
  }
  if (end - begin > 8) {
    return LineError(column, "categorical feature " + Quote(begin, end) + " has more than 8 hex digits");
  }
  uint64_t value = 0;
  for (const char* c = begin; c < end; ++c) {
    const int digit = HexDigit(*c);
    if (digit < 0) return LineError(column, "categorical feature " + Quote(begin, end) + " is not hex");
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  *id = value;
  return Status::OK();
}

Status CriteoReader::ParseLine(const char* begin, const char* end, int b, Batch* out) const {
  float* dense = out->dense.data() + static_cast<size_t>(b) * kNumDense;
  uint64_t* ids = out->ids.data() + static_cast<size_t>(b) * kNumSparse;
  if (begin == end) return LineError(1, "empty line, expected " + std::to_string(kNumColumns) + " columns");
  const char* field = begin;
  bool more_fields = true;
  for (int column = 1; column <= kNumColumns; ++column) {
    if (!more_fields) {
      return LineError(column - 1, "line has " + std::to_string(column - 1) + " columns, expected " +
                                       std::to_string(kNumColumns));
    }
    const auto* tab = static_cast<const char*>(std::memchr(field, '\t', end - field));
    const char* field_end = tab != nullptr ? tab : end;
    more_fields = tab != nullptr;
    if (column == 1) {
      if (field_end - field != 1 || (*field != '0' && *field != '1')) {
        return LineError(column, "label " + Quote(field, field_end) + " is not 0 or 1");
      }
      out->labels[b] = *field == '1' ? 1.0f : 0.0f;
    } else if (column <= 1 + kNumDense) {
      int64_t value = 0;
      if (field_end != field && !ParseInt64(field, field_end, &value)) {
        return LineError(column, "integer feature " + Quote(field, field_end) + " is not a decimal int64");
      }
      dense[column - 2] = static_cast<float>(std::log1p(static_cast<double>(value > 0 ? value : 0)));
    } else {
      OSPREY_RETURN_IF_ERROR(ParseHexId(field, field_end, column, &ids[column - 2 - kNumDense]));
    }
    if (more_fields) field = tab + 1;
  }
  if (more_fields) {
    return LineError(kNumColumns + 1, "line has more than " + std::to_string(kNumColumns) + " columns");
  }
  return Status::OK();
}

}  // namespace osprey::data
