// Level quantizers: QSGD, NUQSGD and natural dithering (see level_quantizer.h).
#include "codecs/level_quantizer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/bit_io.h"
#include "codecs/input_error.h"
#include "codecs/packing.h"
#include "codecs/params.h"
#include "codecs/rng.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

// Norms below this are quantized from a copy scaled by 2^kTinyShift, so s / norm and
// 1 / norm stay finite.
constexpr float kTinyNorm = 0x1p-60f;
constexpr int kTinyShift = 64;

int BitsForLevels(int s) { return std::bit_width(static_cast<unsigned>(2 * s)); }

// Sum of squares with eight independent accumulators so the loop vectorizes without
// reassociation flags.
FEDLGC_MULTIVERSION float SumSquares(const float* x, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * x[i + j];
  }
  float s = 0;
  for (; i < n; ++i) s += x[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

FEDLGC_MULTIVERSION float MaxAbs(const float* x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Uniform levels j/s: a = |x| * s / norm, level floor(a) or floor(a)+1.
FEDLGC_MULTIVERSION void QuantizeUniform(const float* x, size_t n, float scale, int s, uint32_t key,
                                         uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]) * scale;
    int l = static_cast<int>(a);  // a >= 0: truncation is floor
    const float p = a - static_cast<float>(l);
    const float u = HashUniform(key, static_cast<uint32_t>(i));
    l += (u < p) ? 1 : 0;
    l = std::min(l, s);
    const bool neg = (FloatBits(x[i]) >> 31) != 0;
    codes[i] = static_cast<uint8_t>(neg ? s - l : s + l);
  }
}

// Exponential levels 2^(j-s), j = 1..s, and 0. For r >= 2^(1-s) the interval is
// [2^e, 2^(e+1)) and the round-up probability is the mantissa fraction; below it the
// interval is [0, 2^(1-s)).
FEDLGC_MULTIVERSION void QuantizeExp2(const float* x, size_t n, float inv_norm, int s, uint32_t key,
                                      uint8_t* codes) {
  // Written with integer compares and arithmetic blends instead of float min and
  // ternaries: GCC 12 vectorizes this form and not the obvious one.
  const float small_scale = std::ldexp(1.0f, s - 1);  // <= 2^126: finite for s <= 127
  const uint32_t small_top = FloatBits(std::ldexp(1.0f, 1 - s));
  for (size_t i = 0; i < n; ++i) {
    // r = min(|x| / norm, 1), clamped on the bit pattern (ordered like the value).
    const uint32_t rb = std::min(FloatBits(std::fabs(x[i]) * inv_norm), 0x3F800000u);
    const int e = static_cast<int>(rb >> 23) - 127;  // r in [2^e, 2^(e+1)) when normal
    const uint32_t h = HashBits(key, static_cast<uint32_t>(i));
    // In [2^e, 2^(e+1)) the round-up probability is the mantissa fraction (both sides
    // below 2^23: a signed compare).
    const int up = static_cast<int>(h >> 9) < static_cast<int>(rb & 0x7FFFFFu) ? 1 : 0;
    const int big = s + e + up;
    // Below 2^(1-s) the interval is [0, 2^(1-s)) and the probability r * 2^(s-1) <= 1.
    const float p_small = BitsFloat(std::min(rb, small_top)) * small_scale;
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
    const int small = u < p_small ? 1 : 0;
    const int use_big = e >= 1 - s ? 1 : 0;
    const int l = small + use_big * (big - small);
    const int sign = 1 - 2 * static_cast<int>(FloatBits(x[i]) >> 31);
    codes[i] = static_cast<uint8_t>(s + sign * l);
  }
}

