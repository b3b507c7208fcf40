// Top-k / random-k codecs (see sparse_codec.h).
#include "codecs/sparse_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/spec.h"
#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/elias_fano.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"
#include "codecs/topk.h"

namespace fedlgc::codecs {
namespace {

struct SparseParams {
  double ratio = 0.01;
  uint64_t k = 0;
  std::unique_ptr<DenseCodec> values;
  std::string count_spec;
};

absl::StatusOr<SparseParams> ReadSparse(const ParamReader& params, const CodecContext& context) {
  SparseParams p;
  if (params.Has("ratio") && params.Has("k")) {
    return params.Error("ratio", "and 'k' both given; give one of them");
  }
  if (params.Has("k")) {
    FEDLGC_ASSIGN_OR_RETURN(int64_t k, params.Int("k", 1, 1, int64_t{1} << 32));
    p.k = static_cast<uint64_t>(k);
    p.count_spec = StrCat("k=", k);
  } else {
    FEDLGC_ASSIGN_OR_RETURN(p.ratio, params.Real("ratio", 0.01, 1e-9, 1.0));
    if (p.ratio <= 0) return params.Error("ratio", "must be above 0");
    p.count_spec = StrCat("ratio=", FormatSpecNumber(p.ratio));
  }
  FEDLGC_ASSIGN_OR_RETURN(p.values, ReadValueCodec(params, context));
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DenseCodec>> ReadValueCodec(const ParamReader& params,
                                                           const CodecContext& context) {
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* vnode, params.Node("values"));
  std::unique_ptr<Codec> codec;
  if (vnode == nullptr) {
    FEDLGC_ASSIGN_OR_RETURN(codec, context.Create("fp32"));
  } else {
    FEDLGC_ASSIGN_OR_RETURN(codec, context.Create(*vnode));
  }
  auto* dense = dynamic_cast<DenseCodec*>(codec.get());
  if (dense == nullptr) {
    return params.Error("values",
                        StrCat("must be a dense codec (fp32, qsgd, ...), got ", codec->spec()));
  }
  codec.release();
  return std::unique_ptr<DenseCodec>(dense);
}

SparseCodec::SparseCodec(std::string spec, Kind kind, double ratio, uint64_t k,
                         std::unique_ptr<DenseCodec> values, bool sampled, double sample,
                         bool scale)
    : Codec(std::move(spec)),
      kind_(kind),
      ratio_(ratio),
      k_(k),
      values_(std::move(values)),
      sampled_(sampled),
      sample_(sample),
      scale_(scale) {}

absl::StatusOr<std::unique_ptr<Codec>> SparseCodec::CreateTopK(const SpecNode& node,
                                                               const CodecContext& context) {
  ParamReader params(node, {"ratio", "k", "values", "sampled", "sample"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(SparseParams p, ReadSparse(params, context));
  FEDLGC_ASSIGN_OR_RETURN(bool sampled, params.Flag("sampled", false));
  FEDLGC_ASSIGN_OR_RETURN(double sample, params.Real("sample", 0.01, 1e-6, 1.0));
  std::string spec =
      StrCat("topk/1(", p.count_spec, ",values=", p.values->spec(), ",sampled=", sampled ? 1 : 0);
  if (sampled) StrAppend(&spec, ",sample=", FormatSpecNumber(sample));
  spec += ")";
  return std::unique_ptr<Codec>(new SparseCodec(std::move(spec), Kind::kTopK, p.ratio, p.k,
                                                std::move(p.values), sampled, sample, false));
}

absl::StatusOr<std::unique_ptr<Codec>> SparseCodec::CreateRandomK(const SpecNode& node,
                                                                  const CodecContext& context) {
  ParamReader params(node, {"ratio", "k", "values", "scale", "seed"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(SparseParams p, ReadSparse(params, context));
  FEDLGC_ASSIGN_OR_RETURN(bool scale, params.Flag("scale", true));
  uint64_t seed = 0;
  bool round_seed = false;
  if (params.Has("seed")) {
    if (params.Word("seed", "", {"round"}).ok()) {
      round_seed = true;
    } else {
      auto s = params.Int("seed", 0, 1, static_cast<int64_t>(kMaxSharedSeed));
      if (!s.ok()) return params.Error("seed", StrCat("must be round or an integer in [1, 2^52)"));
      seed = static_cast<uint64_t>(*s);
    }
  }
  std::string spec =
      StrCat("randk/1(", p.count_spec, ",values=", p.values->spec(), ",scale=", scale ? 1 : 0);
  if (round_seed) StrAppend(&spec, ",seed=round");
  if (seed != 0) StrAppend(&spec, ",seed=", seed);
  spec += ")";
  std::unique_ptr<SparseCodec> c(new SparseCodec(std::move(spec), Kind::kRandomK, p.ratio, p.k,
                                                 std::move(p.values), false, 0, scale));
  c->seed_ = seed;
  c->round_seed_ = round_seed;
  if (context.layout() != nullptr && context.layout()->dim() < (uint64_t{1} << 32)) {
    c->has_dim_ = true;
    c->dim_ = context.layout()->dim();
    if (seed != 0) RandomK(c->dim_, c->KeptCount(c->dim_), seed, &c->shared_);
  }
  return std::unique_ptr<Codec>(std::move(c));
}

namespace {
// The largest value a summed code may carry (a chunk's scale is at most 16: sums of any
// number of clients' weighted codes stay far from float overflow).
constexpr float kMaxSummedValue = 1e30f;
}  // namespace

std::string WithRoundSeed(std::string_view spec, uint64_t seed) {
  std::string out(spec);
  const std::string word = "seed=round";
  for (size_t at = out.find(word); at != std::string::npos; at = out.find(word, at)) {
    out.replace(at, word.size(), StrCat("seed=", seed));
  }
  return out;
}

std::span<const uint32_t> SparseCodec::SharedSet(uint64_t n, std::vector<uint32_t>* scratch) const {
  if (has_dim_ && n == dim_) return shared_;
  RandomK(n, KeptCount(n), seed_, scratch);
  return *scratch;
}

std::pair<uint64_t, uint64_t> SparseCodec::SharedRange(const FrameView& frame,
                                                       std::span<const uint32_t> set) const {
  const auto first = std::lower_bound(set.begin(), set.end(), frame.begin);
  const auto last = std::lower_bound(first, set.end(), frame.begin + frame.length);
  return std::make_pair(static_cast<uint64_t>(first - set.begin()),
                        static_cast<uint64_t>(last - set.begin()));
}

CodecTraits SparseCodec::traits() const {
  const CodecTraits v = values_->traits();
  return CodecTraits{.fixed_size = v.fixed_size && kind_ != Kind::kGiven,
                     .unbiased = kind_ == Kind::kRandomK && scale_ && v.unbiased,
                     .stateful = false,
                     .block = 1,
                     .summable = seed_ != 0 && has_dim_};
}

uint64_t KeptForRatio(double ratio, uint64_t n) {
  if (n == 0) return 0;
  const double k = std::llround(ratio * static_cast<double>(n));
  return std::clamp<uint64_t>(static_cast<uint64_t>(k), 1, n);
}

uint64_t SparseCodec::KeptCount(uint64_t n) const {
  if (k_ != 0) return std::min(k_, n);
  return KeptForRatio(ratio_, n);
}

uint64_t SparseCodec::FrameBytes(uint64_t m, uint64_t u) const {
  if (seed_ != 0) return FrameOverhead(spec().size()) + values_->MaxBodyBytes(m);
  return FrameOverhead(spec().size()) + 4 + EliasFanoBytes(m, u) + values_->MaxBodyBytes(m);
}

uint64_t SparseCodec::MaxFrameBytes(uint64_t n) const {
  return FrameBytes(kind_ == Kind::kGiven ? n : KeptCount(n), n);
}

double SparseCodec::BoundBits(uint64_t n) const {
  const uint64_t k = KeptCount(n);
  return static_cast<double>(k) * values_->BoundBitsPerCoord() + Log2Binomial(n, k);
}

void SparseCodec::Select(std::span<const float> x, uint64_t seed,
                         std::vector<uint32_t>* idx) const {
  const size_t k = KeptCount(x.size());
  if (kind_ == Kind::kRandomK && seed_ != 0) {
    std::vector<uint32_t> scratch;
    const std::span<const uint32_t> set = SharedSet(x.size(), &scratch);
    idx->assign(set.begin(), set.end());
  } else if (kind_ == Kind::kRandomK) {
    RandomK(x.size(), k, seed, idx);
  } else if (sampled_) {
    TopKSampled(x, k, sample_, seed, idx);
  } else {
    TopKExact(x, k, idx);
  }
}

std::unique_ptr<SparseCodec> SparseCodec::ForGivenSets(std::string spec,
                                                       std::unique_ptr<DenseCodec> values) {
  return std::unique_ptr<SparseCodec>(
      new SparseCodec(std::move(spec), Kind::kGiven, 0, 0, std::move(values), false, 0, false));
}

absl::Status SparseCodec::CheckInput(std::span<const float> x, uint64_t k,
                                     const EncodeOptions& opts) const {
  const uint64_t n = x.size();
  if (n >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": ", n, " coordinates; the limit is 2^32 - 1"));
  }
  if (opts.max_frame_bytes == 0 &&
      FrameBytes(k, n) - FrameOverhead(spec().size()) > kMaxBodyBytes) {
    return absl::InvalidArgumentError(StrCat(spec(), ": the body would exceed 4 GiB;",
                                             " set EncodeOptions::max_frame_bytes to chunk it"));
  }
  if (FindNonFinite(x) != x.size()) {
    const size_t i = FindNonFinite(x);
    return NonFiniteError(
        StrCat("input value ", i, " is not finite (", x[i], "); nothing was encoded"));
  }
  return absl::OkStatus();
}

absl::Status SparseCodec::Encode(std::span<const float> x, const EncodeOptions& opts,
                                 std::vector<Frame>* frames) {
  if (kind_ == Kind::kGiven) {
    return absl::FailedPreconditionError(
        StrCat(spec(), ": the sender chooses the kept set; use EncodeSelected"));
  }
  if (round_seed_) {
    return absl::FailedPreconditionError(
        StrCat(spec(),
               ": seed=round is the plan's form; encode with the round's spec, which "
               "names the seed"));
  }
  FEDLGC_RETURN_IF_ERROR(CheckInput(x, KeptCount(x.size()), opts));
  std::vector<uint32_t> idx;
  Select(x, opts.seed, &idx);
  return WriteFrames(x, idx, opts, frames);
}

absl::Status SparseCodec::EncodeSelected(std::span<const float> x, std::span<const uint32_t> idx,
                                         const EncodeOptions& opts,
                                         std::vector<Frame>* frames) const {
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] >= x.size() || (j > 0 && idx[j] <= idx[j - 1])) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": kept index ", j, " is out of range or out of order"));
    }
  }
  FEDLGC_RETURN_IF_ERROR(CheckInput(x, idx.size(), opts));
  return WriteFrames(x, idx, opts, frames);
}

