// signSGD codec and majority vote (see sign.h).
#include "codecs/sign.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/packing.h"
#include "codecs/params.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {

SignCodec::SignCodec(std::string spec, uint32_t bucket, bool scaled)
    : DenseCodec(
          std::move(spec),
          CodecTraits{.fixed_size = true, .unbiased = false, .stateful = false, .block = bucket}),
      bucket_(bucket),
      scaled_(scaled) {}

absl::StatusOr<std::unique_ptr<Codec>> SignCodec::Create(const SpecNode& node) {
  ParamReader params(node, {"bucket", "scale"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(int64_t bucket, params.Int("bucket", 4096, 8, 1 << 24));
  if (bucket % 8 != 0) {
    return params.Error("bucket", StrCat("must be a multiple of 8, got ", bucket));
  }
  FEDLGC_ASSIGN_OR_RETURN(std::string scale, params.Word("scale", "l1", {"l1", "none"}));
  return std::unique_ptr<Codec>(
      new SignCodec(StrCat("sign/1(bucket=", bucket, ",scale=", scale, ")"),
                    static_cast<uint32_t>(bucket), scale == "l1"));
}

uint64_t SignCodec::MaxBodyBytes(uint64_t n) const {
  const uint64_t nb = (n + bucket_ - 1) / bucket_;
  return (scaled_ ? nb * 4 : 0) + PackedBytes(n, 1);
}

absl::Status SignCodec::EncodeBody(std::span<const float> values, const BodyContext&,
                                   std::string* out) const {
  if (FindNonFinite(values) != values.size()) return NonFiniteInput(values);
  const size_t n = values.size();
  const size_t nb = (n + bucket_ - 1) / bucket_;
  const size_t base = out->size();
  out->resize(base + MaxBodyBytes(n));
  uint8_t* bits = reinterpret_cast<uint8_t*>(out->data() + base + (scaled_ ? nb * 4 : 0));
  std::vector<uint8_t> neg(std::min<size_t>(bucket_, n));
  for (size_t b = 0; b < nb; ++b) {
    const auto x = values.subspan(b * bucket_, std::min<size_t>(bucket_, n - b * bucket_));
    if (scaled_) {
      double l1 = 0;
      for (float v : x) l1 += std::fabs(v);
      const float scale = static_cast<float>(l1 / x.size());
      std::memcpy(out->data() + base + 4 * b, &scale, 4);
    }
    for (size_t i = 0; i < x.size(); ++i) neg[i] = x[i] < 0 ? 1 : 0;
    PackCodes(neg.data(), x.size(), 1, bits + b * (bucket_ / 8));
  }
  return absl::OkStatus();
}

absl::Status SignCodec::DecodeBody(std::span<const uint8_t> body, std::span<float> out) const {
  const size_t n = out.size();
  FEDLGC_RETURN_IF_ERROR(ExpectBodyBytes(body, n));
  const size_t nb = (n + bucket_ - 1) / bucket_;
  const uint8_t* bits = body.data() + (scaled_ ? nb * 4 : 0);
  std::vector<uint8_t> neg(std::min<size_t>(bucket_, n));
  for (size_t b = 0; b < nb; ++b) {
    const size_t len = std::min<size_t>(bucket_, n - b * bucket_);
    float scale = 1.0f;
    if (scaled_) {
      std::memcpy(&scale, body.data() + 4 * b, 4);
      if (!std::isfinite(scale) || scale < 0) {
        return NonFiniteError(
            StrCat(spec(), ": bucket ", b, " has an invalid scale (", scale, ")"));
      }
    }
    UnpackCodes(bits + b * (bucket_ / 8), len, 1, neg.data());
    float* o = out.data() + b * bucket_;
    for (size_t i = 0; i < len; ++i) o[i] = neg[i] ? -scale : scale;
  }
  return absl::OkStatus();
}

void SignMajorityVote(std::span<const std::span<const float>> votes, std::span<float> out) {
  std::vector<int32_t> tally(out.size(), 0);
  for (const auto& v : votes) {
    for (size_t i = 0; i < out.size(); ++i) tally[i] += v[i] < 0 ? -1 : 1;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = tally[i] > 0 ? 1.0f : (tally[i] < 0 ? -1.0f : 0.0f);
  }
}

}  // namespace fedlgc::codecs
