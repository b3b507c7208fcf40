// PowerSGD, one-phase per-client form (see powersgd.h).
#include "codecs/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/byte_io.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/rng.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

constexpr uint32_t kStateMagic = 0x53475350;  // "PSGS"
constexpr uint32_t kStateVersion = 1;
constexpr double kPi = 3.14159265358979323846;

absl::Status MalformedFrame(std::string_view what) {
  return InputErrorStatus(InputError::kMalformed, what);
}

// The codec's spec parameters; `layout` is the context's.
struct Params {
  int64_t rank = 2;
  double min_ratio = 2;
  bool warm = true;
  int64_t iters = 1;
  int64_t phases = 1;
};

absl::StatusOr<Params> ReadParams(const SpecNode& node, const CodecContext& context) {
  ParamReader params(node, {"rank", "min_ratio", "warm", "iters", "phases", "layout"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  Params p;
  FEDLGC_ASSIGN_OR_RETURN(p.rank, params.Int("rank", 2, 1, 64));
  FEDLGC_ASSIGN_OR_RETURN(p.min_ratio, params.Real("min_ratio", 2.0, 1.0, 1e9));
  FEDLGC_ASSIGN_OR_RETURN(p.warm, params.Flag("warm", true));
  FEDLGC_ASSIGN_OR_RETURN(p.iters, params.Int("iters", 1, 1, 32));
  FEDLGC_ASSIGN_OR_RETURN(p.phases, params.Int("phases", 1, 1, 2));
  if (p.phases == 2 && p.iters != 1) {
    return absl::InvalidArgumentError(
        "powersgd: phases=2 runs one power iteration per round (iters=1)");
  }
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* named, params.Node("layout"));
  if (context.layout() == nullptr || context.layout()->dim() == 0) {
    return absl::InvalidArgumentError(
        "powersgd works per tensor and needs the model's layout (the job gives it; a codec "
        "built without one, e.g. from a frame's spec alone, cannot be powersgd)");
  }
  if (named != nullptr && (!named->IsWord() || named->name != context.layout()->HashWord())) {
    return WrongCodecError(StrCat("powersgd: made for the model layout ",
                                  named->IsWord() ? named->name : "?", ", this model's is ",
                                  context.layout()->HashWord()));
  }
  return p;
}

}  // namespace

std::vector<PowerSgd::Block> PowerSgdBlocks(const ModelLayout& layout, uint32_t rank,
                                            double min_ratio) {
  std::vector<PowerSgd::Block> blocks;
  for (const TensorSlot& t : layout.tensors()) {
    PowerSgd::Block b{t.name, t.offset, t.size, 0, 0, 0};
    if (t.shape.size() >= 2) {
      const uint64_t rows = t.shape[0], cols = t.size / t.shape[0];
      const uint64_t r = std::min<uint64_t>({rank, rows, cols});
      if (static_cast<double>(rows) * static_cast<double>(cols) >=
          min_ratio * static_cast<double>(r * (rows + cols))) {
        b.rows = rows;
        b.cols = cols;
        b.rank = static_cast<uint32_t>(r);
      }
    }
    blocks.push_back(std::move(b));
  }
  return blocks;
}

void OrthonormalizeColumns(std::span<double> p, uint64_t rows, uint64_t r) {
  for (uint64_t k = 0; k < r; ++k) {
    double before = 0;
    for (uint64_t i = 0; i < rows; ++i) before += p[i * r + k] * p[i * r + k];
    for (uint64_t l = 0; l < k; ++l) {
      double dot = 0;
      for (uint64_t i = 0; i < rows; ++i) dot += p[i * r + k] * p[i * r + l];
      for (uint64_t i = 0; i < rows; ++i) p[i * r + k] -= dot * p[i * r + l];
    }
    double sq = 0;
    for (uint64_t i = 0; i < rows; ++i) sq += p[i * r + k] * p[i * r + k];
    // A column with no length left, or only rounding noise (below 1e-6 of its length
    // before the projections: the columns span fewer than k + 1 directions), is zero.
    const double inv = sq > 1e-12 * before && sq > 0 ? 1.0 / std::sqrt(sq) : 0.0;
    for (uint64_t i = 0; i < rows; ++i) p[i * r + k] *= inv;
  }
}

