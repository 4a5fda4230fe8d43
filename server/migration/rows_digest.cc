#include "server/migration/rows_digest.h"

#include <cstring>

#include "common/placement.h"

namespace osprey::server::migration {

StatusOr<RowsDigest> DigestStore(const Store& store, uint32_t num_tables) {
  RowsDigest d;
  for (uint32_t t = 0; t < num_tables; ++t) {
    d.rows += store.num_rows(t);
    OSPREY_RETURN_IF_ERROR(store.ExportRecords(t, [&](uint64_t key, const float* data, size_t n) {
      uint64_t h = Mix64((uint64_t{t} << 48) ^ key);
      for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, data + i, sizeof(bits));
        h = Mix64(h ^ bits);
      }
      d.checksum += h;
      ++d.records;
      return Status::OK();
    }));
  }
  return d;
}

}  // namespace osprey::server::migration
