// TernGrad codec (see terngrad.h).
#include "codecs/terngrad.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/spec.h"
#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/packing.h"
#include "codecs/params.h"
#include "codecs/registry.h"
#include "codecs/rng.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

FEDLGC_MULTIVERSION float ClippedMaxAbs(const float* x, size_t n, float bound) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::min(std::fabs(x[i]), bound));
  return m;
}

FEDLGC_MULTIVERSION void Ternarize(const float* x, size_t n, float bound, float inv_scale,
                                   uint32_t key, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    const float a = std::min(std::fabs(x[i]), bound) * inv_scale;
    const bool keep = HashUniform(key, static_cast<uint32_t>(i)) < a;
    const bool neg = (FloatBits(x[i]) >> 31) != 0;
    codes[i] = static_cast<uint8_t>(keep ? (neg ? 2 : 1) : 0);
  }
}

}  // namespace

TernGrad::TernGrad(std::string spec, uint32_t bucket, float clip, bool shared)
    : DenseCodec(std::move(spec),
                 // As in the paper, senders keep no quantization error, only what did not
                 // count: a ternary code's error is of the order of the value itself, and fed
                 // back it would pile up (as 4-bit QSGD's did). Clipping's bias stays.
                 CodecTraits{.fixed_size = true,
                             .unbiased = clip == 0,
                             .stateful = false,
                             .block = bucket,
                             .no_error_feedback = true}),
      bucket_(bucket),
      clip_(clip),
      shared_(shared) {}

