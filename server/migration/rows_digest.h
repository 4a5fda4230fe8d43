// RowsDigest: a count and an order-independent checksum of every record a Store holds, so a test
// can tell that a scale step kept every row (and its optimizer state) exactly: the checksum is a
// sum (mod 2^64) over records of a hash of (table, key, the record's float bits), so the digests
// of the servers of a job add up to the job's, however its rows are spread.
//
// Thread-safety: as the Store's (call under the server's work lock).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "server/store.h"

namespace osprey::server::migration {

struct RowsDigest {
  uint64_t rows = 0;       // sparse rows
  uint64_t records = 0;    // sparse rows and initialized dense chunks
  uint64_t checksum = 0;
};

// Over tables 0 .. num_tables-1 of `store`.
StatusOr<RowsDigest> DigestStore(const Store& store, uint32_t num_tables);

}  // namespace osprey::server::migration
