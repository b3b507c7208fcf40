// Secure aggregation's summable integer code (see sum_code.h).
#include "codecs/sum_code.h"

#include <algorithm>
#include <cmath>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/level_quantizer.h"
#include "codecs/registry.h"
#include "codecs/rng.h"

namespace fedlgc::codecs {

absl::StatusOr<int> SumCode::LevelsOf(std::string_view codec_spec) {
  const auto refuse = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("secure aggregation sums integer codes on a grid the round shares: --codec must "
               "be qsgd(bits=B) or terngrad(...), unwrapped; ",
               codec_spec, " ", why));
  };
  auto node = ParseSpec(codec_spec);
  if (!node.ok()) return node.status();
  auto made = MakeCodec(codec_spec);
  if (!made.ok()) return made.status();
  if (node->name == "qsgd") {
    const auto* q = dynamic_cast<const LevelQuantizer*>(made->get());
    if (q == nullptr) return refuse("is not a level quantizer");
    if ((*made)->spec().find("elias=1") != std::string::npos) {
      return refuse("entropy-codes its levels (elias=1), which masked codes cannot be");
    }
    return q->s();
  }
  if (node->name == "terngrad") return 1;
  return refuse("is not one (top-k and other sparsifiers choose their own supports; "
                "float and other codecs have no integer code)");
}

absl::StatusOr<SumCode> SumCode::Create(uint64_t dim, int levels, double clip, double kappa,
                                        uint64_t rotation_seed) {
  if (levels < 1 || levels > (1 << 20)) {
    return absl::InvalidArgumentError(StrCat("a sum code of ", levels, " levels"));
  }
  if (!std::isfinite(clip) || !(clip > 0) || !std::isfinite(kappa) || !(kappa > 0)) {
    return absl::InvalidArgumentError(
        StrCat("a sum code needs clip and kappa finite and > 0 (clip ", clip, ", kappa ", kappa,
               ")"));
  }
  auto rotation = Rotation::Create(dim, rotation_seed);
  if (!rotation.ok()) return rotation.status();
  const double step = kappa * clip / (std::sqrt(static_cast<double>(dim)) * levels);
  return SumCode(*std::move(rotation), levels, clip, step);
}

int SumCode::SumBits(int levels, uint64_t n) {
  const double values = 2.0 * static_cast<double>(n) * levels + 1;
  int bits = 1;
  while (std::ldexp(1.0, bits) < values) ++bits;
  return bits;
}

int SumCode::NormBin(double norm) {
  if (!(norm > 0)) return 0;
  const double b = std::floor(2 * std::log2(norm)) + kNormBins / 2;
  return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kNormBins - 1)));
}

double SumCode::NormBinTop(int bin) { return std::exp2((bin - kNormBins / 2 + 1) / 2.0); }

absl::StatusOr<SumCode::Encoded> SumCode::Encode(std::span<const float> x, uint64_t seed) const {
  if (x.size() != dim()) {
    return absl::InvalidArgumentError(
        StrCat("a sum code of ", dim(), " coordinates given ", x.size()));
  }
  Encoded e;
  double sq = 0;
  for (float v : x) {
    if (!std::isfinite(v)) return NonFiniteError("an update to sum holds a value that is not finite");
    sq += static_cast<double>(v) * v;
  }
  e.norm = std::sqrt(sq);
  const double cut = e.norm > clip_ ? clip_ / e.norm : 1.0;
  e.clipped = e.norm > clip_;
  std::vector<double> y(x.begin(), x.end());
  for (double& v : y) v *= cut;
  rotation_.Apply(y);
  e.code.resize(y.size());
  constexpr uint64_t kBlock = 1 << 16;
  const double s = levels_;
  for (uint64_t i = 0; i < y.size(); ++i) {
    const uint32_t key = BlockKey(seed, i / kBlock);
    const double u = HashUniform(key, static_cast<uint32_t>(i % kBlock));
    double c = std::floor(y[i] / step_ + u);
    if (c > s || c < -s) {
      ++e.saturated;
      c = std::clamp(c, -s, s);
    }
    e.code[i] = static_cast<int32_t>(c);
  }
  return e;
}

absl::Status SumCode::DecodeSum(std::span<const int64_t> sum, double divisor,
                                std::span<float> out) const {
  if (sum.size() != dim() || out.size() != dim() || !(divisor > 0)) {
    return absl::InvalidArgumentError(StrCat("decoding a sum of ", sum.size(), " codes into ",
                                             out.size(), " of ", dim(), " by ", divisor));
  }
  std::vector<double> y(sum.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<double>(sum[i]) * step_;
  rotation_.Invert(y);
  for (size_t i = 0; i < y.size(); ++i) out[i] = static_cast<float>(y[i] / divisor);
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