absl::Status SparseCodec::WriteFrames(std::span<const float> x, std::span<const uint32_t> idx,
                                      const EncodeOptions& opts, std::vector<Frame>* frames) const {
  const uint64_t n = x.size();
  const uint64_t k = idx.size();
  std::vector<float> vals(k);
  const float mult = (kind_ == Kind::kRandomK && scale_ && k > 0)
                         ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k))
                         : 1.0f;
  for (uint64_t j = 0; j < k; ++j) vals[j] = x[idx[j]] * mult;

  // Parameters the value codec fits (alq's levels) are fitted once on all kept values, so
  // chunks decode like the whole.
  std::vector<float> fitted;
  if (absl::Status st = values_->Fit(vals, &fitted); !st.ok()) return st;
  const uint64_t vb = values_->traits().block;
  FEDLGC_ASSIGN_OR_RETURN(const std::vector<uint64_t> bounds, RequiredBounds(opts.cuts, n));
  const size_t first = frames->size();
  auto fail = [&](absl::Status st) {
    frames->resize(first);
    return st;
  };
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    // The kept values [p, pe) of the segment [bounds[s], bounds[s + 1]).
    uint64_t p =
        static_cast<uint64_t>(std::lower_bound(idx.begin(), idx.end(), bounds[s]) - idx.begin());
    const uint64_t ps = p;
    const uint64_t pe = static_cast<uint64_t>(
        std::lower_bound(idx.begin(), idx.end(), bounds[s + 1]) - idx.begin());
    auto range_end = [&](uint64_t q) {
      return q < pe ? static_cast<uint64_t>(idx[q]) : bounds[s + 1];
    };
    do {
      const uint64_t begin = p == ps ? bounds[s] : idx[p];
      uint64_t m = pe - p;
      if (opts.max_frame_bytes != 0 &&
          FrameBytes(m, range_end(pe) - begin) > opts.max_frame_bytes) {
        // Largest number of value blocks whose frame fits the budget.
        uint64_t lo = 0;
        uint64_t hi = (pe - p + vb - 1) / vb;
        while (lo < hi) {
          const uint64_t mid = lo + (hi - lo + 1) / 2;
          const uint64_t mm = std::min(mid * vb, pe - p);
          if (FrameBytes(mm, range_end(p + mm) - begin) <= opts.max_frame_bytes) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        if (lo == 0) {
          const uint64_t mm = std::min(vb, pe - p);
          return fail(absl::InvalidArgumentError(StrCat(
              "frame budget of ", opts.max_frame_bytes, " bytes is too small for ", spec(),
              ": one value block needs ", FrameBytes(mm, range_end(p + mm) - begin), " bytes")));
        }
        m = std::min(lo * vb, pe - p);
      }
      auto f = MakeFrame(n, begin, range_end(p + m), idx, vals, p, m, opts, fitted);
      if (!f.ok()) return fail(f.status());
      frames->push_back(*std::move(f));
      p += m;
    } while (p < pe);
  }
  return absl::OkStatus();
}