void QuantizeTable(const float* x, size_t n, float inv_norm, const std::vector<float>& lv,
                   uint32_t key, uint8_t* codes) {
  const int s = static_cast<int>(lv.size()) - 1;
  for (size_t i = 0; i < n; ++i) {
    const float r = std::min(std::fabs(x[i]) * inv_norm, 1.0f);
    int l = s;
    if (r < 1.0f) {
      const int j = static_cast<int>(std::upper_bound(lv.begin(), lv.end(), r) - lv.begin()) - 1;
      const float p = (r - lv[j]) / (lv[j + 1] - lv[j]);
      l = j + ((HashUniform(key, static_cast<uint32_t>(i)) < p) ? 1 : 0);
    }
    const bool neg = (FloatBits(x[i]) >> 31) != 0;
    codes[i] = static_cast<uint8_t>(neg ? s - l : s + l);
  }
}

}  // namespace

float UniformLevelScale(float norm, int s) {
  // norm / s rounded down where needed, so s * scale <= norm and no decoded value can
  // exceed the norm (norm = FLT_MAX would otherwise decode to infinity).
  const float fs = static_cast<float>(s);
  float scale = norm / fs;
  while (scale * fs > norm) scale = std::nextafter(scale, 0.0f);
  return scale;
}

namespace {

FEDLGC_MULTIVERSION uint8_t MaxCode(const uint8_t* c, size_t n) {
  uint8_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, c[i]);
  return m;
}

FEDLGC_MULTIVERSION void DequantizeUniform(const uint8_t* c, size_t n, float s, float scale,
                                           float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = (static_cast<float>(c[i]) - s) * scale;
}

void DequantizeTable(const uint8_t* c, size_t n, const float* value, float norm, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = value[c[i]] * norm;
}

}  // namespace

absl::StatusOr<LevelParams> ReadLevelParams(const ParamReader& params, bool allow_bits,
                                            int def_bits, int def_s) {
  LevelParams c;
  if (allow_bits && params.Has("bits") && params.Has("s")) {
    return params.Error("bits", "and 's' both given; give one of them");
  }
  if (allow_bits && (params.Has("bits") || !params.Has("s"))) {
    FEDLGC_ASSIGN_OR_RETURN(int64_t bits, params.Int("bits", def_bits, 2, 8));
    c.s = (1 << (bits - 1)) - 1;
    c.bits_or_s = StrCat("bits=", bits);
  } else {
    FEDLGC_ASSIGN_OR_RETURN(int64_t s, params.Int("s", def_s, 1, 127));
    c.s = static_cast<int>(s);
    c.bits_or_s = (allow_bits && c.s == (1 << (BitsForLevels(c.s) - 1)) - 1)
                      ? StrCat("bits=", BitsForLevels(c.s))
                      : StrCat("s=", s);
  }
  FEDLGC_ASSIGN_OR_RETURN(int64_t bucket, params.Int("bucket", 512, 8, 1 << 20));
  if (bucket % 8 != 0)
    return params.Error("bucket", StrCat("must be a multiple of 8, got ", bucket));
  c.bucket = static_cast<uint32_t>(bucket);
  absl::StatusOr<std::string> norm = params.Word("norm", "l2", {"l2", "linf"});
  if (!norm.ok()) return norm.status();
  c.norm = *norm == "linf" ? NormKind::kLinf : NormKind::kL2;
  FEDLGC_ASSIGN_OR_RETURN(c.elias, params.Flag("elias", false));
  return c;
}

std::string LevelParamsSuffix(const LevelParams& c) {
  return StrCat(",bucket=", c.bucket, ",norm=", c.norm == NormKind::kL2 ? "l2" : "linf",
                ",elias=", c.elias ? 1 : 0, ")");
}

std::unique_ptr<LevelQuantizer> LevelQuantizer::WithLevels(std::string spec,
                                                           std::vector<float> levels, NormKind norm,
                                                           uint32_t bucket, bool elias) {
  return std::unique_ptr<LevelQuantizer>(
      new LevelQuantizer(std::move(spec), Kind::kTable, std::move(levels), norm, bucket, elias));
}

