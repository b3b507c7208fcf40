// GradiVeQ: PCA codes of gradient slices (see gradiveq.h).
#include "codecs/gradiveq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/byte_io.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

constexpr uint32_t kBasisMagic = 0x42515647;  // "GVQB"
constexpr uint32_t kBasisFormat = 1;
constexpr uint32_t kMaxSlice = 256;
// The largest code value a frame may carry: |U c| <= dims * max |c| and a chunk's scale is
// at most 16, so decodes and weighted means of codes stay far from float overflow.
constexpr float kMaxCode = 1e30f;

absl::Status MalformedFrame(std::string_view what) {
  return InputErrorStatus(InputError::kMalformed, what);
}

// Eigenvalues (descending) and eigenvectors (columns of v, n x n row-major) of the
// symmetric n x n matrix a, by cyclic Jacobi rotations.
void SymmetricEigen(std::vector<double> a, size_t n, std::vector<double>* values,
                    std::vector<double>* v) {
  std::vector<double> vec(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) vec[i * n + i] = 1;
  auto at = [&a, n](size_t i, size_t j) -> double& { return a[i * n + j]; };
  double total = 0;
  for (double x : a) total += x * x;
  for (int sweep = 0; sweep < 64; ++sweep) {
    double off = 0;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) off += at(p, q) * at(p, q);
    if (off <= 1e-22 * total || off == 0) break;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (std::abs(apq) <= 1e-300) continue;
        const double theta = (at(q, q) - at(p, p)) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // A P
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {  // P^T (A P)
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        at(p, q) = at(q, p) = 0;          // what the rotation makes them, without rounding
        for (size_t k = 0; k < n; ++k) {  // V P
          const double vkp = vec[k * n + p], vkq = vec[k * n + q];
          vec[k * n + p] = c * vkp - s * vkq;
          vec[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t i, size_t j) { return at(i, i) > at(j, j); });
  values->resize(n);
  v->assign(n * n, 0.0);
  for (size_t c = 0; c < n; ++c) {
    (*values)[c] = at(order[c], order[c]);
    for (size_t k = 0; k < n; ++k) (*v)[k * n + c] = vec[k * n + order[c]];
  }
}

struct Params {
  int64_t dims = 8, slice = 64, refit = 10;
};

absl::StatusOr<Params> ReadParams(const ParamReader& params) {
  Params p;
  FEDLGC_ASSIGN_OR_RETURN(p.slice, params.Int("slice", 64, 2, kMaxSlice));
  FEDLGC_ASSIGN_OR_RETURN(p.dims, params.Int("dims", 8, 1, p.slice - 1));
  // refit=1 would make every round a fit round, and nothing would ever be coded.
  FEDLGC_ASSIGN_OR_RETURN(p.refit, params.Int("refit", 10, 2, 1000000));
  return p;
}

}  // namespace

std::vector<SlicedTensor> SlicedTensors(const ModelLayout& layout, uint32_t slice, uint32_t dims) {
  std::vector<SlicedTensor> out;
  if (slice < 2 || dims == 0 || dims >= slice) return out;
  const auto& tensors = layout.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSlot& t = tensors[i];
    const uint64_t slices = t.size / slice;
    if (t.shape.size() >= 2 && slices >= slice) out.push_back({i, t.offset, t.size, slices});
  }
  return out;
}

// ---- SliceBasis ----