absl::StatusOr<Frame> SparseCodec::MakeFrame(uint64_t n, uint64_t begin, uint64_t end,
                                             std::span<const uint32_t> idx,
                                             std::span<const float> vals, uint64_t p, uint64_t m,
                                             const EncodeOptions& opts,
                                             std::span<const float> fitted) const {
  Frame f;
  f.begin = begin;
  f.length = end - begin;
  const size_t body = BeginFrame(wire_spec(), n, begin, f.length, &f.bytes);
  if (seed_ == 0) {  // with a shared seed the receiver draws the set itself
    const uint32_t m32 = static_cast<uint32_t>(m);
    f.bytes.append(reinterpret_cast<const char*>(&m32), 4);
    std::vector<uint32_t> rel(idx.begin() + static_cast<ptrdiff_t>(p),
                              idx.begin() + static_cast<ptrdiff_t>(p + m));
    for (uint32_t& r : rel) r -= static_cast<uint32_t>(begin);
    EliasFanoEncode(rel, f.length, &f.bytes);
  }
  BodyContext ctx{opts.seed,
                  FirstBlockKey(p, values_->traits().block, idx.size()),
                  opts.shared_scale,
                  {},
                  fitted};
  FEDLGC_RETURN_IF_ERROR(values_->EncodeBody(vals.subspan(p, m), ctx, &f.bytes));
  FinishFrame(body, &f.bytes);
  return f;
}

