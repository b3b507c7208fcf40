// Model mixing (see mixing.h). Built with -ffp-contract=off (core/CMakeLists.txt).
#include "core/mixing.h"

#include <algorithm>
#include <cmath>

#include "base/str.h"
#include "codecs/codec.h"
#include "codecs/frame.h"

namespace fedlgc::core {

void Pull(std::span<float> x, std::span<const float> leader, double c) {
  const float take = static_cast<float>(c);
  // x + c (leader - x): the leader's own pull leaves it exactly where it is.
  for (size_t i = 0; i < x.size(); ++i) x[i] += take * (leader[i] - x[i]);
}

int ExponentialHops(size_t n) {
  if (n < 2) return 0;
  int hops = 0;
  while ((size_t{1} << hops) <= n - 1) ++hops;  // floor(log2(n - 1)) + 1
  return hops;
}

size_t ExponentialPeer(size_t index, size_t n, uint64_t round) {
  if (n < 2) return index;
  const int hops = ExponentialHops(n);
  const uint64_t j = (round == 0 ? 0 : round - 1) % static_cast<uint64_t>(hops);
  return (index + (size_t{1} << j)) % n;
}

void ReconstructShare(std::span<const float> decoded, double pw, std::span<const float> reference,
                      std::span<float> out) {
  const float s = static_cast<float>(pw);
  for (size_t i = 0; i < out.size(); ++i) {
    const float base = reference.empty() ? 0.0f : s * reference[i];
    out[i] = decoded[i] + base;
  }
}

void ShareResidual(std::span<const float> x, double p, double w, std::span<const float> reference,
                   std::span<float> out) {
  const float pf = static_cast<float>(p);
  const float pw = static_cast<float>(p * w);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = pf * x[i] - (reference.empty() ? 0.0f : pw * reference[i]);
  }
}

void ScaleInPlace(std::span<float> values, float scale) {
  for (float& v : values) v *= scale;
}

absl::StatusOr<ScaledFrames> EncodeScaled(std::span<const float> target, codecs::Codec& codec,
                                          const codecs::EncodeOptions& opts) {
  std::vector<codecs::Frame> frames;
  if (absl::Status st = codec.Encode(target, opts, &frames); !st.ok()) return st;
  ScaledFrames out;
  out.decoded.assign(target.size(), 0.0f);
  codecs::FrameLimits limits;
  limits.max_frame_bytes = ~uint64_t{0};
  for (codecs::Frame& f : frames) {
    auto view = codecs::ParseFrame(f.bytes, limits);
    if (!view.ok()) return view.status();
    std::span<float> d = std::span<float>(out.decoded).subspan(view->begin, view->length);
    if (absl::Status st = codec.Decode(*view, d); !st.ok()) return st;
    double dot = 0, norm = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      dot += double(d[i]) * target[view->begin + i];
      norm += double(d[i]) * d[i];
    }
    const float scale = norm > 0 && dot > 0 ? static_cast<float>(dot / norm) : 1.0f;
    ScaleInPlace(d, scale);
    out.scales.push_back(scale);
    out.frames.push_back(std::move(f.bytes));
  }
  return out;
}

absl::StatusOr<Share> MakeShare(std::span<const float> x, double w, double p,
                                std::span<const float> reference, codecs::Codec& codec,
                                const codecs::EncodeOptions& opts) {
  if (!(p > 0 && p <= 1) || !(w > 0) || !std::isfinite(w)) {
    return absl::InvalidArgumentError(StrCat("push-sum share needs p in (0, 1] and w > 0"));
  }
  if (!reference.empty() && reference.size() != x.size()) {
    return absl::InvalidArgumentError("push-sum reference has the wrong size");
  }
  std::vector<float> residual(x.size());
  ShareResidual(x, p, w, reference, residual);
  auto scaled = EncodeScaled(residual, codec, opts);
  if (!scaled.ok()) return scaled.status();
  Share share;
  share.pw = p * w;
  share.frames = std::move(scaled->frames);
  share.scales = std::move(scaled->scales);
  share.full.resize(x.size());
  ReconstructShare(scaled->decoded, share.pw, reference, share.full);
  return share;
}

absl::Status DecodeFrames(const codecs::Codec& codec, const std::vector<std::string>& frames,
                          std::span<const float> scales, std::span<float> out) {
  codecs::FrameLimits limits;
  limits.max_frame_bytes = ~uint64_t{0};
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t k = 0; k < frames.size(); ++k) {
    auto view = codecs::ParseFrame(frames[k], limits);
    if (!view.ok()) return view.status();
    if (view->dim != out.size() || view->begin + view->length > out.size()) {
      return absl::OutOfRangeError("share frame does not fit the model");
    }
    std::span<float> d = out.subspan(view->begin, view->length);
    if (absl::Status st = codec.Decode(*view, d); !st.ok()) return st;
    if (k < scales.size()) ScaleInPlace(d, scales[k]);
  }
  return absl::OkStatus();
}

std::vector<float> Debias(std::span<const float> x, double w) {
  std::vector<float> z(x.size());
  const double inv = 1.0 / w;
  for (size_t i = 0; i < x.size(); ++i) z[i] = static_cast<float>(x[i] * inv);
  return z;
}

double ConsensusDistance(const std::vector<std::span<const float>>& x,
                         const std::vector<double>& w) {
  if (x.size() < 2) return 0;
  const size_t d = x[0].size();
  double wsum = 0;
  for (double v : w) wsum += v;
  std::vector<double> mean(d, 0.0);
  for (const auto& xi : x) {
    for (size_t k = 0; k < d; ++k) mean[k] += xi[k];
  }
  for (double& m : mean) m /= wsum;
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t k = 0; k < d; ++k) {
      const double diff = x[i][k] / w[i] - mean[k];
      total += diff * diff;
    }
  }
  return std::sqrt(total / static_cast<double>(x.size()));
}

}  // namespace fedlgc::core
