// Masks in Z_(2^b) from AES-256-CTR (see mask.h).
#include "privacy/mask.h"

#include <algorithm>
#include <vector>

#include "base/str.h"
#include "privacy/keystream.h"

namespace fedlgc::privacy {

absl::Status ApplyMask(const Key32& seed, int bits, int sign, std::span<uint64_t> values) {
  if (bits < 1 || bits > 64 || (sign != 1 && sign != -1)) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: a mask of ", bits, " bits, sign ",
                                             sign, " (bits in [1, 64], sign +1 or -1)"));
  }
  const uint64_t keep = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  auto stream = Keystream::Create(seed);
  if (!stream.ok()) return stream.status();
  // The fewest whole bytes of keystream a value needs, read little-endian.
  const size_t width = bits <= 8 ? 1 : bits <= 16 ? 2 : bits <= 32 ? 4 : 8;
  constexpr size_t kBlock = 4096;
  std::vector<uint8_t> bytes(kBlock * width);
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const size_t n = std::min(kBlock, values.size() - at);
    if (absl::Status st = stream->NextBytes(std::span(bytes).first(n * width)); !st.ok()) return st;
    for (size_t i = 0; i < n; ++i) {
      uint64_t m = 0;
      for (size_t b = 0; b < width; ++b) m |= uint64_t{bytes[i * width + b]} << (8 * b);
      uint64_t& v = values[at + i];
      v = (sign > 0 ? v + m : v - m) & keep;  // unsigned arithmetic wraps
    }
  }
  return absl::OkStatus();
}

int PairSign(std::string_view self, std::string_view peer) { return self < peer ? 1 : -1; }

}  // namespace fedlgc::privacy
