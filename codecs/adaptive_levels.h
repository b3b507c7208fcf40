// ALQ and AMQ (Faghri, Tabrizian, Markov, Alistarh, Roy and Ramezani-Kebrya, "Adaptive
// Gradient Quantization for Data-Parallel SGD", NeurIPS 2020): QSGD-style stochastic
// quantization whose levels are fitted to the distribution of normalized coordinates.
//
//   alq(bits=3 | s, bucket=512, norm=l2, elias=0, sweeps=30, sample=65536)   free levels
//   amq(bits=3 | s, bucket=512, norm=l2, elias=0, epochs=40, sample=65536)   levels p^(s-j)
//
// With magnitude levels 0 = l_0 < l_1 < ... < l_s = 1 and r = |v_i| / ||v|| per bucket,
// the quantizer is the one of level_quantizer.h (unbiased), and its variance is
//   V(l) = sum_i ||v||^2 (r_i - l_j)(l_{j+1} - r_i)   for l_j <= r_i < l_{j+1}.
// Encode fits the levels that minimize V over a strided sample of `sample` normalized
// coordinates of the whole input, each weighted by its bucket's ||v||^2 (the empirical
// distribution, not a parametric fit):
//   - ALQ: coordinate descent, each interior level moved to the exact minimizer of V given
//     its neighbours (V is convex and piecewise linear in one level, with breakpoints at
//     the samples), `sweeps` sweeps from uniform, exponential (2^-(s-j)) and quantile
//     starts; the start with the least V wins. No step increases V.
//   - AMQ: levels p^(s-j); normalized gradient descent on V(p) with step halving, `epochs`
//     steps from p = 0.1, 0.2, ..., 0.9; the least V wins.
// Levels are fitted on every encode from the update being encoded and travel in every
// frame, as s - 1 float32 interior levels before the quantizer's body (8 bytes at 3
// bits, 24 at 4): a frame decodes alone, and there is no level state for the two ends to
// disagree on (the paper re-fits on a schedule because it shares one level set between
// all workers of a step; here each sender fits its own, per update). Chunked encodings
// fit once on the whole input, so every frame carries the same levels.
#ifndef FEDLGC_CODECS_ADAPTIVE_LEVELS_H_
#define FEDLGC_CODECS_ADAPTIVE_LEVELS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"
#include "codecs/level_quantizer.h"

namespace fedlgc::codecs {

// The variance objective over a sample of normalized magnitudes r in [0, 1], each with a
// weight w (its bucket's ||v||^2: the variance a coordinate adds is w (r - l_j)(l_{j+1} - r)).
class LevelObjective {
 public:
  // Any order (sorted here); `w` empty: every weight 1, else one per sample, >= 0.
  explicit LevelObjective(std::vector<double> r, std::vector<double> w = {});

  // V of `levels` (0 = l_0 < ... < l_s = 1), divided by the total weight.
  double Variance(std::span<const double> levels) const;
  // Sum over samples in [a, b) of w (r - a)(b - r).
  double Interval(double a, double b) const;
  // dV/dl at level l between neighbours a < l < b (divided by the total weight).
  double Slope(double a, double l, double b) const;
  // The l in (a, b) among the samples that minimizes Interval(a, l) + Interval(l, b), or
  // `current` when no sample does better.
  double BestLevel(double a, double current, double b) const;

  const std::vector<double>& samples() const { return r_; }

 private:
  size_t Index(double x) const;  // first sample >= x
  std::vector<double> r_;
  std::vector<double> s0_, s1_, s2_;  // prefix sums of w, w r and w r^2
};

// ALQ's coordinate descent from `start`; `trace` (optional) receives V after each sweep.
std::vector<double> AlqDescend(const LevelObjective& f, std::vector<double> start, int sweeps,
                               std::vector<double>* trace = nullptr);
// ALQ with its three starts; returns levels l_0 .. l_s.
std::vector<double> FitAlq(const LevelObjective& f, int s, int sweeps);
// AMQ: returns the p of levels p^(s-j) with the least V found.
double FitAmq(const LevelObjective& f, int s, int epochs);
std::vector<double> ExponentialLevels(double p, int s);
// QSGD's levels j / s, j = 0 .. s.
std::vector<double> UniformLevels(int s);

// Thread-safe: holds no mutable state.
class AdaptiveQuantizer final : public DenseCodec {
 public:
  enum class Kind { kAlq, kAmq };
  static absl::StatusOr<std::unique_ptr<Codec>> CreateAlq(const SpecNode& node);
  static absl::StatusOr<std::unique_ptr<Codec>> CreateAmq(const SpecNode& node);

  const std::string& wire_spec() const override { return wire_spec_; }
  uint64_t MaxBodyBytes(uint64_t n) const override;
  absl::Status Fit(std::span<const float> x, std::vector<float>* fitted) const override;
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override { return shape_->BoundBitsPerCoord(); }

  // The levels l_0 .. l_s an encode of x uses (as float, strictly increasing).
  std::vector<float> FitLevels(std::span<const float> x) const;
  // The sampled normalized magnitudes Fit works on, with their weights.
  LevelObjective Sample(std::span<const float> x) const;
  int s() const { return params_.s; }

 private:
  AdaptiveQuantizer(std::string spec, std::string wire_spec, Kind kind, LevelParams params,
                    int iterations, uint64_t sample);
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node, Kind kind);

  std::string wire_spec_;
  Kind kind_;
  LevelParams params_;
  int iterations_;  // ALQ sweeps or AMQ epochs
  uint64_t sample_;
  std::unique_ptr<LevelQuantizer> shape_;  // uniform levels: body sizes and bound
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ADAPTIVE_LEVELS_H_