absl::StatusOr<SliceBasis> SliceBasis::Fit(const ModelLayout& layout, uint32_t slice, uint32_t dims,
                                           uint64_t version, std::span<const float> sample) {
  if (slice < 2 || slice > kMaxSlice || dims == 0 || dims >= slice) {
    return absl::InvalidArgumentError(StrCat("a basis of ", dims, " of ", slice,
                                             " dimensions (need 1 <= dims < slice <= ", kMaxSlice,
                                             ")"));
  }
  if (sample.size() != layout.dim()) {
    return absl::InvalidArgumentError(StrCat("fitting a basis to ", sample.size(),
                                             " coordinates; the layout has ", layout.dim()));
  }
  if (const size_t i = FindNonFinite(sample); i != sample.size()) {
    return NonFiniteError(StrCat("basis sample coordinate ", i, " is not finite"));
  }
  SliceBasis b;
  b.version_ = version;
  b.slice_ = slice;
  b.dims_ = dims;
  b.tensors_ = SlicedTensors(layout, slice, dims);
  const size_t n = slice;
  for (const SlicedTensor& t : b.tensors_) {
    std::vector<double> cov(n * n, 0.0);
    const float* g = sample.data() + t.offset;
    for (uint64_t s = 0; s < t.slices; ++s, g += n) {
      for (size_t i = 0; i < n; ++i) {
        const double gi = g[i];
        if (gi == 0) continue;
        double* row = cov.data() + i * n;
        for (size_t j = i; j < n; ++j) row[j] += gi * g[j];
      }
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < i; ++j) cov[i * n + j] = cov[j * n + i];
    double trace = 0;
    for (size_t i = 0; i < n; ++i) trace += cov[i * n + i];
    std::vector<double> values, vectors;
    SymmetricEigen(std::move(cov), n, &values, &vectors);
    std::vector<float> u(n * dims);
    double kept = 0;
    for (size_t k = 0; k < dims; ++k) {
      kept += std::max(0.0, values[k]);
      // A sign that does not depend on the rotations' order: the largest entry positive.
      size_t big = 0;
      for (size_t i = 1; i < n; ++i) {
        if (std::abs(vectors[i * n + k]) > std::abs(vectors[big * n + k])) big = i;
      }
      const double sign = vectors[big * n + k] < 0 ? -1 : 1;
      for (size_t i = 0; i < n; ++i)
        u[i * dims + k] = static_cast<float>(sign * vectors[i * n + k]);
    }
    b.u_.push_back(std::move(u));
    b.kept_.push_back(trace > 0 ? kept / trace : 1.0);
  }
  b.Seal(layout.hash());
  return b;
}

void SliceBasis::Seal(uint64_t layout_hash) {
  layout_hash_ = layout_hash;
  bytes_.clear();
  PutScalar<uint32_t>(&bytes_, kBasisMagic);
  PutScalar<uint32_t>(&bytes_, kBasisFormat);
  PutScalar<uint64_t>(&bytes_, layout_hash);
  PutScalar<uint64_t>(&bytes_, version_);
  PutScalar<uint32_t>(&bytes_, slice_);
  PutScalar<uint32_t>(&bytes_, dims_);
  PutScalar<uint32_t>(&bytes_, static_cast<uint32_t>(tensors_.size()));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    PutScalar<uint32_t>(&bytes_, static_cast<uint32_t>(tensors_[i].tensor));
    bytes_.append(reinterpret_cast<const char*>(u_[i].data()), u_[i].size() * sizeof(float));
  }
  word_ = StrCat("v", version_, "h", Hex16(Fnv1a64(bytes_)));
}