void FillGaussian(uint64_t key, uint32_t r, std::span<float> q, int column) {
  SplitMix rng(key ^ (column < 0 ? 0 : column + 1));
  for (size_t i = 0; i < q.size(); ++i) {
    if (column >= 0 && i % r != static_cast<size_t>(column)) continue;
    // Box-Muller from two 53-bit uniforms in (0, 1].
    const double u1 = (static_cast<double>(rng.Next() >> 11) + 1) * 0x1p-53;
    const double u2 = static_cast<double>(rng.Next() >> 11) * 0x1p-53;
    q[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * kPi * u2));
  }
}

PowerSgd::PowerSgd(std::string spec, std::string wire_spec, ModelLayout layout, uint32_t rank,
                   double min_ratio, bool warm, uint32_t iters, uint32_t phases)
    : ResidualCodec(std::move(spec)),
      wire_spec_(std::move(wire_spec)),
      layout_(std::move(layout)),
      blocks_(PowerSgdBlocks(layout_, rank, min_ratio)),
      rank_(rank),
      min_ratio_(min_ratio),
      warm_(warm),
      iters_(iters),
      phases_(phases) {
  q_.resize(blocks_.size());
  p_hat_.resize(blocks_.size());
  q_new_.resize(blocks_.size());
}

absl::StatusOr<std::unique_ptr<Codec>> PowerSgd::Create(const SpecNode& node,
                                                        const CodecContext& context) {
  FEDLGC_ASSIGN_OR_RETURN(Params p, ReadParams(node, context));
  const std::string common = StrCat("rank=", p.rank, ",min_ratio=", FormatSpecNumber(p.min_ratio));
  const std::string layout = context.layout()->HashWord();
  // Two-phase payloads are the round protocol's, whose spec names phases=2.
  const std::string phases = p.phases == 2 ? ",phases=2" : "";
  std::string spec = StrCat("powersgd/1(", common, ",warm=", p.warm ? 1 : 0, ",iters=", p.iters,
                            phases, ",layout=", layout, ")");
  std::string wire = StrCat("powersgd/1(", common, phases, ",layout=", layout, ")");
  return std::unique_ptr<Codec>(new PowerSgd(
      std::move(spec), std::move(wire), *context.layout(), static_cast<uint32_t>(p.rank),
      p.min_ratio, p.warm, static_cast<uint32_t>(p.iters), static_cast<uint32_t>(p.phases)));
}

CodecTraits PowerSgd::traits() const {
  return CodecTraits{.fixed_size = false, .unbiased = false, .stateful = true, .block = 1};
}

uint64_t PowerSgd::FloatsPerUpdate() const {
  uint64_t floats = 0;
  for (const Block& b : blocks_) floats += b.rank ? uint64_t{b.rank} * (b.rows + b.cols) : b.size;
  return floats;
}

uint64_t PowerSgd::MaxFrameBytes(uint64_t n) const {
  const uint64_t overhead = FrameOverhead(wire_spec_.size());
  if (n == layout_.dim()) return overhead + 4 * FloatsPerUpdate();
  // Part of a vector: at most every coordinate dense, or rows of P^ plus each Q.
  uint64_t q_floats = 0;
  for (const Block& b : blocks_) q_floats += uint64_t{b.rank} * b.cols;
  return overhead + 4 * (n * std::max<uint64_t>(1, rank_) + q_floats);
}

void PowerSgd::DrawQuery(size_t b, uint64_t draw, std::span<float> q, int column) const {
  FillGaussian(Mix64(draw * 0x9E3779B97F4A7C15ull ^ Mix64(b + 1)), blocks_[b].rank, q, column);
}

void PowerSgd::Factorize(size_t bi, std::span<const float> m, std::span<const float> q,
                         std::vector<float>* p_hat, std::vector<float>* q_new) const {
  const Block& b = blocks_[bi];
  const uint64_t rows = b.rows, cols = b.cols, r = b.rank;
  // P = M Q in double, then modified Gram-Schmidt on its columns.
  std::vector<double> p(rows * r, 0.0);
  for (uint64_t i = 0; i < rows; ++i) {
    const float* row = m.data() + i * cols;
    double* pi = p.data() + i * r;
    for (uint64_t j = 0; j < cols; ++j) {
      const double mij = row[j];
      const float* qj = q.data() + j * r;
      for (uint64_t k = 0; k < r; ++k) pi[k] += mij * qj[k];
    }
  }
  OrthonormalizeColumns(p, rows, r);
  p_hat->resize(rows * r);
  for (uint64_t i = 0; i < rows * r; ++i) (*p_hat)[i] = static_cast<float>(p[i]);
  // Q = M^T P^ with the P^ that is sent, so the receiver's P^ Q^T is what the sender means.
  std::vector<double> qn(cols * r, 0.0);
  for (uint64_t i = 0; i < rows; ++i) {
    const float* row = m.data() + i * cols;
    const float* pi = p_hat->data() + i * r;
    for (uint64_t j = 0; j < cols; ++j) {
      const double mij = row[j];
      for (uint64_t k = 0; k < r; ++k) qn[j * r + k] += mij * pi[k];
    }
  }
  q_new->resize(cols * r);
  for (uint64_t i = 0; i < cols * r; ++i) (*q_new)[i] = static_cast<float>(qn[i]);
}

