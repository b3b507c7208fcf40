// Masks in Z_(2^b) from AES-256-CTR (see mask.h).
#include "privacy/mask.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "base/str.h"
#include "privacy/keystream.h"

namespace fedlgc::privacy {

namespace {

// values[i] = values[i] + sum of term t's sign x mask_i mod 2^b, a block of values at a
// time: each term's keystream (`Word`s read little-endian, as x86 and ARM store them)
// added into one accumulator of Words that stays in cache, which wraps mod 2^(Word's
// bits), a multiple of 2^b, then added to the values once. The loops vectorise.
template <typename Word>
absl::Status AddMasks(std::vector<Keystream>& streams, std::span<const MaskTerm> terms,
                      uint64_t keep, std::span<uint64_t> values) {
  static_assert(std::endian::native == std::endian::little);
  constexpr size_t kBlock = 4096;
  Word words[kBlock], sum[kBlock];
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const size_t n = std::min(kBlock, values.size() - at);
    std::fill(sum, sum + n, Word{0});
    for (size_t t = 0; t < streams.size(); ++t) {
      if (absl::Status st =
              streams[t].NextBytes({reinterpret_cast<uint8_t*>(words), n * sizeof(Word)});
          !st.ok()) {
        return st;
      }
      if (terms[t].sign > 0) {
        for (size_t i = 0; i < n; ++i) sum[i] = static_cast<Word>(sum[i] + words[i]);
      } else {
        for (size_t i = 0; i < n; ++i) sum[i] = static_cast<Word>(sum[i] - words[i]);
      }
    }
    uint64_t* v = values.data() + at;
    for (size_t i = 0; i < n; ++i) v[i] = (v[i] + sum[i]) & keep;  // unsigned: wraps
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyMasks(std::span<const MaskTerm> terms, int bits, std::span<uint64_t> values) {
  if (bits < 1 || bits > 64) {
    return absl::InvalidArgumentError(
        StrCat("secure aggregation: a mask of ", bits, " bits (bits in [1, 64])"));
  }
  std::vector<Keystream> streams;
  streams.reserve(terms.size());
  for (const MaskTerm& t : terms) {
    if (t.sign != 1 && t.sign != -1) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: a mask of sign ", t.sign, " (+1 or -1)"));
    }
    auto stream = Keystream::Create(t.seed);
    if (!stream.ok()) return stream.status();
    streams.push_back(*std::move(stream));
  }
  const uint64_t keep = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  // The fewest whole bytes of keystream a value needs.
  if (bits <= 8) return AddMasks<uint8_t>(streams, terms, keep, values);
  if (bits <= 16) return AddMasks<uint16_t>(streams, terms, keep, values);
  if (bits <= 32) return AddMasks<uint32_t>(streams, terms, keep, values);
  return AddMasks<uint64_t>(streams, terms, keep, values);
}

absl::Status ApplyMask(const Key32& seed, int bits, int sign, std::span<uint64_t> values) {
  const MaskTerm term{seed, sign};
  return ApplyMasks({&term, 1}, bits, values);
}

int PairSign(std::string_view self, std::string_view peer) { return self < peer ? 1 : -1; }

}  // namespace fedlgc::privacy