absl::StatusOr<SliceBasis> SliceBasis::Parse(std::string_view bytes, const ModelLayout& layout) {
  auto malformed = [](std::string_view what) {
    return InputErrorStatus(InputError::kMalformed, StrCat("GradiVeQ basis: ", what));
  };
  ByteReader r(bytes);
  uint32_t magic = 0, format = 0, slice = 0, dims = 0, count = 0;
  uint64_t layout_hash = 0, version = 0;
  if (!r.Get(&magic) || !r.Get(&format) || !r.Get(&layout_hash) || !r.Get(&version) ||
      !r.Get(&slice) || !r.Get(&dims) || !r.Get(&count)) {
    return malformed("truncated header");
  }
  if (magic != kBasisMagic) return malformed("not a basis (bad magic)");
  if (format != kBasisFormat) return malformed(StrCat("format ", format, " is not 1"));
  if (layout_hash != layout.hash()) {
    return WrongCodecError("GradiVeQ basis: made for another model layout");
  }
  if (slice < 2 || slice > kMaxSlice || dims == 0 || dims >= slice) {
    return malformed(StrCat(dims, " of ", slice, " dimensions"));
  }
  SliceBasis b;
  b.version_ = version;
  b.slice_ = slice;
  b.dims_ = dims;
  b.tensors_ = SlicedTensors(layout, slice, dims);
  if (count != b.tensors_.size()) {
    return malformed(StrCat(count, " tensors; the layout slices ", b.tensors_.size()));
  }
  const size_t floats = size_t{slice} * dims;
  for (const SlicedTensor& t : b.tensors_) {
    uint32_t index = 0;
    std::span<const uint8_t> raw;
    if (!r.Get(&index) || !r.Take(floats * sizeof(float), &raw)) return malformed("truncated");
    if (index != t.tensor) return malformed(StrCat("tensor ", index, " where ", t.tensor));
    std::vector<float> u(floats);
    std::memcpy(u.data(), raw.data(), raw.size());
    if (FindNonFinite(u) != u.size()) return malformed("a value is not finite");
    for (uint32_t a = 0; a < dims; ++a) {
      for (uint32_t c = a; c < dims; ++c) {
        double dot = 0;
        for (uint32_t i = 0; i < slice; ++i) dot += double(u[i * dims + a]) * u[i * dims + c];
        if (std::abs(dot - (a == c ? 1.0 : 0.0)) > 1e-3) {
          return malformed(StrCat("columns ", a, " and ", c, " are not orthonormal"));
        }
      }
    }
    b.u_.push_back(std::move(u));
  }
  if (!r.done()) return malformed("trailing bytes");
  b.Seal(layout_hash);
  return b;
}

namespace {

// The gradiveq node of a spec, looking through ef(...).
const SpecNode* GradiveqNode(const SpecNode& node) {
  if (node.name == "gradiveq") return &node;
  if (node.name == "ef" && !node.args.empty() && node.args[0].key.empty() && node.args[0].node) {
    return GradiveqNode(*node.args[0].node);
  }
  return nullptr;
}

}  // namespace

std::optional<std::pair<uint64_t, std::string>> GradiveqBasisOf(std::string_view spec) {
  auto node = ParseSpec(spec);
  if (!node.ok()) return std::nullopt;
  const SpecNode* g = GradiveqNode(*node);
  if (g == nullptr) return std::nullopt;
  for (const SpecArg& a : g->args) {
    if (a.key != "basis" || !a.node || !a.node->IsWord()) continue;
    const std::string& w = a.node->name;  // v<version>h<hex>
    const size_t h = w.find('h');
    if (w.size() < 2 || w[0] != 'v' || h == std::string::npos || h == 1) return std::nullopt;
    uint64_t version = 0;
    for (size_t i = 1; i < h; ++i) {
      if (w[i] < '0' || w[i] > '9' || version > (~uint64_t{0} - 9) / 10) return std::nullopt;
      version = version * 10 + static_cast<uint64_t>(w[i] - '0');
    }
    return std::make_pair(version, w);
  }
  return std::nullopt;
}

// ---- GradiVeQ ----