absl::Status SparseCodec::Decode(const FrameView& frame, std::span<float> out) const {
  if (out.size() != frame.length) {
    return absl::InvalidArgumentError(
        StrCat("output holds ", out.size(), " values, the frame covers ", frame.length));
  }
  if (seed_ != 0) {
    if (frame.dim >= (uint64_t{1} << 32)) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": ", frame.dim, " coordinates; the limit is 2^32 - 1"));
    }
    std::vector<uint32_t> scratch;
    const std::span<const uint32_t> set = SharedSet(frame.dim, &scratch);
    const auto range = SharedRange(frame, set);
    std::vector<float> vals(range.second - range.first);
    FEDLGC_RETURN_IF_ERROR(ReadValues(frame.body, vals));
    std::fill(out.begin(), out.end(), 0.0f);
    for (uint64_t j = 0; j < vals.size(); ++j) out[set[range.first + j] - frame.begin] = vals[j];
    return absl::OkStatus();
  }
  if (frame.body.size() < 4) return absl::InvalidArgumentError(StrCat(spec(), ": body truncated"));
  uint32_t m;
  std::memcpy(&m, frame.body.data(), 4);
  if (m > frame.length) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": ", m, " kept values in a range of ", frame.length));
  }
  const uint64_t ef_bytes = EliasFanoBytes(m, frame.length);
  const uint64_t max_values = values_->MaxBodyBytes(m);
  const uint64_t rest = frame.body.size() - 4;
  if (rest < ef_bytes || rest - ef_bytes > max_values ||
      (values_->traits().fixed_size && rest - ef_bytes != max_values)) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": body of ", frame.body.size(), " bytes does not fit ", m, " kept values"));
  }
  std::vector<uint32_t> idx;
  FEDLGC_RETURN_IF_ERROR(EliasFanoDecode(frame.body.subspan(4, ef_bytes), m, frame.length, &idx));
  std::vector<float> vals(m);
  FEDLGC_RETURN_IF_ERROR(values_->DecodeBody(frame.body.subspan(4 + ef_bytes), vals));
  std::fill(out.begin(), out.end(), 0.0f);
  for (uint32_t j = 0; j < m; ++j) out[idx[j]] = vals[j];
  return absl::OkStatus();
}

