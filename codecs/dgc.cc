// Deep Gradient Compression (see dgc.h).
#include "codecs/dgc.h"

#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/byte_io.h"
#include "codecs/elias_fano.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"
#include "codecs/topk.h"

namespace fedlgc::codecs {
namespace {
constexpr uint32_t kStateMagic = 0x53434744;  // "DGCS"
constexpr uint32_t kStateVersion = 1;
}  // namespace

Dgc::Dgc(std::string spec, std::unique_ptr<SparseCodec> wire, double ratio, double momentum,
         double clip, uint32_t warmup, double sample)
    : ResidualCodec(std::move(spec)),
      wire_(std::move(wire)),
      ratio_(ratio),
      momentum_(momentum),
      clip_(clip),
      warmup_(warmup),
      sample_(sample),
      exact_values_(wire_->values().spec() == "fp32/1") {}

absl::StatusOr<std::unique_ptr<Codec>> Dgc::Create(const SpecNode& node,
                                                   const CodecContext& context) {
  ParamReader params(node, {"ratio", "momentum", "clip", "warmup", "sample", "values"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(double ratio, params.Real("ratio", 0.001, 1e-9, 1.0));
  if (ratio <= 0) return params.Error("ratio", "must be above 0");
  FEDLGC_ASSIGN_OR_RETURN(double momentum, params.Real("momentum", 0.0, 0.0, 0.999));
  FEDLGC_ASSIGN_OR_RETURN(double clip, params.Real("clip", 0.0, 0.0, 1e30));
  FEDLGC_ASSIGN_OR_RETURN(int64_t warmup, params.Int("warmup", 4, 0, 1000));
  FEDLGC_ASSIGN_OR_RETURN(double sample, params.Real("sample", 0.01, 1e-6, 1.0));
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<DenseCodec> values, ReadValueCodec(params, context));
  std::string wire_spec = StrCat("dgc/1(values=", values->spec(), ")");
  std::string spec =
      StrCat("dgc/1(ratio=", FormatSpecNumber(ratio), ",momentum=", FormatSpecNumber(momentum),
             ",clip=", FormatSpecNumber(clip), ",warmup=", warmup,
             ",sample=", FormatSpecNumber(sample), ",values=", values->spec(), ")");
  auto wire = SparseCodec::ForGivenSets(std::move(wire_spec), std::move(values));
  return std::unique_ptr<Codec>(new Dgc(std::move(spec), std::move(wire), ratio, momentum, clip,
                                        static_cast<uint32_t>(warmup), sample));
}

CodecTraits Dgc::traits() const {
  return CodecTraits{.fixed_size = false, .unbiased = false, .stateful = true, .block = 1};
}

double Dgc::RatioAt(uint64_t t) const {
  if (t >= warmup_) return ratio_;
  return std::pow(ratio_, static_cast<double>(t + 1) / static_cast<double>(warmup_ + 1));
}

uint64_t Dgc::KeptCount(uint64_t n, uint64_t t) const { return KeptForRatio(RatioAt(t), n); }

double Dgc::BoundBits(uint64_t n) const {
  const uint64_t k = KeptCount(n, encodes_ > 0 ? encodes_ - 1 : 0);
  return static_cast<double>(k) * wire_->values().BoundBitsPerCoord() + Log2Binomial(n, k);
}

absl::Status Dgc::Encode(std::span<const float> x, const EncodeOptions& opts,
                         std::vector<Frame>* frames) {
  const size_t n = x.size();
  if (n >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": ", n, " coordinates; the limit is 2^32 - 1"));
  }
  if (const size_t i = FindNonFinite(x); i != n) {
    return NonFiniteError(
        StrCat("input value ", i, " is not finite (", x[i], "); nothing was encoded"));
  }
  if (!u_.empty() && u_.size() != n) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": input has ", n, " coordinates, the momentum ", u_.size()));
  }
  FEDLGC_RETURN_IF_ERROR(PrepareResidual(n));
  if (u_.empty()) u_.assign(n, 0.0f);
  // Local clipping, then momentum correction into next_u_ and v into scratch_; the
  // codec's state changes only once the frames are written.
  double sq = 0;
  for (float xi : x) sq += static_cast<double>(xi) * xi;
  const double norm = std::sqrt(sq);
  const float scale = clip_ > 0 && norm > clip_ ? static_cast<float>(clip_ / norm) : 1.0f;
  const float m = static_cast<float>(momentum_);
  next_u_.resize(n);
  scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    next_u_[i] = m * u_[i] + scale * x[i];
    scratch_[i] = residual_[i] + next_u_[i];
  }
  if (const size_t i = FindNonFinite(scratch_); i != n) {
    return absl::InvalidArgumentError(StrCat(
        spec(), ": residual plus momentum overflowed at coordinate ", i, "; nothing was encoded"));
  }
  idx_.clear();
  if (n > 0) TopKSampled(scratch_, KeptCount(n, encodes_), sample_, opts.seed, &idx_);
  const size_t first = frames->size();
  FEDLGC_RETURN_IF_ERROR(wire_->EncodeSelected(scratch_, idx_, opts, frames));
  if (exact_values_) {
    // fp32 values decode to exactly what was kept: v keeps the rest, zero on the kept set.
    residual_.swap(scratch_);
    for (uint32_t i : idx_) residual_[i] = 0.0f;
  } else {
    recon_.resize(n);
    absl::Status st = DecodeAll(*wire_, std::span<const Frame>(*frames).subspan(first), recon_);
    if (!st.ok()) {
      frames->resize(first);
      return st;
    }
    for (size_t i = 0; i < n; ++i) residual_[i] = scratch_[i] - recon_[i];
  }
  for (uint32_t i : idx_) next_u_[i] = 0.0f;  // momentum-factor masking
  u_.swap(next_u_);
  ++encodes_;
  return absl::OkStatus();
}

std::string Dgc::SaveState() const {
  std::string out = BeginState(kStateMagic, kStateVersion);
  PutScalar(&out, encodes_);
  PutScalar(&out, static_cast<uint64_t>(u_.size()));
  out.append(reinterpret_cast<const char*>(u_.data()), u_.size() * sizeof(float));
  return out;
}

absl::Status Dgc::LoadState(std::string_view bytes) {
  if (bytes.empty()) {  // nothing saved yet: start from zero momentum
    u_.clear();
    encodes_ = 0;
    return absl::OkStatus();
  }
  ByteReader r(bytes);
  FEDLGC_RETURN_IF_ERROR(ReadStateStart(r, kStateMagic, kStateVersion, "DGC"));
  uint64_t encodes = 0, n = 0;
  std::span<const uint8_t> u_bytes;
  if (!r.Get(&encodes) || !r.Get(&n) || n > (bytes.size() / sizeof(float)) ||
      !r.Take(n * sizeof(float), &u_bytes) || !r.done()) {
    return RefuseState("truncated or trailing bytes");
  }
  if (!residual_.empty() && n != 0 && n != residual_.size()) {
    return RefuseState(StrCat("momentum for ", n, " coordinates, residual for ", residual_.size()));
  }
  std::vector<float> u(n);
  if (n > 0) std::memcpy(u.data(), u_bytes.data(), u_bytes.size());
  if (FindNonFinite(u) != u.size()) return RefuseState("non-finite momentum");
  u_ = std::move(u);
  encodes_ = encodes;
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