LevelQuantizer::LevelQuantizer(std::string spec, Kind kind, std::vector<float> levels,
                               NormKind norm, uint32_t bucket, bool elias)
    : DenseCodec(
          std::move(spec),
          CodecTraits{.fixed_size = !elias, .unbiased = true, .stateful = false, .block = bucket}),
      kind_(kind),
      levels_(std::move(levels)),
      s_(static_cast<int>(levels_.size()) - 1),
      bits_(BitsForLevels(s_)),
      norm_(norm),
      bucket_(bucket),
      elias_(elias) {
  code_value_.assign(size_t{1} << bits_, 0.0f);
  for (int c = 0; c <= 2 * s_; ++c) {
    const int l = c - s_;
    code_value_[c] = l < 0 ? -levels_[-l] : levels_[l];
  }
}

absl::StatusOr<std::unique_ptr<Codec>> LevelQuantizer::CreateQsgd(const SpecNode& node) {
  ParamReader params(node, {"bits", "s", "bucket", "norm", "elias"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(LevelParams c, ReadLevelParams(params, true, 8, 127));
  std::vector<float> lv(c.s + 1);
  for (int j = 0; j <= c.s; ++j) lv[j] = static_cast<float>(j) / static_cast<float>(c.s);
  return std::unique_ptr<Codec>(
      new LevelQuantizer(StrCat("qsgd/1(", c.bits_or_s, LevelParamsSuffix(c)), Kind::kUniform,
                         std::move(lv), c.norm, c.bucket, c.elias));
}

absl::StatusOr<std::unique_ptr<Codec>> LevelQuantizer::CreateNuqsgd(const SpecNode& node) {
  ParamReader params(node, {"bits", "s", "p", "bucket", "norm", "elias"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(LevelParams c, ReadLevelParams(params, true, 4, 7));
  FEDLGC_ASSIGN_OR_RETURN(double p, params.Real("p", 0.5, 0.01, 0.99));
  std::vector<float> lv(c.s + 1, 0.0f);
  for (int j = 1; j <= c.s; ++j) lv[j] = static_cast<float>(std::pow(p, c.s - j));
  for (int j = 1; j <= c.s; ++j) {
    if (!(lv[j] > lv[j - 1])) {
      return params.Error(
          "p", StrCat("=", p, " with s=", c.s, " makes levels underflow float; use fewer levels"));
    }
  }
  const Kind kind = p == 0.5 && c.s <= 126 ? Kind::kExp2 : Kind::kTable;
  return std::unique_ptr<Codec>(new LevelQuantizer(
      StrCat("nuqsgd/1(", c.bits_or_s, ",p=", FormatSpecNumber(p), LevelParamsSuffix(c)), kind,
      std::move(lv), c.norm, c.bucket, c.elias));
}

absl::StatusOr<std::unique_ptr<Codec>> LevelQuantizer::CreateNatDither(const SpecNode& node) {
  ParamReader params(node, {"s", "bucket", "norm", "elias"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(LevelParams c, ReadLevelParams(params, false, 0, 8));
  std::vector<float> lv(c.s + 1, 0.0f);
  for (int j = 1; j <= c.s; ++j) lv[j] = std::ldexp(1.0f, j - c.s);
  return std::unique_ptr<Codec>(
      new LevelQuantizer(StrCat("natdither/1(", c.bits_or_s, LevelParamsSuffix(c)), Kind::kExp2,
                         std::move(lv), c.norm, c.bucket, c.elias));
}

uint64_t LevelQuantizer::MaxBodyBytes(uint64_t n) const {
  const uint64_t nb = (n + bucket_ - 1) / bucket_;
  const uint64_t full = n / bucket_;
  const uint64_t tail = n % bucket_;
  if (!elias_) return nb * 4 + full * PackedBytes(bucket_, bits_) + PackedBytes(tail, bits_);
  const uint64_t per_coord = 2 + static_cast<uint64_t>(BitWriter::GammaBits(s_));
  uint64_t bits = n * per_coord + full * BitWriter::GammaBits(bucket_ + 1);
  if (tail) bits += BitWriter::GammaBits(tail + 1);
  return nb * 4 + (bits + 7) / 8;
}

double LevelQuantizer::BoundBitsPerCoord() const {
  return std::log2(2.0 * s_ + 1.0) + 32.0 / bucket_;
}

float LevelQuantizer::BucketNorm(std::span<const float> x) const {
  if (norm_ == NormKind::kLinf) return MaxAbs(x.data(), x.size());
  const float ss = SumSquares(x.data(), x.size());
  if (std::isfinite(ss) && ss >= std::numeric_limits<float>::min()) return std::sqrt(ss);
  if (ss == 0 && MaxAbs(x.data(), x.size()) == 0) return 0;
  // Overflow or underflow of the float sum (or a non-finite value, which the caller
  // rejects): sum in double.
  double d = 0;
  for (float v : x) d += static_cast<double>(v) * v;
  return static_cast<float>(std::sqrt(d));
}

void LevelQuantizer::Quantize(std::span<const float> x, float norm, uint32_t key,
                              uint8_t* codes) const {
  const float inv = norm > 0 ? 1.0f / norm : 0.0f;
  switch (kind_) {
    case Kind::kUniform:
      QuantizeUniform(x.data(), x.size(), norm > 0 ? static_cast<float>(s_) / norm : 0.0f, s_, key,
                      codes);
      return;
    case Kind::kExp2:
      QuantizeExp2(x.data(), x.size(), inv, s_, key, codes);
      return;
    case Kind::kTable:
      QuantizeTable(x.data(), x.size(), inv, levels_, key, codes);
      return;
  }
}

absl::Status LevelQuantizer::EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                        std::string* out) const {
  const size_t n = values.size();
  const size_t nb = (n + bucket_ - 1) / bucket_;
  const size_t base = out->size();
  std::vector<uint8_t> codes(std::min<size_t>(bucket_, n));
  // Norms first, then the code section.
  out->resize(base + nb * 4 + (elias_ ? 0 : MaxBodyBytes(n) - nb * 4));
  size_t code_pos = base + nb * 4;
  std::string elias_bits;
  BitWriter bw(&elias_bits);
  std::vector<float> tiny;
  for (size_t b = 0; b < nb; ++b) {
    const auto x = values.subspan(b * bucket_, std::min<size_t>(bucket_, n - b * bucket_));
    const float norm = BucketNorm(x);
    // The L2 norm turns NaN and infinity into a non-finite norm; the max skips NaN, so
    // the L-inf path checks the (cache-hot) bucket itself.
    if (!std::isfinite(norm) || (norm_ == NormKind::kLinf && FindNonFinite(x) != x.size())) {
      if (FindNonFinite(x) != x.size()) return NonFiniteInput(values);
      return absl::InvalidArgumentError(
          StrCat(spec(), ": the norm of bucket ", b, " overflows float32"));
    }
    std::memcpy(out->data() + base + 4 * b, &norm, 4);
    const uint32_t key = BlockKey(ctx.seed, ctx.first_block + b);
    if (norm > 0 && norm < kTinyNorm) {
      // s / norm would overflow: quantize an exactly rescaled copy (levels are relative
      // to the norm, so the codes are the same).
      tiny.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) tiny[i] = std::ldexp(x[i], kTinyShift);
      Quantize(tiny, std::ldexp(norm, kTinyShift), key, codes.data());
    } else {
      Quantize(x, norm, key, codes.data());
    }
    if (!elias_) {
      PackCodes(codes.data(), x.size(), bits_, reinterpret_cast<uint8_t*>(out->data() + code_pos));
      code_pos += PackedBytes(x.size(), bits_);
      continue;
    }
    size_t nnz = 0;
    for (size_t i = 0; i < x.size(); ++i) nnz += codes[i] != s_;
    bw.WriteGamma(nnz + 1);
    int64_t prev = -1;
    for (size_t i = 0; i < x.size(); ++i) {
      const int l = static_cast<int>(codes[i]) - s_;
      if (l == 0) continue;
      bw.WriteGamma(static_cast<uint64_t>(static_cast<int64_t>(i) - prev));
      bw.WriteBit(l < 0);
      bw.WriteGamma(static_cast<uint64_t>(std::abs(l)));
      prev = static_cast<int64_t>(i);
    }
  }
  if (elias_) {
    bw.Flush();
    out->append(elias_bits);
  }
  return absl::OkStatus();
}

absl::Status LevelQuantizer::DecodeBody(std::span<const uint8_t> body, std::span<float> out) const {
  const size_t n = out.size();
  const size_t nb = (n + bucket_ - 1) / bucket_;
  if (body.size() < nb * 4) {
    return absl::InvalidArgumentError(StrCat(spec(), ": body too short for ", nb, " norms"));
  }
  for (size_t b = 0; b < nb; ++b) {
    float norm;
    std::memcpy(&norm, body.data() + 4 * b, 4);
    if (!std::isfinite(norm) || norm < 0) {
      return NonFiniteError(StrCat(spec(), ": bucket ", b, " has an invalid norm (", norm, ")"));
    }
  }
  if (elias_) return DecodeElias(body, out);
  FEDLGC_RETURN_IF_ERROR(ExpectBodyBytes(body, n));
  std::vector<uint8_t> codes(std::min<size_t>(bucket_, n));
  const uint8_t* p = body.data() + nb * 4;
  for (size_t b = 0; b < nb; ++b) {
    const size_t len = std::min<size_t>(bucket_, n - b * bucket_);
    float norm;
    std::memcpy(&norm, body.data() + 4 * b, 4);
    UnpackCodes(p, len, bits_, codes.data());
    const size_t used = len * static_cast<size_t>(bits_);
    if (used % 8 != 0 && (p[used / 8] >> (used % 8)) != 0) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": bucket ", b, " has padding bits set (the encoder writes zeros)"));
    }
    p += PackedBytes(len, bits_);
    if (MaxCode(codes.data(), len) > 2 * s_) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": bucket ", b, " holds a code above ", 2 * s_));
    }
    float* o = out.data() + b * bucket_;
    if (kind_ == Kind::kUniform) {
      DequantizeUniform(codes.data(), len, static_cast<float>(s_), UniformLevelScale(norm, s_), o);
    } else {
      DequantizeTable(codes.data(), len, code_value_.data(), norm, o);
    }
  }
  return absl::OkStatus();
}

