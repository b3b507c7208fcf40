// Bit packing with fast paths for 8, 4, 2 and 1 bits and a generic 8-codes-per-word path.
#include "codecs/packing.h"

#include <cstring>

#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

template <int B>
void PackGeneric(const uint8_t* c, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    for (int j = 0; j < 8; ++j) w |= static_cast<uint64_t>(c[i + j]) << (B * j);
    std::memcpy(out, &w, B);
    out += B;
  }
  uint64_t w = 0;
  int nb = 0;
  for (; i < n; ++i, nb += B) w |= static_cast<uint64_t>(c[i]) << nb;
  if (nb > 0) std::memcpy(out, &w, static_cast<size_t>((nb + 7) / 8));
}

template <int B>
void UnpackGeneric(const uint8_t* in, size_t n, uint8_t* c) {
  constexpr uint64_t kMask = (uint64_t{1} << B) - 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, in, B);
    in += B;
    for (int j = 0; j < 8; ++j) c[i + j] = static_cast<uint8_t>((w >> (B * j)) & kMask);
  }
  const size_t rest = n - i;
  if (rest == 0) return;
  uint64_t w = 0;
  std::memcpy(&w, in, (rest * B + 7) / 8);
  for (size_t j = 0; j < rest; ++j) c[i + j] = static_cast<uint8_t>((w >> (B * j)) & kMask);
}

FEDLGC_MULTIVERSION void Pack4(const uint8_t* c, size_t n, uint8_t* out) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    out[i] = static_cast<uint8_t>(c[2 * i] | (c[2 * i + 1] << 4));
  }
  if (n & 1) out[pairs] = c[n - 1];
}

FEDLGC_MULTIVERSION void Unpack4(const uint8_t* in, size_t n, uint8_t* c) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    c[2 * i] = in[i] & 15;
    c[2 * i + 1] = in[i] >> 4;
  }
  if (n & 1) c[n - 1] = in[pairs] & 15;
}

}  // namespace

void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  switch (bits) {
    case 8:
      std::memcpy(out, codes, n);
      return;
    case 4:
      Pack4(codes, n, out);
      return;
    case 1:
      PackGeneric<1>(codes, n, out);
      return;
    case 2:
      PackGeneric<2>(codes, n, out);
      return;
    case 3:
      PackGeneric<3>(codes, n, out);
      return;
    case 5:
      PackGeneric<5>(codes, n, out);
      return;
    case 6:
      PackGeneric<6>(codes, n, out);
      return;
    case 7:
      PackGeneric<7>(codes, n, out);
      return;
    default:
      return;
  }
}

void UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  switch (bits) {
    case 8:
      std::memcpy(codes, in, n);
      return;
    case 4:
      Unpack4(in, n, codes);
      return;
    case 1:
      UnpackGeneric<1>(in, n, codes);
      return;
    case 2:
      UnpackGeneric<2>(in, n, codes);
      return;
    case 3:
      UnpackGeneric<3>(in, n, codes);
      return;
    case 5:
      UnpackGeneric<5>(in, n, codes);
      return;
    case 6:
      UnpackGeneric<6>(in, n, codes);
      return;
    case 7:
      UnpackGeneric<7>(in, n, codes);
      return;
    default:
      return;
  }
}

}  // namespace fedlgc::codecs