absl::Status PowerSgd::PlanFrames(uint64_t max_frame_bytes, std::vector<Cut>* cuts) const {
  const uint64_t dim = layout_.dim();
  if (max_frame_bytes == 0) {
    cuts->push_back({0, dim});
    return absl::OkStatus();
  }
  const uint64_t overhead = FrameOverhead(wire_spec_.size());
  const uint64_t room = max_frame_bytes > overhead ? max_frame_bytes - overhead : 0;
  uint64_t start = 0, used = 0;
  for (const Block& b : blocks_) {
    const uint64_t unit = b.rank ? b.cols : 1;              // coordinates per unit
    const uint64_t unit_bytes = 4 * (b.rank ? b.rank : 1);  // a row of P^ or a value
    const uint64_t fixed = 4 * uint64_t{b.rank} * b.cols;   // Q, once per frame
    uint64_t pos = 0;
    while (pos < b.size) {
      const uint64_t avail = room - used;
      if (avail >= fixed + unit_bytes) {
        const uint64_t units = std::min((avail - fixed) / unit_bytes, (b.size - pos) / unit);
        used += fixed + units * unit_bytes;
        pos += units * unit;
      }
      if (pos == b.size) break;
      if (used == 0) {
        return absl::InvalidArgumentError(StrCat(spec(), ": a frame budget of ", max_frame_bytes,
                                                 " bytes cannot hold a unit of ", b.name, " (",
                                                 overhead + fixed + unit_bytes, " bytes)"));
      }
      cuts->push_back({start, b.offset + pos});
      start = b.offset + pos;
      used = 0;
    }
  }
  cuts->push_back({start, dim});
  return absl::OkStatus();
}

absl::Status PowerSgd::SplitAt(std::span<const uint64_t> required, std::vector<Cut>* cuts) const {
  if (required.empty()) return absl::OkStatus();
  FEDLGC_ASSIGN_OR_RETURN(const std::vector<uint64_t> bounds,
                          RequiredBounds(required, layout_.dim()));
  for (const Block& b : blocks_) {
    for (uint64_t c : required) {
      if (b.rank != 0 && c > b.offset && c < b.offset + b.size && (c - b.offset) % b.cols != 0) {
        return absl::InvalidArgumentError(
            StrCat(spec(), ": a frame cannot end at ", c, ", inside a row of ", b.name));
      }
    }
  }
  std::vector<Cut> split;
  for (const Cut& cut : *cuts) {
    uint64_t begin = cut.begin;
    for (auto it = std::upper_bound(bounds.begin(), bounds.end(), begin);
         it != bounds.end() && *it < cut.end; ++it) {
      split.push_back({begin, *it});
      begin = *it;
    }
    split.push_back({begin, cut.end});
  }
  cuts->swap(split);
  return absl::OkStatus();
}

void PowerSgd::WriteBody(const Cut& cut, std::string* out) const {
  auto put = [out](std::span<const float> v) {
    out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    const uint64_t lo = std::max(cut.begin, b.offset), hi = std::min(cut.end, b.offset + b.size);
    if (lo >= hi) continue;
    if (b.rank == 0) {
      put(std::span<const float>(scratch_).subspan(lo, hi - lo));
      continue;
    }
    const uint64_t r0 = (lo - b.offset) / b.cols, r1 = (hi - b.offset) / b.cols;
    put(std::span<const float>(p_hat_[bi]).subspan(r0 * b.rank, (r1 - r0) * b.rank));
    put(q_new_[bi]);
  }
}

absl::Status PowerSgd::RefuseTwoPhase() const {
  return absl::FailedPreconditionError(
      StrCat(spec(),
             ": phases=2 is a round protocol (FedAvg jobs, powersgd_two_phase.h) and "
             "makes no frames of its own"));
}

