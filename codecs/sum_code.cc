// Secure aggregation's summable integer code (see sum_code.h).
#include "codecs/sum_code.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/level_quantizer.h"
#include "codecs/registry.h"
#include "codecs/rng.h"
#include "codecs/sparse_codec.h"

namespace fedlgc::codecs {

namespace {

absl::Status Refuse(std::string_view codec_spec, std::string_view why) {
  return absl::InvalidArgumentError(
      StrCat("secure aggregation sums integer codes on a grid the round shares: --codec must "
             "be qsgd(bits=B), terngrad(...) or randk(..., values=one of them, seed=...), "
             "unwrapped; ",
             codec_spec, " ", why));
}

// The levels of a dense level code: qsgd without elias, or terngrad.
absl::StatusOr<int> DenseLevels(const SpecNode& node, std::string_view codec_spec) {
  auto made = MakeCodec(FormatSpec(node));
  if (!made.ok()) return made.status();
  if (node.name == "qsgd") {
    const auto* q = dynamic_cast<const LevelQuantizer*>(made->get());
    if (q == nullptr) return Refuse(codec_spec, "is not a level quantizer");
    if ((*made)->spec().find("elias=1") != std::string::npos) {
      return Refuse(codec_spec, "entropy-codes its levels (elias=1), which masked codes cannot be");
    }
    return q->s();
  }
  if (node.name == "terngrad") return 1;
  return Refuse(codec_spec,
                "is not one (top-k and other sparsifiers choose their own supports; float "
                "and other codecs have no integer code)");
}

// The values codec of a randk node, and whether it names a seed (shared supports).
const SpecNode* RandkValues(const SpecNode& node, bool* seeded) {
  const SpecNode* values = nullptr;
  for (const SpecArg& a : node.args) {
    if (a.key == "values" && a.node) values = a.node.get();
    if (a.key == "seed") *seeded = true;
  }
  return values;
}

}  // namespace

absl::StatusOr<int> SumCode::LevelsOf(std::string_view codec_spec) {
  auto node = ParseSpec(codec_spec);
  if (!node.ok()) return node.status();
  if (node->name == "randk") {
    bool seeded = false;
    const SpecNode* values = RandkValues(*node, &seeded);
    if (!seeded) return Refuse(codec_spec, "draws each client's support alone (give it seed=)");
    if (values == nullptr) return Refuse(codec_spec, "sends float values (give it values=qsgd(...))");
    return DenseLevels(*values, codec_spec);
  }
  return DenseLevels(*node, codec_spec);
}

absl::StatusOr<uint64_t> SumCode::KeptOf(std::string_view codec_spec, uint64_t dim) {
  if (absl::Status st = LevelsOf(codec_spec).status(); !st.ok()) return st;
  auto node = ParseSpec(codec_spec);
  if (!node.ok()) return node.status();
  if (node->name != "randk") return dim;
  double ratio = 0, k = 0;
  for (const SpecArg& a : node->args) {
    if (a.key == "ratio" && a.is_number) ratio = a.number;
    if (a.key == "k" && a.is_number) k = a.number;
  }
  const uint64_t kept = k > 0 ? static_cast<uint64_t>(k) : KeptForRatio(ratio, dim);
  if (kept == 0 || kept > dim) {
    return Refuse(codec_spec, StrCat("keeps ", kept, " of ", dim, " coordinates"));
  }
  return kept;
}

absl::StatusOr<SumCode> SumCode::Create(uint64_t dim, int levels, double clip, double kappa,
                                        uint64_t rotation_seed, uint64_t kept) {
  if (levels < 1 || levels > (1 << 20)) {
    return absl::InvalidArgumentError(StrCat("a sum code of ", levels, " levels"));
  }
  if (!std::isfinite(clip) || !(clip > 0) || !std::isfinite(kappa) || !(kappa > 0)) {
    return absl::InvalidArgumentError(
        StrCat("a sum code needs clip and kappa finite and > 0 (clip ", clip, ", kappa ", kappa,
               ")"));
  }
  if (kept > dim) return absl::InvalidArgumentError(StrCat("a sum code keeping ", kept, " of ", dim));
  auto rotation = Rotation::Create(dim, rotation_seed);
  if (!rotation.ok()) return rotation.status();
  const double step = kappa * clip / (std::sqrt(static_cast<double>(dim)) * levels);
  std::vector<uint32_t> support;
  if (kept > 0 && kept < dim) {
    // A partial Fisher-Yates from the rotation's seed: the same k for every client.
    std::vector<uint32_t> all(dim);
    for (uint64_t i = 0; i < dim; ++i) all[i] = static_cast<uint32_t>(i);
    SplitMix rng(Mix64(rotation_seed ^ 0x52414E444Bull));
    for (uint64_t i = 0; i < kept; ++i) std::swap(all[i], all[i + rng.Below(dim - i)]);
    support.assign(all.begin(), all.begin() + static_cast<int64_t>(kept));
    std::sort(support.begin(), support.end());
  }
  return SumCode(*std::move(rotation), levels, clip, step, std::move(support));
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
  e.code.resize(code_size());
  constexpr uint64_t kBlock = 1 << 16;
  const double s = levels_;
  for (uint64_t i = 0; i < code_size(); ++i) {
    const uint32_t key = BlockKey(seed, i / kBlock);
    const double u = HashUniform(key, static_cast<uint32_t>(i % kBlock));
    const double v = support_.empty() ? y[i] : y[support_[i]];
    double c = std::floor(v / step_ + u);
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
  if (sum.size() != code_size() || out.size() != dim() || !(divisor > 0)) {
    return absl::InvalidArgumentError(StrCat("decoding a sum of ", sum.size(), " codes into ",
                                             out.size(), " of ", dim(), " by ", divisor));
  }
  std::vector<double> y(dim(), 0.0);
  if (support_.empty()) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<double>(sum[i]) * step_;
  } else {
    // Rand-k's estimate: each kept coordinate stands for d / k of them.
    const double scale = step_ * static_cast<double>(dim()) / static_cast<double>(code_size());
    for (size_t i = 0; i < support_.size(); ++i) y[support_[i]] = static_cast<double>(sum[i]) * scale;
  }
  rotation_.Invert(y);
  for (size_t i = 0; i < y.size(); ++i) out[i] = static_cast<float>(y[i] / divisor);
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