absl::StatusOr<std::unique_ptr<Codec>> TernGrad::Create(const SpecNode& node) {
  ParamReader params(node, {"bucket", "clip", "shared"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(int64_t bucket, params.Int("bucket", 4096, 4, 1 << 24));
  if (bucket % 4 != 0) {
    return params.Error("bucket", StrCat("must be a multiple of 4, got ", bucket));
  }
  FEDLGC_ASSIGN_OR_RETURN(double clip, params.Real("clip", 2.5, 0, 100));
  FEDLGC_ASSIGN_OR_RETURN(bool shared, params.Flag("shared", false));
  return std::unique_ptr<Codec>(
      new TernGrad(StrCat("terngrad/1(bucket=", bucket, ",clip=", FormatSpecNumber(clip),
                          ",shared=", shared ? 1 : 0, ")"),
                   static_cast<uint32_t>(bucket), static_cast<float>(clip), shared));
}

uint64_t TernGrad::MaxBodyBytes(uint64_t n) const {
  const uint64_t nb = (n + bucket_ - 1) / bucket_;
  return nb * 4 + PackedBytes(n, 2);  // bucket % 4 == 0 keeps buckets byte aligned
}

double TernGrad::BoundBitsPerCoord() const { return std::log2(3.0) + 32.0 / bucket_; }

float TernGrad::ClipBound(std::span<const float> x) const {
  if (clip_ == 0 || x.empty()) return std::numeric_limits<float>::infinity();
  double sum = 0;
  double sq = 0;
  for (float v : x) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double mean = sum / x.size();
  const double var = std::max(0.0, sq / x.size() - mean * mean);
  // A constant bucket (or a single value) has nothing to clip against.
  if (var == 0) return std::numeric_limits<float>::infinity();
  return static_cast<float>(clip_ * std::sqrt(var));
}

float TernGrad::LocalScale(std::span<const float> values) const {
  float s = 0;
  for (size_t b = 0; b * bucket_ < values.size(); ++b) {
    const auto x =
        values.subspan(b * bucket_, std::min<size_t>(bucket_, values.size() - b * bucket_));
    s = std::max(s, ClippedMaxAbs(x.data(), x.size(), ClipBound(x)));
  }
  return s;
}

absl::Status TernGrad::EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                  std::string* out) const {
  if (FindNonFinite(values) != values.size()) return NonFiniteInput(values);
  if (shared_ && !(ctx.shared_scale > 0 && std::isfinite(ctx.shared_scale))) {
    return absl::FailedPreconditionError(
        StrCat(spec(), ": shared=1 needs EncodeOptions::shared_scale > 0"));
  }
  const size_t n = values.size();
  const size_t nb = (n + bucket_ - 1) / bucket_;
  const size_t base = out->size();
  out->resize(base + MaxBodyBytes(n));
  std::vector<uint8_t> codes(std::min<size_t>(bucket_, n));
  uint8_t* packed = reinterpret_cast<uint8_t*>(out->data() + base + nb * 4);
  for (size_t b = 0; b < nb; ++b) {
    const auto x = values.subspan(b * bucket_, std::min<size_t>(bucket_, n - b * bucket_));
    float bound = ClipBound(x);
    float scale;
    if (shared_) {
      bound = std::min(bound, ctx.shared_scale);
      scale = ctx.shared_scale;
    } else {
      scale = ClippedMaxAbs(x.data(), x.size(), bound);
    }
    std::memcpy(out->data() + base + 4 * b, &scale, 4);
    Ternarize(x.data(), x.size(), bound, scale > 0 ? 1.0f / scale : 0.0f,
              BlockKey(ctx.seed, ctx.first_block + b), codes.data());
    PackCodes(codes.data(), x.size(), 2, packed + b * (bucket_ / 4));
  }
  return absl::OkStatus();
}

absl::Status TernGrad::DecodeBody(std::span<const uint8_t> body, std::span<float> out) const {
  const size_t n = out.size();
  FEDLGC_RETURN_IF_ERROR(ExpectBodyBytes(body, n));
  const size_t nb = (n + bucket_ - 1) / bucket_;
  std::vector<uint8_t> codes(std::min<size_t>(bucket_, n));
  const uint8_t* packed = body.data() + nb * 4;
  for (size_t b = 0; b < nb; ++b) {
    const size_t len = std::min<size_t>(bucket_, n - b * bucket_);
    float scale;
    std::memcpy(&scale, body.data() + 4 * b, 4);
    if (!std::isfinite(scale) || scale < 0) {
      return NonFiniteError(StrCat(spec(), ": bucket ", b, " has an invalid scale (", scale, ")"));
    }
    UnpackCodes(packed + b * (bucket_ / 4), len, 2, codes.data());
    const float table[4] = {0.0f, scale, -scale, 0.0f};
    uint8_t bad = 0;
    float* o = out.data() + b * bucket_;
    for (size_t i = 0; i < len; ++i) {
      bad |= codes[i] == 3;
      o[i] = table[codes[i]];
    }
    if (bad) {
      return absl::InvalidArgumentError(StrCat(spec(), ": bucket ", b, " holds code 3"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TernGradRoundCodec>> TernGradRoundCodec::Create(
    std::string_view spec, uint64_t dim) {
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> inner, MakeCodec(std::string(spec)));
  const auto* t = dynamic_cast<const TernGrad*>(inner.get());
  if (t == nullptr || !t->shared()) {
    return absl::InvalidArgumentError(StrCat(std::string(spec), " is not terngrad(..., shared=1)"));
  }
  return std::shared_ptr<TernGradRoundCodec>(new TernGradRoundCodec(std::move(inner), dim));
}

CodecTraits TernGradRoundCodec::traits() const {
  CodecTraits t = inner_->traits();
  t.summable = true;
  return t;
}

absl::Status TernGradRoundCodec::Encode(std::span<const float> x, const EncodeOptions& opts,
                                        std::vector<Frame>* frames) {
  EncodeOptions o = opts;
  o.shared_scale = scale();
  return inner_->Encode(x, o, frames);
}

absl::Status TernGradRoundCodec::Decode(const FrameView& frame, std::span<float> out) const {
  const float want = scale();
  if (!(want > 0)) {
    return WrongCodecError(
        StrCat(spec(),
               ": a frame before the round's shared scale was set: a sender that "
               "chose its own"));
  }
  const uint32_t bucket = static_cast<const TernGrad&>(*inner_).bucket();
  const uint64_t buckets = (frame.length + bucket - 1) / bucket;
  if (frame.body.size() < 4 * buckets) {
    return absl::InvalidArgumentError(StrCat(spec(), ": a body too short for its scales"));
  }
  for (uint64_t b = 0; b < buckets; ++b) {
    float s;
    std::memcpy(&s, frame.body.data() + 4 * b, 4);
    if (s != want) {
      return WrongCodecError(
          StrCat(spec(), ": bucket ", b, " carries the scale ", s, "; the round's is ", want));
    }
  }
  return inner_->Decode(frame, out);
}

absl::StatusOr<uint64_t> TernGradRoundCodec::ReadCode(const FrameView& frame,
                                                      std::vector<float>* code) const {
  code->assign(frame.length, 0.0f);
  FEDLGC_RETURN_IF_ERROR(Decode(frame, *code));
  return frame.begin;
}

absl::Status TernGradRoundCodec::DecodeCode(std::span<const float> code,
                                            std::span<float> out) const {
  if (code.size() != dim_ || out.size() != dim_) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": a code of ", code.size(), " floats for ", out.size(), " coordinates"));
  }
  std::copy(code.begin(), code.end(), out.begin());
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
