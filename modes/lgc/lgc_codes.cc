// LGC's compact codes (see lgc_codes.h).
#include "modes/lgc/lgc_codes.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/str.h"
#include "codecs/bit_io.h"
#include "codecs/byte_io.h"
#include "codecs/elias_fano.h"
#include "codecs/input_error.h"
#include "codecs/zstd_codec.h"
#include "modes/lgc/lgc_entropy.h"
#include "modes/lgc/lgc_payload.h"

namespace fedlgc::lgc {
namespace {

using codecs::ByteReader;
using codecs::PutScalar;

absl::Status Truncated(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("lgc payload: truncated ", what));
}

// The level of code c of a `bits`-bit mid-rise code: c - (2^bits - 1) / 2.
float Level(uint32_t c, int bits) {
  return static_cast<float>(c) - static_cast<float>((1u << bits) - 1) / 2.0f;
}

// Codes of r on a candidate step `delta` (mid-rise, clamped to the outermost levels).
void Assign(std::span<const float> r, float delta, int bits, uint8_t* codes) {
  const int top = (1 << bits) - 1;
  const int half = 1 << (bits - 1);
  for (size_t j = 0; j < r.size(); ++j) {
    const long c = delta > 0 ? std::lround(std::floor(r[j] / delta)) + half : (r[j] < 0 ? 0 : half);
    codes[j] = static_cast<uint8_t>(std::clamp<long>(c, 0, top));
  }
}

// The least-squares step for fixed codes, and the squared error it leaves.
float FitStep(std::span<const float> r, const uint8_t* codes, int bits, double* err) {
  double rl = 0, ll = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    const double l = Level(codes[j], bits);
    rl += r[j] * l;
    ll += l * l;
  }
  double s = ll > 0 ? rl / ll : 0.0;
  if (!(s > 0) || !std::isfinite(s)) s = 0;
  const float step = static_cast<float>(s);
  double e = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    const double d = r[j] - double(step * Level(codes[j], bits));
    e += d * d;
  }
  *err = e;
  return step;
}

}  // namespace

std::vector<uint32_t> SelectSupportSet(std::span<const float> u, size_t k) {
  k = std::min(k, u.size());
  std::vector<uint32_t> idx(u.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const auto larger = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(u[a]), fb = std::fabs(u[b]);
    return fa != fb ? fa > fb : a < b;
  };
  if (k < idx.size()) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), larger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

size_t CellsBytes(size_t k) { return kCells * sizeof(float) + (k + 1) / 2; }

void EncodeCells(std::span<const float> v, std::string* out, std::vector<float>* decoded) {
  float lo = 0, hi = 0;
  for (float x : v) {
    const float a = std::fabs(x);
    if (!(a > 0) || !std::isfinite(a)) continue;
    lo = lo == 0 ? a : std::min(lo, a);
    hi = std::max(hi, a);
  }
  const double log_lo = lo > 0 ? std::log(double(lo)) : 0.0;
  const double width = hi > lo ? std::log(double(hi)) - log_lo : 0.0;
  std::vector<uint8_t> cell(v.size(), 0);
  double sum[kCells] = {}, count[kCells] = {};
  for (size_t j = 0; j < v.size(); ++j) {
    const double a = std::fabs(v[j]);
    int c = 0;
    if (width > 0 && a > 0 && std::isfinite(a)) {
      c = std::clamp(static_cast<int>(kCells * (std::log(a) - log_lo) / width), 0, kCells - 1);
    }
    cell[j] = static_cast<uint8_t>(c);
    if (std::isfinite(a)) {
      sum[c] += a;
      count[c] += 1;
    }
  }
  float mean[kCells];
  for (int c = 0; c < kCells; ++c) {
    mean[c] = count[c] > 0 ? static_cast<float>(sum[c] / count[c]) : 0.0f;
    PutScalar<float>(out, mean[c]);
  }
  const size_t first = out->size();
  out->append((v.size() + 1) / 2, '\0');
  if (decoded) decoded->resize(v.size());
  for (size_t j = 0; j < v.size(); ++j) {
    const bool negative = std::signbit(v[j]);
    const uint8_t code = static_cast<uint8_t>(cell[j] | (negative ? 8 : 0));
    (*out)[first + j / 2] =
        static_cast<char>(static_cast<uint8_t>((*out)[first + j / 2]) | (j % 2 ? code << 4 : code));
    if (decoded) (*decoded)[j] = negative ? -mean[cell[j]] : mean[cell[j]];
  }
}