absl::StatusOr<std::unique_ptr<Codec>> GradiVeQ::Create(const SpecNode& node,
                                                        const CodecContext& context) {
  ParamReader params(node, {"dims", "slice", "refit", "layout", "basis"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(Params p, ReadParams(params));
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* named_layout, params.Node("layout"));
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* named_basis, params.Node("basis"));
  const ModelLayout* layout = context.layout();
  if (layout == nullptr || layout->dim() == 0) {
    return absl::InvalidArgumentError(
        "gradiveq slices the model's tensors and needs its layout (the job gives it; a codec "
        "built without one, e.g. from a frame's spec alone, cannot be gradiveq)");
  }
  if (named_layout != nullptr &&
      (!named_layout->IsWord() || named_layout->name != layout->HashWord())) {
    return WrongCodecError(StrCat("gradiveq: made for the model layout ",
                                  named_layout->IsWord() ? named_layout->name : "?",
                                  ", this model's is ", layout->HashWord()));
  }
  std::shared_ptr<const SliceBasis> basis = context.basis();
  if (named_basis != nullptr) {
    if (!named_basis->IsWord()) return params.Error("basis", "must be a word v<version>h<hash>");
    if (basis == nullptr) {
      return absl::FailedPreconditionError(StrCat("gradiveq: the spec names the basis ",
                                                  named_basis->name, ", which is not at hand"));
    }
    if (basis->word() != named_basis->name) {
      return WrongCodecError(StrCat("gradiveq: made with the basis ", named_basis->name,
                                    "; the one at hand is ", basis->word()));
    }
  }
  if (basis != nullptr && basis->layout_hash() != layout->hash()) {
    return WrongCodecError(StrCat("gradiveq: the basis ", basis->word(),
                                  " was fitted for another model layout than ",
                                  layout->HashWord()));
  }
  if (basis != nullptr && (basis->slice() != p.slice || basis->dims() != p.dims)) {
    return WrongCodecError(StrCat("gradiveq: the basis ", basis->word(), " has ", basis->dims(),
                                  " of ", basis->slice(), " dimensions; the spec asks ", p.dims,
                                  " of ", p.slice));
  }
  std::string spec = StrCat("gradiveq/1(dims=", p.dims, ",slice=", p.slice, ",refit=", p.refit,
                            ",layout=", layout->HashWord());
  if (basis != nullptr) spec += StrCat(",basis=", basis->word());
  spec += ")";
  return std::unique_ptr<Codec>(new GradiVeQ(
      std::move(spec), *layout, static_cast<uint32_t>(p.slice), static_cast<uint32_t>(p.dims),
      static_cast<uint32_t>(p.refit), std::move(basis)));
}

GradiVeQ::GradiVeQ(std::string spec, const ModelLayout& layout, uint32_t slice, uint32_t dims,
                   uint32_t refit, std::shared_ptr<const SliceBasis> basis)
    : Codec(std::move(spec)),
      dim_(layout.dim()),
      slice_(slice),
      dims_(dims),
      refit_(refit),
      basis_(std::move(basis)) {
  uint64_t at = 0, code = 0;
  auto dense_to = [&](uint64_t end) {
    if (end <= at) return;
    segments_.push_back({at, end, code, 1, 1, -1});
    code += end - at;
    at = end;
  };
  if (basis_ != nullptr) {
    const auto& tensors = basis_->tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      dense_to(tensors[i].offset);
      const uint64_t end = tensors[i].offset + tensors[i].slices * slice_;
      segments_.push_back({at, end, code, slice_, dims_, static_cast<int>(i)});
      code += tensors[i].slices * dims_;
      at = end;
    }
  }
  dense_to(dim_);
  code_size_ = code;
}

CodecTraits GradiVeQ::traits() const {
  return CodecTraits{.fixed_size = false,
                     .unbiased = false,
                     .stateful = false,
                     .block = 1,
                     .summable = true,
                     .no_error_feedback = true};
}

