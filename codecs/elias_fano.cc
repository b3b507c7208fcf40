// Elias-Fano index coding (see elias_fano.h).
#include "codecs/elias_fano.h"

#include <bit>
#include <cmath>

#include "base/str.h"
#include "codecs/bit_io.h"

namespace fedlgc::codecs {
namespace {

int LowBits(uint64_t k, uint64_t u) {
  if (k == 0 || u <= k) return 0;
  return 63 - std::countl_zero(u / k);  // floor(log2(u/k))
}

}  // namespace

uint64_t EliasFanoBytes(uint64_t k, uint64_t u) {
  if (k == 0) return 0;
  const int l = LowBits(k, u);
  const uint64_t bits = k * static_cast<uint64_t>(l) + k + ((u - 1) >> l);
  return (bits + 7) / 8;
}

void EliasFanoEncode(std::span<const uint32_t> idx, uint64_t u, std::string* out) {
  const uint64_t k = idx.size();
  if (k == 0) return;
  const int l = LowBits(k, u);
  BitWriter w(out);
  for (uint32_t i : idx) w.Write(i, l);
  uint64_t prev_high = 0;
  for (uint32_t i : idx) {
    const uint64_t h = static_cast<uint64_t>(i) >> l;
    w.WriteUnary(h - prev_high);
    prev_high = h;
  }
  // Pad the high part to its fixed length so the size depends on (k, u) only.
  for (uint64_t pad = ((u - 1) >> l) - prev_high; pad > 0;) {
    const int m = static_cast<int>(std::min<uint64_t>(pad, 32));
    w.Write(0, m);
    pad -= static_cast<uint64_t>(m);
  }
  w.Flush();
}

absl::Status EliasFanoDecode(std::span<const uint8_t> in, uint64_t k, uint64_t u,
                             std::vector<uint32_t>* idx) {
  idx->clear();
  if (in.size() != EliasFanoBytes(k, u)) {
    return absl::InvalidArgumentError(StrCat("index code of ", in.size(), " bytes, ",
                                             EliasFanoBytes(k, u), " expected for ", k,
                                             " indices in [0, ", u, ")"));
  }
  if (k == 0) return absl::OkStatus();
  if (k > u || u > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(StrCat(k, " distinct indices cannot lie in [0, ", u, ")"));
  }
  const int l = LowBits(k, u);
  idx->resize(k);
  BitReader r(in);
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t low;
    if (!r.Read(l, &low)) return absl::InvalidArgumentError("index code truncated (low bits)");
    (*idx)[j] = static_cast<uint32_t>(low);
  }
  const uint64_t max_high = (u - 1) >> l;
  uint64_t high = 0;
  int64_t prev = -1;
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t gap;
    if (!r.ReadUnary(max_high - high, &gap)) {
      return absl::InvalidArgumentError("index code corrupt: high part out of range");
    }
    high += gap;
    const uint64_t v = (high << l) | (*idx)[j];
    if (v >= u || static_cast<int64_t>(v) <= prev) {
      return absl::InvalidArgumentError(
          StrCat("index ", v, " out of range or out of order (u=", u, ")"));
    }
    (*idx)[j] = static_cast<uint32_t>(v);
    prev = static_cast<int64_t>(v);
  }
  return absl::OkStatus();
}

double Log2Binomial(uint64_t u, uint64_t k) {
  if (k == 0 || k >= u) return 0;
  const double nats = std::lgamma(static_cast<double>(u) + 1) -
                      std::lgamma(static_cast<double>(k) + 1) -
                      std::lgamma(static_cast<double>(u - k) + 1);
  return nats / std::log(2.0);
}

}  // namespace fedlgc::codecs