std::string EncodeLeaderCells(std::span<const uint32_t> support, std::span<const float> v,
                              uint64_t dim, std::vector<float>* sent) {
  std::string out;
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(support.size()));
  codecs::EliasFanoEncode(support, dim, &out);
  EncodeCells(v, &out, sent);
  return out;
}

absl::StatusOr<LeaderCells> DecodeLeaderCells(std::span<const uint8_t> body, uint64_t dim,
                                              size_t k) {
  ByteReader r(body);
  uint32_t n = 0;
  if (!r.Get(&n)) return Truncated("leader header");
  if (n != k) {
    return absl::InvalidArgumentError(
        StrCat("lgc payload: a support of ", n, " indices, expected ", k));
  }
  std::span<const uint8_t> ef, codes;
  if (!r.Take(codecs::EliasFanoBytes(k, dim), &ef)) return Truncated("support");
  LeaderCells out;
  if (absl::Status st = codecs::EliasFanoDecode(ef, k, dim, &out.support); !st.ok()) {
    return absl::InvalidArgumentError(StrCat("lgc payload: support: ", std::string(st.message())));
  }
  float mean[kCells];
  for (float& m : mean) {
    if (!r.Get(&m)) return Truncated("cells");
    if (!std::isfinite(m) || m < 0) {
      return codecs::NonFiniteError("lgc payload: a cell mean that is negative or not finite");
    }
  }
  if (!r.Take((k + 1) / 2, &codes)) return Truncated("cell codes");
  if (!r.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  out.values.resize(k);
  for (size_t j = 0; j < k; ++j) {
    const uint8_t code = j % 2 ? codes[j / 2] >> 4 : codes[j / 2] & 0x0f;
    const float m = mean[code & 7];
    out.values[j] = code & 8 ? -m : m;
  }
  return out;
}

std::vector<uint32_t> ValueOrder(std::span<const float> values) {
  std::vector<uint32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return values[a] < values[b]; });
  return order;
}

BitCorrection CorrectBits(std::span<const float> v, std::span<const float> prediction, int bits) {
  BitCorrection c;
  c.bits = static_cast<uint8_t>(bits);
  double vp = 0, pp = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    vp += static_cast<double>(v[j]) * prediction[j];
    pp += static_cast<double>(prediction[j]) * prediction[j];
  }
  const double g = pp > 0 ? vp / pp : 0.0;
  c.gain = std::isfinite(g) ? static_cast<float>(g) : 0.0f;
  const size_t k = v.size();
  std::vector<float> miss(k);
  for (size_t j = 0; j < k; ++j) miss[j] = v[j] - c.gain * prediction[j];
  c.codes.assign(k, 0);
  std::vector<uint8_t> trial(kGroup);
  for (size_t g0 = 0; g0 < k; g0 += kGroup) {
    const std::span<const float> r(miss.data() + g0, std::min(kGroup, k - g0));
    float max_abs = 0;
    for (float x : r) {
      if (std::isfinite(x)) max_abs = std::max(max_abs, std::fabs(x));
    }
    // Candidate steps from the group's largest miss; the least-squares step of the best.
    double best = INFINITY;
    float best_step = 0;
    const int half = 1 << (bits - 1);
    for (const float f : {1.0f, 0.8f, 0.6f, 0.45f, 0.35f, 0.25f}) {
      Assign(r, max_abs / half * f, bits, trial.data());
      double err = 0;
      const float step = FitStep(r, trial.data(), bits, &err);
      if (err < best) {
        best = err;
        best_step = step;
        std::copy(trial.begin(), trial.begin() + r.size(), c.codes.begin() + g0);
      }
      if (bits == 1) break;  // signs: every candidate assigns the same codes
    }
    c.steps.push_back(best_step);
  }
  c.correction.resize(k);
  for (size_t j = 0; j < k; ++j) c.correction[j] = c.steps[j / kGroup] * Level(c.codes[j], bits);
  c.sent = Rebuild(c.gain, prediction, c.correction);
  c.sent_crc = SentCrc(c.sent);
  return c;
}

