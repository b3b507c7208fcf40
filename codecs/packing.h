// Packing of b-bit codes (1 <= b <= 8), stored one per byte, into a dense bit stream
// (code i occupies bits [i*b, (i+1)*b), least significant first). PackedBytes(n, b)
// bytes hold n codes; the padding bits of the last byte are zero.
#ifndef FEDLGC_CODECS_PACKING_H_
#define FEDLGC_CODECS_PACKING_H_

#include <cstddef>
#include <cstdint>

namespace fedlgc::codecs {

constexpr size_t PackedBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

// REQUIRES: codes[i] < 2^bits; out holds PackedBytes(n, bits) bytes.
void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out);
// REQUIRES: in holds PackedBytes(n, bits) bytes; codes holds n bytes.
void UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_PACKING_H_