uint64_t GradiVeQ::MaxFrameBytes(uint64_t n) const {
  const uint64_t overhead = FrameOverhead(spec().size());
  if (n == dim_) return overhead + 4 * code_size_;
  return overhead + 4 * n;  // a code is never longer than its coordinates
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> GradiVeQ::CodeRange(uint64_t begin,
                                                                  uint64_t end) const {
  uint64_t cb = 0, ce = 0;
  bool first = true;
  for (const Segment& s : segments_) {
    const uint64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    if (lo >= hi) continue;
    if ((lo - s.begin) % s.unit != 0 || (hi - s.begin) % s.unit != 0) {
      return MalformedFrame(StrCat(spec(), ": frame boundary inside a slice at coordinate ",
                                   (lo - s.begin) % s.unit != 0 ? lo : hi));
    }
    if (first) cb = s.code + (lo - s.begin) / s.unit * s.per_unit;
    first = false;
    ce = s.code + (hi - s.begin) / s.unit * s.per_unit;
  }
  return std::make_pair(cb, ce);
}

void GradiVeQ::Expand(uint64_t begin, uint64_t end, uint64_t cb, const float* code,
                      float* out) const {
  for (const Segment& s : segments_) {
    const uint64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    if (lo >= hi) continue;
    const float* c = code + (s.code + (lo - s.begin) / s.unit * s.per_unit - cb);
    float* dst = out + (lo - begin);
    if (s.u < 0) {
      std::memcpy(dst, c, (hi - lo) * sizeof(float));
      continue;
    }
    const float* u = basis_->u(static_cast<size_t>(s.u)).data();
    for (uint64_t at = lo; at < hi; at += s.unit, c += s.per_unit, dst += s.unit) {
      for (uint32_t i = 0; i < slice_; ++i) {  // U c
        const float* ui = u + size_t{i} * dims_;
        double v = 0;
        for (uint32_t k = 0; k < dims_; ++k) v += double(ui[k]) * c[k];
        dst[i] = static_cast<float>(v);
      }
    }
  }
}

std::vector<float> GradiVeQ::Project(std::span<const float> x) const {
  std::vector<float> code(code_size_);
  for (const Segment& s : segments_) {
    float* c = code.data() + s.code;
    if (s.u < 0) {
      std::memcpy(c, x.data() + s.begin, (s.end - s.begin) * sizeof(float));
      continue;
    }
    const float* u = basis_->u(static_cast<size_t>(s.u)).data();
    std::vector<double> acc(dims_);
    for (uint64_t at = s.begin; at < s.end; at += s.unit, c += s.per_unit) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint32_t i = 0; i < slice_; ++i) {
        const double gi = x[at + i];
        const float* ui = u + size_t{i} * dims_;
        for (uint32_t k = 0; k < dims_; ++k) acc[k] += gi * ui[k];
      }
      for (uint32_t k = 0; k < dims_; ++k) c[k] = static_cast<float>(acc[k]);
    }
  }
  return code;
}

absl::StatusOr<std::vector<uint64_t>> GradiVeQ::FrameCuts(const EncodeOptions& opts) const {
  const uint64_t overhead = FrameOverhead(spec().size());
  const uint64_t room = opts.max_frame_bytes > overhead ? opts.max_frame_bytes - overhead : 0;
  std::vector<uint64_t> cuts{0};
  if (opts.max_frame_bytes != 0) {
    uint64_t used = 0;
    for (const Segment& s : segments_) {
      const uint64_t unit_bytes = 4 * s.per_unit;
      uint64_t at = s.begin;
      while (at < s.end) {
        const uint64_t fit = std::min((room - used) / unit_bytes, (s.end - at) / s.unit);
        used += fit * unit_bytes;
        at += fit * s.unit;
        if (at == s.end) break;
        if (used == 0) {
          return absl::InvalidArgumentError(
              StrCat(spec(), ": a frame budget of ", opts.max_frame_bytes,
                     " bytes cannot hold one unit (", overhead + unit_bytes, " bytes)"));
        }
        cuts.push_back(at);
        used = 0;
      }
    }
  }
  cuts.push_back(dim_);
  if (!opts.cuts.empty()) {
    // P3's slices: frames also end where the caller says; CodeRange refuses a cut inside
    // a slice.
    FEDLGC_ASSIGN_OR_RETURN(const std::vector<uint64_t> required, RequiredBounds(opts.cuts, dim_));
    std::vector<uint64_t> merged;
    std::set_union(cuts.begin(), cuts.end(), required.begin(), required.end(),
                   std::back_inserter(merged));
    cuts.swap(merged);
  }
  return cuts;
}