absl::Status PowerSgd::Encode(std::span<const float> x, const EncodeOptions& opts,
                              std::vector<Frame>* frames) {
  if (phases_ == 2) return RefuseTwoPhase();
  const size_t n = x.size();
  if (n != layout_.dim()) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": input has ", n, " coordinates, the model layout ", layout_.dim()));
  }
  if (const size_t i = FindNonFinite(x); i != n) {
    return NonFiniteError(
        StrCat("input value ", i, " is not finite (", x[i], "); nothing was encoded"));
  }
  std::vector<Cut> cuts;
  FEDLGC_RETURN_IF_ERROR(PlanFrames(opts.max_frame_bytes, &cuts));
  FEDLGC_RETURN_IF_ERROR(SplitAt(opts.cuts, &cuts));
  FEDLGC_RETURN_IF_ERROR(PrepareResidual(n));
  scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) scratch_[i] = x[i] + residual_[i];
  if (const size_t i = FindNonFinite(scratch_); i != n) {
    return absl::InvalidArgumentError(StrCat(
        spec(), ": update plus residual overflowed at coordinate ", i, "; nothing was encoded"));
  }
  std::vector<float> fresh;
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    if (b.rank == 0) continue;
    std::span<const float> q = q_[bi];
    if (!warm_ || q.empty()) {
      fresh.resize(b.cols * b.rank);
      DrawQuery(bi, encodes_, fresh);
      q = fresh;
    }
    const std::span<const float> m = std::span<const float>(scratch_).subspan(b.offset, b.size);
    Factorize(bi, m, q, &p_hat_[bi], &q_new_[bi]);
    // Further power iterations on the same M: P^ nearer its top-r subspace.
    for (uint32_t it = 1; it < iters_; ++it) {
      iterate_.assign(q_new_[bi].begin(), q_new_[bi].end());
      Factorize(bi, m, iterate_, &p_hat_[bi], &q_new_[bi]);
    }
    if (FindNonFinite(q_new_[bi]) != q_new_[bi].size()) {
      return absl::InvalidArgumentError(
          StrCat(spec(), ": ", b.name, "'s factor overflowed; nothing was encoded"));
    }
  }
  const size_t first = frames->size();
  for (const Cut& cut : cuts) {
    Frame f;
    f.begin = cut.begin;
    f.length = cut.end - cut.begin;
    const size_t body = BeginFrame(wire_spec_, n, f.begin, f.length, &f.bytes);
    WriteBody(cut, &f.bytes);
    FinishFrame(body, &f.bytes);
    frames->push_back(std::move(f));
  }
  // The residual keeps exactly what the receiver will not rebuild.
  recon_.resize(n);
  absl::Status st = DecodeAll(*this, std::span<const Frame>(*frames).subspan(first), recon_);
  if (!st.ok()) {
    frames->resize(first);
    return st;
  }
  for (size_t i = 0; i < n; ++i) residual_[i] = scratch_[i] - recon_[i];
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    if (blocks_[bi].rank == 0) continue;
    q_[bi].swap(q_new_[bi]);
    // A zero column would stay zero in every later P: draw it afresh.
    for (uint32_t k = 0; k < blocks_[bi].rank; ++k) {
      bool zero = true;
      for (uint64_t j = 0; zero && j < blocks_[bi].cols; ++j)
        zero = q_[bi][j * blocks_[bi].rank + k] == 0;
      if (zero) DrawQuery(bi, encodes_ + 1, q_[bi], static_cast<int>(k));
    }
  }
  ++encodes_;
  return absl::OkStatus();
}

