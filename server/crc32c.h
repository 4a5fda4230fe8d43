// CRC32C (Castagnoli), as used by checkpoint blocks: SSE4.2 crc32 instructions when the CPU has
// them (checked once at run time), a byte-table fallback otherwise; both give the same value.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace osprey::server {

// Extends `crc` (0 to start) with `n` bytes at `data`. Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace osprey::server
