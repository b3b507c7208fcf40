// LGC payloads (see lgc_payload.h).
#include "modes/lgc/lgc_payload.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/crc32c.h"
#include "base/str.h"
#include "codecs/bit_io.h"
#include "codecs/byte_io.h"
#include "codecs/input_error.h"

namespace fedlgc::lgc {

using codecs::ByteReader;
using codecs::PutScalar;
namespace {

// Bits that hold any value below n (at least 1).
int BitsFor(uint64_t n) { return n <= 2 ? 1 : 64 - std::countl_zero(n - 1); }

absl::Status Truncated(const char* what) {
  return absl::InvalidArgumentError(StrCat("lgc payload: truncated ", what));
}

void PutPacked(std::string* out, std::span<const uint64_t> values, int bits) {
  std::string packed;
  codecs::BitWriter w(&packed);
  for (uint64_t v : values) w.Write(v, bits);
  w.Flush();
  *out += packed;
}

bool GetPacked(ByteReader* c, size_t n, int bits, std::vector<uint64_t>* out) {
  std::span<const uint8_t> bytes;
  if (!c->Take((n * static_cast<size_t>(bits) + 7) / 8, &bytes)) return false;
  codecs::BitReader r(bytes);
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!r.Read(bits, &(*out)[i])) return false;
  }
  return true;
}

absl::Status CheckGain(float gain) {
  if (!std::isfinite(gain)) return codecs::NonFiniteError("lgc payload: gain not finite");
  return absl::OkStatus();
}

// An innovation's `count` positions (ascending, below `length`) and the bytes of its values
// (`value_bytes` each).
absl::Status ReadPositions(ByteReader* c, uint32_t count, size_t length, size_t value_bytes,
                           std::vector<uint64_t>* pos, std::span<const uint8_t>* raw) {
  if (count > length) {
    return absl::InvalidArgumentError(
        StrCat("lgc payload: ", count, " innovation values for a support of ", length));
  }
  if (!GetPacked(c, count, BitsFor(length), pos)) return Truncated("innovation positions");
  for (uint32_t i = 0; i < count; ++i) {
    if ((*pos)[i] >= length || (i > 0 && (*pos)[i] <= (*pos)[i - 1])) {
      return absl::InvalidArgumentError("lgc payload: innovation positions out of range or order");
    }
  }
  if (!c->Take(size_t{count} * value_bytes, raw)) return Truncated("innovation values");
  return absl::OkStatus();
}

// f32 gain, f32 step, u32 count, positions, int8 values (lgc_payload.h).
absl::Status CheckStep(float step) {
  // 127 steps must stay finite: the largest value rebuilt is 127 * step.
  if (!std::isfinite(step) || step < 0 || !std::isfinite(127.0f * step)) {
    return codecs::NonFiniteError("lgc payload: innovation step not finite and >= 0");
  }
  return absl::OkStatus();
}

absl::Status AppendGainInnovation(float gain, float step, uint32_t sent_crc,
                                  std::span<const float> innovation, std::string* out) {
  if (absl::Status st = CheckGain(gain); !st.ok()) return st;
  if (absl::Status st = CheckStep(step); !st.ok()) return st;
  std::vector<uint64_t> pos;
  std::string q;
  for (size_t j = 0; j < innovation.size(); ++j) {
    const float x = innovation[j];
    if (x == 0.0f) continue;
    const long n = step > 0 && std::isfinite(x) ? std::lround(x / step) : 0;
    if (n == 0 || n < -127 || n > 127 || static_cast<float>(n) * step != x) {
      return absl::InvalidArgumentError("lgc payload: innovation value off its 8-bit grid");
    }
    pos.push_back(j);
    q.push_back(static_cast<char>(static_cast<int8_t>(n)));
  }
  PutScalar<float>(out, gain);
  PutScalar<float>(out, step);
  PutScalar<uint32_t>(out, sent_crc);
  PutScalar<uint32_t>(out, static_cast<uint32_t>(pos.size()));
  PutPacked(out, pos, BitsFor(innovation.size()));
  *out += q;
  return absl::OkStatus();
}

absl::Status ReadGainInnovation(ByteReader* c, size_t length, float* gain, float* step,
                                uint32_t* sent_crc, std::vector<float>* innovation) {
  uint32_t count = 0;
  if (!c->Get(gain) || !c->Get(step) || !c->Get(sent_crc) || !c->Get(&count)) {
    return Truncated("innovation header");
  }
  if (absl::Status st = CheckGain(*gain); !st.ok()) return st;
  if (absl::Status st = CheckStep(*step); !st.ok()) return st;
  if (count > 0 && *step == 0) {
    return absl::InvalidArgumentError("lgc payload: innovation values with a zero step");
  }
  std::vector<uint64_t> pos;
  std::span<const uint8_t> raw;
  if (absl::Status st = ReadPositions(c, count, length, 1, &pos, &raw); !st.ok()) return st;
  innovation->assign(length, 0.0f);
  for (uint32_t i = 0; i < count; ++i) {
    const int8_t n = static_cast<int8_t>(raw[i]);
    if (n == 0 || n == -128) {
      return absl::InvalidArgumentError("lgc payload: innovation value 0 or -128");
    }
    (*innovation)[pos[i]] = static_cast<float>(n) * *step;
  }
  return absl::OkStatus();
}

}  // namespace