absl::Status PowerSgd::Decode(const FrameView& frame, std::span<float> out) const {
  if (phases_ == 2) return RefuseTwoPhase();
  if (out.size() != frame.length) {
    return absl::InvalidArgumentError(
        StrCat("output holds ", out.size(), " values, the frame covers ", frame.length));
  }
  if (frame.dim != layout_.dim()) {
    return MalformedFrame(StrCat(wire_spec_, ": frame of ", frame.dim,
                                 " coordinates for a layout of ", layout_.dim()));
  }
  const uint64_t begin = frame.begin, end = frame.begin + frame.length;
  uint64_t floats = 0;
  for (const Block& b : blocks_) {
    const uint64_t lo = std::max(begin, b.offset), hi = std::min(end, b.offset + b.size);
    if (lo >= hi) continue;
    if (b.rank == 0) {
      floats += hi - lo;
      continue;
    }
    if ((lo - b.offset) % b.cols != 0 || (hi - b.offset) % b.cols != 0) {
      return MalformedFrame(StrCat(wire_spec_, ": frame boundary inside a row of ", b.name));
    }
    floats += (hi - lo) / b.cols * b.rank + b.cols * b.rank;
  }
  if (frame.body.size() != 4 * floats) {
    return MalformedFrame(StrCat(wire_spec_, ": body of ", frame.body.size(),
                                 " bytes, the frame's range needs ", 4 * floats));
  }
  const uint8_t* cursor = frame.body.data();
  std::vector<float> p, q;
  auto take = [&cursor](uint64_t k, std::vector<float>* v) {
    v->resize(k);
    if (k > 0) std::memcpy(v->data(), cursor, k * sizeof(float));
    cursor += k * sizeof(float);
  };
  for (const Block& b : blocks_) {
    const uint64_t lo = std::max(begin, b.offset), hi = std::min(end, b.offset + b.size);
    if (lo >= hi) continue;
    float* dst = out.data() + (lo - begin);
    if (b.rank == 0) {
      std::memcpy(dst, cursor, (hi - lo) * sizeof(float));
      cursor += (hi - lo) * sizeof(float);
      continue;
    }
    const uint64_t rows = (hi - lo) / b.cols, r = b.rank;
    take(rows * r, &p);
    take(b.cols * r, &q);
    if (FindNonFinite(p) != p.size() || FindNonFinite(q) != q.size()) {
      return NonFiniteError(StrCat(wire_spec_, ": a factor of ", b.name, " is not finite"));
    }
    for (uint64_t i = 0; i < rows; ++i) {
      const float* pi = p.data() + i * r;
      for (uint64_t j = 0; j < b.cols; ++j) {
        const float* qj = q.data() + j * r;
        double s = 0;
        for (uint64_t k = 0; k < r; ++k) s += static_cast<double>(pi[k]) * qj[k];
        dst[i * b.cols + j] = static_cast<float>(s);
      }
    }
  }
  if (const size_t i = FindNonFinite(out); i != out.size()) {
    return NonFiniteError(StrCat(wire_spec_, ": coordinate ", begin + i, " decodes to ", out[i]));
  }
  return absl::OkStatus();
}

std::string PowerSgd::SaveState() const {
  std::string out = BeginState(kStateMagic, kStateVersion);
  PutScalar(&out, encodes_);
  uint32_t matrices = 0;
  for (const Block& b : blocks_) matrices += b.rank ? 1 : 0;
  PutScalar(&out, matrices);
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    if (blocks_[bi].rank == 0) continue;
    PutScalar(&out, static_cast<uint64_t>(q_[bi].size()));
    out.append(reinterpret_cast<const char*>(q_[bi].data()), q_[bi].size() * sizeof(float));
  }
  return out;
}

absl::Status PowerSgd::LoadState(std::string_view bytes) {
  if (bytes.empty()) {  // nothing saved yet: the next encode draws its Q
    for (auto& q : q_) q.clear();
    encodes_ = 0;
    return absl::OkStatus();
  }
  ByteReader r(bytes);
  // The spec names the model layout: a state of another layout is another spec's.
  FEDLGC_RETURN_IF_ERROR(ReadStateStart(r, kStateMagic, kStateVersion, "PowerSGD"));
  uint32_t matrices = 0;
  uint64_t encodes = 0;
  if (!r.Get(&encodes) || !r.Get(&matrices)) return RefuseState("truncated");
  std::vector<std::vector<float>> q(blocks_.size());
  uint32_t seen = 0;
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    if (b.rank == 0) continue;
    ++seen;
    uint64_t m = 0;
    std::span<const uint8_t> floats;
    if (seen > matrices || !r.Get(&m)) return RefuseState("truncated");
    if (m != 0 && m != b.cols * b.rank) return RefuseState(StrCat(b.name, ": Q of ", m, " values"));
    if (!r.Take(m * sizeof(float), &floats)) return RefuseState("truncated");
    q[bi].resize(m);
    if (m > 0) std::memcpy(q[bi].data(), floats.data(), floats.size());
    if (FindNonFinite(q[bi]) != m) return RefuseState(StrCat(b.name, ": non-finite Q"));
  }
  if (seen != matrices || !r.done()) return RefuseState("matrix count or trailing bytes");
  q_ = std::move(q);
  encodes_ = encodes;
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
