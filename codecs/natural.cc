// Natural compression (see natural.h).
#include "codecs/natural.h"

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/packing.h"
#include "codecs/params.h"
#include "codecs/rng.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

// Returns nonzero if any exponent is 255 (a non-finite input).
FEDLGC_MULTIVERSION uint32_t NaturalEncode(const float* x, size_t n, uint32_t key, uint8_t* exps,
                                           uint8_t* signs) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = FloatBits(x[i]);
    const uint32_t e = (b >> 23) & 0xFFu;
    const uint32_t m = b & 0x7FFFFFu;
    bad |= (e == 0xFFu) ? 1u : 0u;
    const uint32_t up = ((HashBits(key, static_cast<uint32_t>(i)) >> 9) < m && e < 254u) ? 1u : 0u;
    exps[i] = static_cast<uint8_t>(e + up);
    signs[i] = static_cast<uint8_t>(b >> 31);
  }
  return bad;
}

FEDLGC_MULTIVERSION void NaturalDecode(const uint8_t* exps, const uint8_t* signs, size_t n,
                                       float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] =
        BitsFloat((static_cast<uint32_t>(signs[i]) << 31) | (static_cast<uint32_t>(exps[i]) << 23));
  }
}

}  // namespace

NaturalCompression::NaturalCompression()
    : DenseCodec(
          "natural/1",
          CodecTraits{.fixed_size = true, .unbiased = true, .stateful = false, .block = kBlock}) {}

absl::StatusOr<std::unique_ptr<Codec>> NaturalCompression::Create(const SpecNode& node) {
  ParamReader params(node, {});
  FEDLGC_RETURN_IF_ERROR(params.status());
  return std::unique_ptr<Codec>(new NaturalCompression());
}

absl::Status NaturalCompression::EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                            std::string* out) const {
  const size_t n = values.size();
  const size_t base = out->size();
  out->resize(base + MaxBodyBytes(n));
  uint8_t* exps = reinterpret_cast<uint8_t*>(out->data() + base);
  uint8_t* sign_bits = exps + n;
  uint8_t signs[kBlock];
  for (size_t b = 0; b * kBlock < n; ++b) {
    const size_t len = std::min<size_t>(kBlock, n - b * kBlock);
    if (NaturalEncode(values.data() + b * kBlock, len, BlockKey(ctx.seed, ctx.first_block + b),
                      exps + b * kBlock, signs) != 0) {
      return NonFiniteInput(values);
    }
    PackCodes(signs, len, 1, sign_bits + b * (kBlock / 8));
  }
  return absl::OkStatus();
}

absl::Status NaturalCompression::DecodeBody(std::span<const uint8_t> body,
                                            std::span<float> out) const {
  const size_t n = out.size();
  FEDLGC_RETURN_IF_ERROR(ExpectBodyBytes(body, n));
  const uint8_t* exps = body.data();
  if (std::find(exps, exps + n, 0xFF) != exps + n) {
    return NonFiniteError(StrCat(spec(), ": exponent 255 (non-finite) in payload"));
  }
  uint8_t signs[kBlock];
  for (size_t b = 0; b * kBlock < n; ++b) {
    const size_t len = std::min<size_t>(kBlock, n - b * kBlock);
    UnpackCodes(exps + n + b * (kBlock / 8), len, 1, signs);
    NaturalDecode(exps + b * kBlock, signs, len, out.data() + b * kBlock);
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