float RmsScale(std::span<const float> values) {
  double ss = 0;
  for (float v : values) ss += static_cast<double>(v) * v;
  const double rms = values.empty() ? 0 : std::sqrt(ss / static_cast<double>(values.size()));
  return std::isfinite(rms) && rms > 0 ? static_cast<float>(rms) : 1.0f;
}

std::vector<uint32_t> SelectSupport(std::span<const float> u, size_t k) {
  k = std::min(k, u.size());
  std::vector<uint32_t> idx(u.size());
  std::iota(idx.begin(), idx.end(), 0u);
  auto by_magnitude = [&](uint32_t a, uint32_t b) {
    const float ma = std::fabs(u[a]), mb = std::fabs(u[b]);
    return ma > mb || (ma == mb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), by_magnitude);
  idx.resize(k);
  std::sort(idx.begin(), idx.end(),
            [&](uint32_t a, uint32_t b) { return u[a] < u[b] || (u[a] == u[b] && a < b); });
  return idx;
}

std::string SupportToBytes(std::span<const uint32_t> support) {
  return std::string(reinterpret_cast<const char*>(support.data()), support.size() * 4);
}

absl::StatusOr<std::vector<uint32_t>> SupportFromBytes(std::string_view bytes, size_t k,
                                                       uint64_t dim) {
  if (bytes.size() % 4 != 0 || (k > 0 && bytes.size() != k * 4)) {
    return absl::InvalidArgumentError(StrCat("LGC support of ", bytes.size(), " bytes, expected ",
                                             k > 0 ? StrCat(k * 4) : "a multiple of 4"));
  }
  std::vector<uint32_t> support(bytes.size() / 4);
  if (!support.empty()) std::memcpy(support.data(), bytes.data(), bytes.size());
  for (uint32_t i : support) {
    if (i >= dim) {
      return absl::OutOfRangeError(StrCat("LGC support index ", i, " outside ", dim));
    }
  }
  return support;
}

std::vector<float> Gather(std::span<const float> u, std::span<const uint32_t> support) {
  std::vector<float> out(support.size());
  for (size_t j = 0; j < support.size(); ++j) out[j] = u[support[j]];
  return out;
}

std::vector<float> InnovationOfValues(std::span<const float> v, size_t k_inn) {
  k_inn = std::min(k_inn, v.size());
  std::vector<uint32_t> pos(v.size());
  std::iota(pos.begin(), pos.end(), 0u);
  std::nth_element(pos.begin(), pos.begin() + k_inn, pos.end(), [&](uint32_t a, uint32_t b) {
    const float ma = std::fabs(v[a]), mb = std::fabs(v[b]);
    return ma > mb || (ma == mb && a < b);
  });
  std::vector<float> out(v.size(), 0.0f);
  for (size_t i = 0; i < k_inn; ++i) out[pos[i]] = v[pos[i]];
  return out;
}

absl::StatusOr<std::string> EncodeLeader(const LeaderPayload& p, uint64_t dim,
                                         const codecs::DenseCodec& latent_codec, uint64_t seed) {
  if (p.innovation.size() != p.support.size()) {
    return absl::InvalidArgumentError("lgc payload: innovation and support differ in length");
  }
  for (float v : p.innovation) {
    if (!std::isfinite(v)) return codecs::NonFiniteError("lgc payload: non-finite innovation");
  }
  if (absl::Status st = CheckGain(p.scale); !st.ok()) return st;
  std::string out;
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(p.support.size()));
  const int index_bits = BitsFor(dim);
  PutScalar<uint8_t>(&out, static_cast<uint8_t>(index_bits));
  std::vector<uint64_t> idx(p.support.begin(), p.support.end());
  for (uint64_t i : idx) {
    if (i >= dim) return absl::InvalidArgumentError("lgc payload: support index out of range");
  }
  PutPacked(&out, idx, index_bits);
  std::string latent;
  codecs::BodyContext ctx;
  ctx.seed = seed;
  if (absl::Status st = latent_codec.EncodeBody(p.latent, ctx, &latent); !st.ok()) return st;
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(latent.size()));
  out += latent;
  if (absl::Status st = AppendGainInnovation(p.scale, p.step, p.sent_crc, p.innovation, &out);
      !st.ok()) {
    return st;
  }
  return out;
}