absl::Status SparseCodec::ReadValues(std::span<const uint8_t> body, std::span<float> vals) const {
  const uint64_t max_values = values_->MaxBodyBytes(vals.size());
  if (body.size() > max_values || (values_->traits().fixed_size && body.size() != max_values)) {
    return absl::InvalidArgumentError(StrCat(spec(), ": body of ", body.size(),
                                             " bytes does not fit ", vals.size(), " kept values"));
  }
  return values_->DecodeBody(body, vals);
}

absl::StatusOr<uint64_t> SparseCodec::ReadCode(const FrameView& frame,
                                               std::vector<float>* code) const {
  if (seed_ == 0 || !has_dim_) {
    return absl::FailedPreconditionError(
        StrCat(spec(), ": codes add up only with a shared seed and the model's layout"));
  }
  if (frame.dim != dim_) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": frame of ", frame.dim, " coordinates for a layout of ", dim_));
  }
  const auto range = SharedRange(frame, shared_);
  code->resize(range.second - range.first);
  FEDLGC_RETURN_IF_ERROR(ReadValues(frame.body, *code));
  // Summed codes must not overflow: a weighted sum of values this size cannot.
  for (float v : *code) {
    if (!(std::fabs(v) <= kMaxSummedValue)) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": kept value ", v, " is beyond ", kMaxSummedValue, " or not finite"));
    }
  }
  return range.first;
}

absl::Status SparseCodec::DecodeCode(std::span<const float> code, std::span<float> out) const {
  if (seed_ == 0 || !has_dim_ || code.size() != shared_.size() || out.size() != dim_) {
    return absl::InvalidArgumentError(StrCat(spec(), ": a code of ", code.size(), " values for ",
                                             out.size(), " coordinates; expected ", shared_.size(),
                                             " for ", dim_));
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < code.size(); ++j) out[shared_[j]] = code[j];
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
