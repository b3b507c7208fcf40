// ALQ and AMQ level fitting and the codec that carries fitted levels (see adaptive_levels.h).
#include "codecs/adaptive_levels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {

LevelObjective::LevelObjective(std::vector<double> r, std::vector<double> w) {
  if (w.size() != r.size()) w.assign(r.size(), 1.0);
  std::vector<std::pair<double, double>> rw(r.size());
  for (size_t i = 0; i < r.size(); ++i) rw[i] = {r[i], w[i]};
  std::sort(rw.begin(), rw.end());
  r_.resize(rw.size());
  s0_.assign(rw.size() + 1, 0.0);
  s1_.assign(rw.size() + 1, 0.0);
  s2_.assign(rw.size() + 1, 0.0);
  for (size_t i = 0; i < rw.size(); ++i) {
    const auto [ri, wi] = rw[i];
    r_[i] = ri;
    s0_[i + 1] = s0_[i] + wi;
    s1_[i + 1] = s1_[i] + wi * ri;
    s2_[i + 1] = s2_[i] + wi * ri * ri;
  }
}

size_t LevelObjective::Index(double x) const {
  return static_cast<size_t>(std::lower_bound(r_.begin(), r_.end(), x) - r_.begin());
}

double LevelObjective::Interval(double a, double b) const {
  const size_t i = Index(a), j = Index(b);
  if (j <= i) return 0;
  return -(s2_[j] - s2_[i]) + (a + b) * (s1_[j] - s1_[i]) - a * b * (s0_[j] - s0_[i]);
}

double LevelObjective::Variance(std::span<const double> levels) const {
  if (r_.empty() || s0_.back() <= 0) return 0;
  double v = 0;
  for (size_t j = 0; j + 1 < levels.size(); ++j) v += Interval(levels[j], levels[j + 1]);
  return v / s0_.back();
}

double LevelObjective::Slope(double a, double l, double b) const {
  if (r_.empty() || s0_.back() <= 0) return 0;
  const size_t i = Index(a), k = Index(l), j = Index(b);
  const double left = (s1_[k] - s1_[i]) - a * (s0_[k] - s0_[i]);
  const double right = b * (s0_[j] - s0_[k]) - (s1_[j] - s1_[k]);
  return (left - right) / s0_.back();
}