absl::Status LevelQuantizer::DecodeElias(std::span<const uint8_t> body,
                                         std::span<float> out) const {
  const size_t n = out.size();
  const size_t nb = (n + bucket_ - 1) / bucket_;
  const auto stream = body.subspan(nb * 4);
  BitReader br(stream);
  auto corrupt = [&](size_t b, const char* what) {
    return absl::InvalidArgumentError(StrCat(spec(), ": bucket ", b, ": ", what));
  };
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t b = 0; b < nb; ++b) {
    const size_t len = std::min<size_t>(bucket_, n - b * bucket_);
    float norm;
    std::memcpy(&norm, body.data() + 4 * b, 4);
    const float uniform_scale = UniformLevelScale(norm, s_);
    uint64_t nnz1;
    if (!br.ReadGamma(&nnz1)) return corrupt(b, "truncated count");
    if (nnz1 - 1 > len) return corrupt(b, "more nonzeros than coordinates");
    float* o = out.data() + b * bucket_;
    uint64_t pos = ~uint64_t{0};
    for (uint64_t k = 0; k + 1 < nnz1; ++k) {
      uint64_t gap;
      bool neg;
      uint64_t level;
      if (!br.ReadGamma(&gap) || !br.ReadBit(&neg) || !br.ReadGamma(&level)) {
        return corrupt(b, "truncated stream");
      }
      pos += gap;
      if (gap > len || pos >= len) return corrupt(b, "position out of range");
      if (level > static_cast<uint64_t>(s_)) return corrupt(b, "level out of range");
      // The same arithmetic as the packed decoders, so both forms decode identically.
      const float v = kind_ == Kind::kUniform ? static_cast<float>(level) * uniform_scale
                                              : levels_[level] * norm;
      o[pos] = neg ? -v : v;
    }
  }
  if (br.BytesConsumed() != stream.size()) {
    return absl::InvalidArgumentError(StrCat(spec(), ": ", stream.size() - br.BytesConsumed(),
                                             " trailing bytes after the last bucket"));
  }
  if (!br.UnreadBitsAreZero()) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": padding bits after the last bucket are set (the encoder writes zeros)"));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