absl::Status GradiVeQ::Encode(std::span<const float> x, const EncodeOptions& opts,
                              std::vector<Frame>* frames) {
  const uint64_t n = x.size();
  if (n != dim_) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": input has ", n, " coordinates, the model layout ", dim_));
  }
  if (const size_t i = FindNonFinite(x); i != n) {
    return NonFiniteError(
        StrCat("input value ", i, " is not finite (", x[i], "); nothing was encoded"));
  }
  const std::vector<float> code = Project(x);
  if (FindNonFinite(code) != code.size()) {
    return absl::InvalidArgumentError(StrCat(spec(), ": a code overflowed; nothing was encoded"));
  }
  FEDLGC_ASSIGN_OR_RETURN(const std::vector<uint64_t> cuts, FrameCuts(opts));
  // Every range first, so that a cut inside a slice writes no frame.
  std::vector<std::pair<uint64_t, uint64_t>> ranges(cuts.size());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] == cuts[i + 1]) continue;
    auto range = CodeRange(cuts[i], cuts[i + 1]);
    if (!range.ok()) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": cannot cut the frames there: ", std::string(range.status().message())));
    }
    ranges[i] = *range;
  }
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] == cuts[i + 1]) continue;
    Frame f;
    f.begin = cuts[i];
    f.length = cuts[i + 1] - cuts[i];
    const auto& range = ranges[i];
    const size_t body = BeginFrame(spec(), dim_, f.begin, f.length, &f.bytes);
    f.bytes.append(reinterpret_cast<const char*>(code.data() + range.first),
                   (range.second - range.first) * sizeof(float));
    FinishFrame(body, &f.bytes);
    frames->push_back(std::move(f));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> GradiVeQ::ReadCode(const FrameView& frame,
                                            std::vector<float>* code) const {
  if (frame.dim != dim_) {
    return MalformedFrame(
        StrCat(spec(), ": frame of ", frame.dim, " coordinates for a layout of ", dim_));
  }
  FEDLGC_ASSIGN_OR_RETURN(auto range, CodeRange(frame.begin, frame.begin + frame.length));
  const uint64_t floats = range.second - range.first;
  if (frame.body.size() != 4 * floats) {
    return MalformedFrame(StrCat(spec(), ": body of ", frame.body.size(),
                                 " bytes, the frame's range needs ", 4 * floats));
  }
  code->resize(floats);
  if (floats > 0) std::memcpy(code->data(), frame.body.data(), frame.body.size());
  if (const size_t i = FindNonFinite(*code); i != code->size()) {
    return NonFiniteError(StrCat(spec(), ": code value ", range.first + i, " is not finite"));
  }
  for (size_t i = 0; i < code->size(); ++i) {
    if (std::abs((*code)[i]) > kMaxCode) {
      return NonFiniteError(StrCat(spec(), ": code value ", range.first + i, " (", (*code)[i],
                                   ") is beyond ", kMaxCode, ", where sums could overflow"));
    }
  }
  return range.first;
}

absl::Status GradiVeQ::Decode(const FrameView& frame, std::span<float> out) const {
  if (out.size() != frame.length) {
    return absl::InvalidArgumentError(
        StrCat("output holds ", out.size(), " values, the frame covers ", frame.length));
  }
  std::vector<float> code;
  FEDLGC_ASSIGN_OR_RETURN(const uint64_t cb, ReadCode(frame, &code));
  Expand(frame.begin, frame.begin + frame.length, cb, code.data(), out.data());
  if (const size_t i = FindNonFinite(out); i != out.size()) {
    return NonFiniteError(StrCat(spec(), ": coordinate ", frame.begin + i, " decodes to ", out[i]));
  }
  return absl::OkStatus();
}

absl::Status GradiVeQ::DecodeCode(std::span<const float> code, std::span<float> out) const {
  if (code.size() != code_size_ || out.size() != dim_) {
    return absl::InvalidArgumentError(StrCat(spec(), ": a code of ", code.size(), " values into ",
                                             out.size(), " coordinates; expected ", code_size_,
                                             " into ", dim_));
  }
  Expand(0, dim_, 0, code.data(), out.data());
  if (const size_t i = FindNonFinite(out); i != out.size()) {
    return NonFiniteError(StrCat(spec(), ": coordinate ", i, " decodes to ", out[i]));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