absl::StatusOr<LeaderPayload> DecodeLeader(std::span<const uint8_t> body, uint64_t dim,
                                           const codecs::DenseCodec& latent_codec,
                                           size_t latent_size) {
  ByteReader c(body);
  uint32_t length = 0;
  uint8_t index_bits = 0;
  if (!c.Get(&length) || !c.Get(&index_bits)) return Truncated("header");
  if (length == 0 || length > dim) {
    return absl::InvalidArgumentError(
        StrCat("lgc payload: support of ", length, " for a model of ", dim));
  }
  if (index_bits != BitsFor(dim)) {
    return absl::InvalidArgumentError("lgc payload: index width does not match the model");
  }
  LeaderPayload p;
  std::vector<uint64_t> idx;
  if (!GetPacked(&c, length, index_bits, &idx)) return Truncated("support");
  std::vector<bool> seen(dim, false);
  for (uint64_t i : idx) {
    if (i >= dim || seen[i]) {
      return absl::InvalidArgumentError("lgc payload: support index out of range or repeated");
    }
    seen[i] = true;
    p.support.push_back(static_cast<uint32_t>(i));
  }
  uint32_t latent_bytes = 0;
  std::span<const uint8_t> latent;
  if (!c.Get(&latent_bytes) || !c.Take(latent_bytes, &latent)) return Truncated("latent");
  p.latent.assign(latent_size, 0.0f);
  if (absl::Status st = latent_codec.DecodeBody(latent, p.latent); !st.ok()) return st;
  if (absl::Status st =
          ReadGainInnovation(&c, length, &p.scale, &p.step, &p.sent_crc, &p.innovation);
      !st.ok()) {
    return st;
  }
  if (!c.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  return p;
}

std::vector<float> Rebuild(float gain, std::span<const float> prediction,
                           std::span<const float> innovation) {
  std::vector<float> out(prediction.size());
  for (size_t j = 0; j < out.size(); ++j) {
    out[j] = gain * prediction[j] + (j < innovation.size() ? innovation[j] : 0.0f);
  }
  return out;
}

Correction Correct(std::span<const float> v, std::span<const float> prediction, size_t k_inn) {
  double vp = 0, pp = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    vp += static_cast<double>(v[j]) * prediction[j];
    pp += static_cast<double>(prediction[j]) * prediction[j];
  }
  Correction c;
  const double g = pp > 0 ? vp / pp : 0.0;
  c.gain = std::isfinite(g) ? static_cast<float>(g) : 0.0f;
  std::vector<float> miss(v.size());
  for (size_t j = 0; j < v.size(); ++j) miss[j] = v[j] - c.gain * prediction[j];
  c.innovation = InnovationOfValues(miss, k_inn);
  // 8-bit values on a step of max|innovation| / 127, rounded to nearest: the rounding error
  // stays with the client (sent is what the coordinator rebuilds, to the bit).
  float max_abs = 0;
  for (float x : c.innovation) max_abs = std::max(max_abs, std::fabs(x));
  c.step = std::isfinite(max_abs) && max_abs > 0 ? max_abs / 127.0f : 0.0f;
  for (float& x : c.innovation) {
    if (x == 0.0f || c.step == 0.0f) {
      x = 0.0f;
      continue;
    }
    const long q = std::clamp(std::lround(x / c.step), -127L, 127L);
    x = static_cast<float>(q) * c.step;
  }
  c.sent = Rebuild(c.gain, prediction, c.innovation);
  c.sent_crc = SentCrc(c.sent);
  return c;
}

uint32_t ReferenceOf(std::span<const uint32_t> support, std::span<const float> latent) {
  const uint32_t crc = Crc32c(support.data(), support.size() * sizeof(uint32_t));
  return Crc32cExtend(crc, latent.data(), latent.size() * sizeof(float));
}

absl::StatusOr<std::string> EncodeCorrection(const Correction& c) {
  std::string out;
  PutScalar<uint32_t>(&out, c.reference);
  if (absl::Status st = AppendGainInnovation(c.gain, c.step, c.sent_crc, c.innovation, &out);
      !st.ok()) {
    return st;
  }
  return out;
}

absl::StatusOr<Correction> DecodeCorrection(std::span<const uint8_t> body, size_t length) {
  ByteReader r(body);
  Correction c;
  if (!r.Get(&c.reference)) return Truncated("correction header");
  if (absl::Status st =
          ReadGainInnovation(&r, length, &c.gain, &c.step, &c.sent_crc, &c.innovation);
      !st.ok()) {
    return st;
  }
  if (!r.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  return c;
}

uint32_t SentCrc(std::span<const float> sent) {
  return Crc32c(sent.data(), sent.size() * sizeof(float));
}

}  // namespace fedlgc::lgc
