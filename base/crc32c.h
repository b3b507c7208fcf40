// CRC32C (Castagnoli), the checksum on every fedlgc frame. Uses the SSE4.2 crc32
// instruction when the CPU has it and a slicing-by-8 table otherwise.
#ifndef FEDLGC_BASE_CRC32C_H_
#define FEDLGC_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace fedlgc {

// Extends `crc` (the value returned for the data so far; 0 to start) with `n` bytes.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace fedlgc

#endif  // FEDLGC_BASE_CRC32C_H_