double LevelObjective::BestLevel(double a, double current, double b) const {
  // Samples strictly inside (a, b) are the breakpoints of the convex, piecewise linear
  // F(l) = Interval(a, l) + Interval(l, b): the minimum is at one of them.
  size_t lo = static_cast<size_t>(std::upper_bound(r_.begin(), r_.end(), a) - r_.begin());
  const size_t end = Index(b);
  if (lo >= end) return current;
  auto f = [&](double l) { return Interval(a, l) + Interval(l, b); };
  // The first sample after which F stops falling: F is convex along the distinct samples.
  auto rising = [&](size_t k) {
    const size_t next = static_cast<size_t>(std::upper_bound(r_.begin(), r_.end(), r_[k]) -
                                            r_.begin());  // the next distinct value
    return next >= end || f(r_[next]) >= f(r_[k]);
  };
  size_t hi = end - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (rising(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return f(r_[lo]) < f(current) ? r_[lo] : current;
}

std::vector<double> AlqDescend(const LevelObjective& f, std::vector<double> levels, int sweeps,
                               std::vector<double>* trace) {
  const size_t s = levels.size() - 1;
  for (int t = 0; t < sweeps; ++t) {
    bool moved = false;
    for (size_t j = 1; j < s; ++j) {
      const double l = f.BestLevel(levels[j - 1], levels[j], levels[j + 1]);
      moved |= l != levels[j];
      levels[j] = l;
    }
    if (trace) trace->push_back(f.Variance(levels));
    if (!moved) break;
  }
  return levels;
}

std::vector<double> ExponentialLevels(double p, int s) {
  std::vector<double> l(s + 1, 0.0);
  for (int j = 1; j <= s; ++j) l[j] = std::pow(p, s - j);
  return l;
}

std::vector<double> UniformLevels(int s) {
  std::vector<double> l(s + 1);
  for (int j = 0; j <= s; ++j) l[j] = static_cast<double>(j) / s;
  return l;
}

std::vector<double> FitAlq(const LevelObjective& f, int s, int sweeps) {
  std::vector<std::vector<double>> starts;
  starts.push_back(UniformLevels(s));
  starts.push_back(ExponentialLevels(0.5, s));
  // Quantiles of the nonzero samples, when they are distinct.
  const auto& r = f.samples();
  const auto nz = std::upper_bound(r.begin(), r.end(), 0.0);
  const size_t m = static_cast<size_t>(r.end() - nz);
  if (m > static_cast<size_t>(s)) {
    std::vector<double> q(s + 1, 0.0);
    q[s] = 1;
    bool ok = true;
    for (int j = 1; j < s; ++j) {
      q[j] = nz[static_cast<ptrdiff_t>(m * j / s)];
      ok &= q[j] > q[j - 1] && q[j] < 1;
    }
    if (ok) starts.push_back(q);
  }
  std::vector<double> best;
  double best_v = 0;
  for (auto& start : starts) {
    std::vector<double> l = AlqDescend(f, std::move(start), sweeps);
    const double v = f.Variance(l);
    if (best.empty() || v < best_v) {
      best = std::move(l);
      best_v = v;
    }
  }
  return best;
}

double FitAmq(const LevelObjective& f, int s, int epochs) {
  auto variance = [&](double p) { return f.Variance(ExponentialLevels(p, s)); };
  double best_p = 0.5, best_v = variance(0.5);
  for (int start = 1; start <= 9; ++start) {
    double p = start / 10.0, v = variance(p), step = 0.05;
    for (int e = 0; e < epochs && step > 1e-7; ++e) {
      // dV/dp = sum_j dV/dl_j * (s - j) p^(s - j - 1), l_j = p^(s - j).
      const std::vector<double> l = ExponentialLevels(p, s);
      double g = 0;
      for (int j = 1; j < s; ++j) {
        g += f.Slope(l[j - 1], l[j], l[j + 1]) * (s - j) * std::pow(p, s - j - 1);
      }
      if (g == 0) break;
      const double next = std::clamp(p - (g > 0 ? step : -step), 0.01, 0.99);
      const double nv = variance(next);
      if (nv < v) {
        p = next;
        v = nv;
      } else {
        step /= 2;  // overshot: a smaller step along the gradient
      }
    }
    if (v < best_v) {
      best_v = v;
      best_p = p;
    }
  }
  return best_p;
}

AdaptiveQuantizer::AdaptiveQuantizer(std::string spec, std::string wire_spec, Kind kind,
                                     LevelParams params, int iterations, uint64_t sample)
    : DenseCodec(std::move(spec), CodecTraits{.fixed_size = !params.elias,
                                              .unbiased = true,
                                              .stateful = false,
                                              .block = params.bucket}),
      wire_spec_(std::move(wire_spec)),
      kind_(kind),
      params_(params),
      iterations_(iterations),
      sample_(sample) {
  const std::vector<double> l = UniformLevels(params_.s);
  std::vector<float> uniform(l.begin(), l.end());
  shape_ = LevelQuantizer::WithLevels(wire_spec_, std::move(uniform), params_.norm, params_.bucket,
                                      params_.elias);
}

absl::StatusOr<std::unique_ptr<Codec>> AdaptiveQuantizer::Create(const SpecNode& node, Kind kind) {
  const bool alq = kind == Kind::kAlq;
  const char* name = alq ? "alq" : "amq";
  const char* iter_key = alq ? "sweeps" : "epochs";
  ParamReader params(node, {"bits", "s", "bucket", "norm", "elias", iter_key, "sample"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(LevelParams c, ReadLevelParams(params, true, 3, 3));
  FEDLGC_ASSIGN_OR_RETURN(int64_t iterations, params.Int(iter_key, alq ? 30 : 40, 1, 1000));
  FEDLGC_ASSIGN_OR_RETURN(int64_t sample, params.Int("sample", 65536, 1024, int64_t{1} << 22));
  std::string spec = StrCat(name, "/1(", c.bits_or_s, ",", iter_key, "=", iterations,
                            ",sample=", sample, LevelParamsSuffix(c));
  std::string wire = StrCat(name, "/1(", c.bits_or_s, LevelParamsSuffix(c));
  return std::unique_ptr<Codec>(new AdaptiveQuantizer(std::move(spec), std::move(wire), kind, c,
                                                      static_cast<int>(iterations),
                                                      static_cast<uint64_t>(sample)));
}

absl::StatusOr<std::unique_ptr<Codec>> AdaptiveQuantizer::CreateAlq(const SpecNode& node) {
  return Create(node, Kind::kAlq);
}

absl::StatusOr<std::unique_ptr<Codec>> AdaptiveQuantizer::CreateAmq(const SpecNode& node) {
  return Create(node, Kind::kAmq);
}

uint64_t AdaptiveQuantizer::MaxBodyBytes(uint64_t n) const {
  return 4 * static_cast<uint64_t>(params_.s - 1) + shape_->MaxBodyBytes(n);
}

LevelObjective AdaptiveQuantizer::Sample(std::span<const float> x) const {
  const size_t n = x.size(), bucket = params_.bucket;
  std::vector<double> norms((n + bucket - 1) / bucket, 0.0);
  for (size_t b = 0; b < norms.size(); ++b) {
    double acc = 0;
    for (size_t i = b * bucket; i < std::min(n, (b + 1) * bucket); ++i) {
      const double v = std::fabs(static_cast<double>(x[i]));
      acc = params_.norm == NormKind::kL2 ? acc + v * v : std::max(acc, v);
    }
    norms[b] = params_.norm == NormKind::kL2 ? std::sqrt(acc) : acc;
  }
  const size_t stride = std::max<size_t>(1, (n + sample_ - 1) / sample_);
  std::vector<double> r, w;
  r.reserve(n / stride + 1);
  w.reserve(n / stride + 1);
  for (size_t i = 0; i < n; i += stride) {
    const double norm = norms[i / bucket];
    r.push_back(norm > 0 ? std::min(1.0, std::fabs(static_cast<double>(x[i])) / norm) : 0.0);
    w.push_back(norm * norm);
  }
  return LevelObjective(std::move(r), std::move(w));
}

std::vector<float> AdaptiveQuantizer::FitLevels(std::span<const float> x) const {
  const int s = params_.s;
  const std::vector<double> u = UniformLevels(s);
  const std::vector<float> uniform(u.begin(), u.end());
  if (s < 2 || x.empty() || FindNonFinite(x) != x.size()) return uniform;
  const LevelObjective f = Sample(x);
  const std::vector<double> l = kind_ == Kind::kAlq
                                    ? FitAlq(f, s, iterations_)
                                    : ExponentialLevels(FitAmq(f, s, iterations_), s);
  // In float, strictly increasing inside (0, 1).
  std::vector<float> out(s + 1, 0.0f);
  out[s] = 1.0f;
  for (int j = 1; j < s; ++j) {
    float v = static_cast<float>(l[j]);
    if (!(v > out[j - 1])) v = std::nextafter(out[j - 1], 1.0f);
    if (!(v < 1.0f)) return uniform;
    out[j] = v;
  }
  return out;
}

absl::Status AdaptiveQuantizer::Fit(std::span<const float> x, std::vector<float>* fitted) const {
  if (FindNonFinite(x) != x.size()) return absl::OkStatus();
  const std::vector<float> l = FitLevels(x);
  fitted->assign(l.begin() + 1, l.end() - 1);
  return absl::OkStatus();
}

absl::Status AdaptiveQuantizer::EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                           std::string* out) const {
  std::vector<float> levels;
  if (ctx.fitted.size() + 1 == static_cast<size_t>(params_.s)) {
    levels.push_back(0.0f);
    levels.insert(levels.end(), ctx.fitted.begin(), ctx.fitted.end());
    levels.push_back(1.0f);
  } else {
    levels = FitLevels(values);  // a sparse codec's values: fitted on their own
  }
  out->append(reinterpret_cast<const char*>(levels.data() + 1),
              (levels.size() - 2) * sizeof(float));
  return LevelQuantizer::WithLevels(wire_spec_, std::move(levels), params_.norm, params_.bucket,
                                    params_.elias)
      ->EncodeBody(values, ctx, out);
}

absl::Status AdaptiveQuantizer::DecodeBody(std::span<const uint8_t> body,
                                           std::span<float> out) const {
  const size_t interior = static_cast<size_t>(params_.s - 1);
  if (body.size() < 4 * interior) {
    return InputErrorStatus(InputError::kMalformed,
                            StrCat(wire_spec_, ": body too short for its levels"));
  }
  std::vector<float> levels = {0.0f};
  for (size_t j = 0; j < interior; ++j) {
    float v;
    std::memcpy(&v, body.data() + 4 * j, 4);
    levels.push_back(v);
  }
  levels.push_back(1.0f);
  for (int j = 1; j < params_.s; ++j) {
    if (!std::isfinite(levels[j]) || !(levels[j] > levels[j - 1]) || !(levels[j] < 1.0f)) {
      return NonFiniteError(StrCat(wire_spec_, ": level ", j, " is ", levels[j],
                                   "; levels must increase inside (0, 1)"));
    }
  }
  return LevelQuantizer::WithLevels(wire_spec_, std::move(levels), params_.norm, params_.bucket,
                                    params_.elias)
      ->DecodeBody(body.subspan(4 * interior), out);
}

}  // namespace fedlgc::codecs