absl::StatusOr<std::string> EncodeBitCorrection(const BitCorrection& c) {
  if (c.bits != 1 && c.bits != 2 && c.bits != 4) {
    return absl::InvalidArgumentError(StrCat("lgc payload: ", int(c.bits), "-bit corrections"));
  }
  std::string out;
  PutScalar<uint32_t>(&out, c.reference);
  PutScalar<float>(&out, c.gain);
  PutScalar<uint8_t>(&out, c.bits);
  PutScalar<uint32_t>(&out, c.sent_crc);
  for (float s : c.steps) PutScalar<float>(&out, s);
  codecs::BitWriter w(&out);
  for (uint8_t code : c.codes) w.Write(code, c.bits);
  w.Flush();
  return out;
}

absl::StatusOr<BitCorrection> DecodeBitCorrection(std::span<const uint8_t> body, size_t k) {
  ByteReader r(body);
  BitCorrection c;
  if (!r.Get(&c.reference) || !r.Get(&c.gain) || !r.Get(&c.bits) || !r.Get(&c.sent_crc)) {
    return Truncated("correction header");
  }
  if (c.bits != 1 && c.bits != 2 && c.bits != 4) {
    return absl::InvalidArgumentError(StrCat("lgc payload: ", int(c.bits), "-bit corrections"));
  }
  if (!std::isfinite(c.gain)) return codecs::NonFiniteError("lgc payload: gain not finite");
  c.steps.resize((k + kGroup - 1) / kGroup);
  for (float& s : c.steps) {
    if (!r.Get(&s)) return Truncated("correction steps");
    if (!std::isfinite(s) || s < 0) {
      return codecs::NonFiniteError("lgc payload: a step that is negative or not finite");
    }
  }
  std::span<const uint8_t> packed;
  if (!r.Take((k * c.bits + 7) / 8, &packed)) return Truncated("correction codes");
  if (!r.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  codecs::BitReader br(packed);
  c.codes.resize(k);
  c.correction.resize(k);
  for (size_t j = 0; j < k; ++j) {
    uint64_t code = 0;
    if (!br.Read(c.bits, &code)) return Truncated("correction codes");
    c.codes[j] = static_cast<uint8_t>(code);
    c.correction[j] = c.steps[j / kGroup] * Level(c.codes[j], c.bits);
    if (!std::isfinite(c.correction[j])) {
      return codecs::NonFiniteError("lgc payload: correction not finite");
    }
  }
  return c;
}

size_t LeaderCellsBytes(size_t k, uint64_t dim) {
  return sizeof(uint32_t) + codecs::EliasFanoBytes(k, dim) + CellsBytes(k);
}

size_t BitCorrectionBytes(size_t k, int bits) {
  return 3 * sizeof(uint32_t) + 1 + sizeof(float) * ((k + kGroup - 1) / kGroup) +
         (k * static_cast<size_t>(bits) + 7) / 8;
}

namespace {

constexpr uint8_t kRawForm = 0, kZstdForm = 1, kEntropyForm = 2;
// The bytes of a correction before its codes: reference, gain, bits, CRC, the steps.
size_t CorrectionHeadBytes(size_t k) {
  return 3 * sizeof(uint32_t) + 1 + sizeof(float) * ((k + kGroup - 1) / kGroup);
}
constexpr size_t kLeaderHeadBytes = sizeof(uint32_t);
constexpr size_t kMeanBytes = kCells * sizeof(float);

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A byte 2 and `form`, or a byte 0 and the body when that is no longer.
std::string Shorter(std::string body, const std::string& form) {
  std::string out;
  if (form.size() < body.size()) {
    out.reserve(form.size() + 1);
    out.push_back(static_cast<char>(kEntropyForm));
    out += form;
  } else {
    out.reserve(body.size() + 1);
    out.push_back(static_cast<char>(kRawForm));
    out += body;
  }
  return out;
}

absl::StatusOr<std::string> Zstd(const LgcPlan& plan, std::string body) {
  if (!plan.zstd) return body;
  return codecs::ZstdPack(AsBytes(body), 3);
}

// The leader body of an entropy form: u32 k, the 8 means, the stream.
absl::StatusOr<std::string> LeaderFromEntropy(std::span<const uint8_t> form, uint64_t dim,
                                              size_t k) {
  ByteReader r(form);
  uint32_t n = 0;
  std::span<const uint8_t> means, stream;
  if (!r.Get(&n) || !r.Take(kMeanBytes, &means)) return Truncated("leader header");
  if (n != k) {
    return absl::InvalidArgumentError(
        StrCat("lgc payload: a support of ", n, " indices, expected ", k));
  }
  r.Take(form.size() - kLeaderHeadBytes - kMeanBytes, &stream);
  LeaderModels models = LeaderModels::Fresh();
  auto sc = DecodeSupportAndCells(stream, k, dim, {}, &models);
  if (!sc.ok()) return sc.status();
  std::string body;
  PutScalar<uint32_t>(&body, n);
  codecs::EliasFanoEncode(sc->support, dim, &body);
  body.append(reinterpret_cast<const char*>(means.data()), means.size());
  const size_t first = body.size();
  body.append((k + 1) / 2, '\0');
  for (size_t j = 0; j < k; ++j) {
    body[first + j / 2] = static_cast<char>(static_cast<uint8_t>(body[first + j / 2]) |
                                            (j % 2 ? sc->codes[j] << 4 : sc->codes[j]));
  }
  return body;
}

// The correction body of an entropy form: the head as it is, then the stream of codes.
absl::StatusOr<std::string> CorrectionFromEntropy(std::span<const uint8_t> form, size_t k) {
  const size_t head = CorrectionHeadBytes(k);
  if (form.size() < head) return Truncated("correction header");
  const int bits = form[2 * sizeof(uint32_t)];
  if (bits != 1 && bits != 2 && bits != 4) {
    return absl::InvalidArgumentError(StrCat("lgc payload: ", bits, "-bit corrections"));
  }
  EntropyModel model = FreshCorrectionModel(bits);
  auto codes = DecodeCorrectionCodes(form.subspan(head), k, bits, {}, &model);
  if (!codes.ok()) return codes.status();
  std::string body(reinterpret_cast<const char*>(form.data()), head);
  codecs::BitWriter w(&body);
  for (uint8_t code : *codes) w.Write(code, bits);
  w.Flush();
  return body;
}

// The body of a packed one: itself (both off), its zstd frame inflated within `cap`, or
// its entropy form decoded by `from_entropy`; into *held unless it is the body itself.
template <typename FromEntropy>
absl::StatusOr<std::span<const uint8_t>> Unpack(const LgcPlan& plan, std::span<const uint8_t> body,
                                                size_t cap, FromEntropy from_entropy,
                                                std::vector<uint8_t>* held) {
  if (plan.entropy) {
    if (body.empty()) return Truncated("body");
    if (body[0] == kRawForm) return body.subspan(1);
    if (body[0] == kZstdForm) {
      return absl::InvalidArgumentError(
          "lgc payload: a zstd-packed body in a job of entropy=1 (a client of entropy=0?)");
    }
    if (body[0] != kEntropyForm) {
      return absl::InvalidArgumentError(
          StrCat("lgc payload: a body of form ", int(body[0]), " in a job of entropy=1"));
    }
    absl::StatusOr<std::string> raw = from_entropy(body.subspan(1));
    if (!raw.ok()) return raw.status();
    held->assign(raw->begin(), raw->end());
    return std::span<const uint8_t>(*held);
  }
  if (!plan.zstd) return body;
  auto unpacked = codecs::ZstdUnpack(body, cap);
  if (!unpacked.ok()) return unpacked.status();
  *held = std::move(unpacked).value();
  return std::span<const uint8_t>(*held);
}

}  // namespace

std::vector<uint8_t> LeaderCellCodes(std::string_view body, size_t k, uint64_t dim) {
  const size_t at = kLeaderHeadBytes + codecs::EliasFanoBytes(k, dim) + kMeanBytes;
  std::vector<uint8_t> codes(k);
  for (size_t j = 0; j < k; ++j) {
    const auto b = static_cast<uint8_t>(body[at + j / 2]);
    codes[j] = j % 2 ? b >> 4 : b & 0x0f;
  }
  return codes;
}

absl::StatusOr<std::string> PackLeaderCells(const LgcPlan& plan, std::string body,
                                            std::span<const uint32_t> support, uint64_t dim) {
  if (!plan.entropy) return Zstd(plan, std::move(body));
  const size_t k = support.size();
  if (body.size() != LeaderCellsBytes(k, dim)) {
    return absl::InvalidArgumentError("lgc: a leader body of another support");
  }
  const size_t at = kLeaderHeadBytes + codecs::EliasFanoBytes(k, dim);
  const std::vector<uint8_t> codes = LeaderCellCodes(body, k, dim);
  LeaderModels models = LeaderModels::Fresh();
  std::string form = body.substr(0, kLeaderHeadBytes) + body.substr(at, kMeanBytes);
  form += EncodeSupportAndCells(support, codes, dim, {}, &models);
  return Shorter(std::move(body), form);
}

absl::StatusOr<std::string> PackBitCorrection(const LgcPlan& plan, std::string body,
                                              const BitCorrection& c) {
  if (!plan.entropy) return Zstd(plan, std::move(body));
  const size_t k = c.codes.size();
  if (body.size() != BitCorrectionBytes(k, c.bits)) {
    return absl::InvalidArgumentError("lgc: a correction body of another size");
  }
  EntropyModel model = FreshCorrectionModel(c.bits);
  std::string form = body.substr(0, CorrectionHeadBytes(k));
  form += EncodeCorrectionCodes(c.codes, c.bits, {}, &model);
  return Shorter(std::move(body), form);
}

absl::StatusOr<LeaderCells> UnpackLeaderCells(const LgcPlan& plan, std::span<const uint8_t> body,
                                              uint64_t dim, size_t k) {
  std::vector<uint8_t> held;
  auto raw = Unpack(
      plan, body, LeaderCellsBytes(k, dim),
      [&](std::span<const uint8_t> form) { return LeaderFromEntropy(form, dim, k); }, &held);
  if (!raw.ok()) return raw.status();
  return DecodeLeaderCells(*raw, dim, k);
}

absl::StatusOr<BitCorrection> UnpackBitCorrection(const LgcPlan& plan,
                                                  std::span<const uint8_t> body, size_t k) {
  std::vector<uint8_t> held;
  auto raw = Unpack(
      plan, body, BitCorrectionBytes(k, 4),
      [&](std::span<const uint8_t> form) { return CorrectionFromEntropy(form, k); }, &held);
  if (!raw.ok()) return raw.status();
  return DecodeBitCorrection(*raw, k);
}

}  // namespace fedlgc::lgc
