// LGC payloads (see lgc_payload.h).
#include "autoencoder/lgc_payload.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "autoencoder/byte_io.h"
#include "codecs/bit_io.h"
#include "codecs/str.h"

namespace fedlgc::autoencoder {
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

void AppendInnovation(std::span<const float> innovation, float scale, std::string* out) {
  PutScalar<float>(out, scale);
  std::vector<uint64_t> pos;
  std::vector<float> vals;
  for (size_t j = 0; j < innovation.size(); ++j) {
    if (innovation[j] != 0.0f) {
      pos.push_back(j);
      vals.push_back(innovation[j]);
    }
  }
  PutScalar<uint32_t>(out, static_cast<uint32_t>(pos.size()));
  PutPacked(out, pos, BitsFor(innovation.size()));
  out->append(reinterpret_cast<const char*>(vals.data()), vals.size() * sizeof(float));
}

absl::Status CheckScale(float scale) {
  if (!std::isfinite(scale) || !(scale > 0)) {
    return absl::InvalidArgumentError("lgc payload: scale not finite and positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<InnovationPart> ReadInnovation(ByteReader* c, size_t length) {
  InnovationPart part;
  if (!c->Get(&part.scale)) return Truncated("innovation scale");
  if (absl::Status st = CheckScale(part.scale); !st.ok()) return st;
  uint32_t count = 0;
  if (!c->Get(&count)) return Truncated("innovation count");
  if (count > length) {
    return absl::InvalidArgumentError(
        StrCat("lgc payload: ", count, " innovation values for a support of ", length));
  }
  std::vector<uint64_t> pos;
  if (!GetPacked(c, count, BitsFor(length), &pos)) return Truncated("innovation positions");
  std::span<const uint8_t> raw;
  if (!c->Take(size_t{count} * sizeof(float), &raw)) return Truncated("innovation values");
  std::vector<float> out(length, 0.0f);
  for (uint32_t i = 0; i < count; ++i) {
    if (pos[i] >= length || (i > 0 && pos[i] <= pos[i - 1])) {
      return absl::InvalidArgumentError("lgc payload: innovation positions out of range or order");
    }
    float v;
    std::memcpy(&v, raw.data() + i * sizeof(float), sizeof(float));
    if (!std::isfinite(v) || v == 0.0f) {
      return absl::InvalidArgumentError("lgc payload: innovation value zero or not finite");
    }
    out[pos[i]] = v;
  }
  part.innovation = std::move(out);
  return part;
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

std::vector<float> Gather(std::span<const float> u, std::span<const uint32_t> support) {
  std::vector<float> out(support.size());
  for (size_t j = 0; j < support.size(); ++j) out[j] = u[support[j]];
  return out;
}

std::vector<float> Innovation(std::span<const float> u, std::span<const uint32_t> support,
                              size_t k_inn) {
  return InnovationOfValues(Gather(u, support), k_inn);
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

std::vector<float> ResidualAfter(std::span<const float> u, std::span<const uint32_t> support) {
  std::vector<float> r(u.begin(), u.end());
  for (uint32_t i : support) r[i] = 0.0f;
  return r;
}

absl::StatusOr<std::string> EncodeLeader(const LeaderPayload& p, uint64_t dim,
                                         const codecs::DenseCodec& latent_codec, uint64_t seed) {
  if (p.innovation.size() != p.support.size()) {
    return absl::InvalidArgumentError("lgc payload: innovation and support differ in length");
  }
  for (float v : p.innovation) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("lgc payload: non-finite innovation");
  }
  if (absl::Status st = CheckScale(p.scale); !st.ok()) return st;
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
  AppendInnovation(p.innovation, p.scale, &out);
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
  auto inn = ReadInnovation(&c, length);
  if (!inn.ok()) return inn.status();
  if (!c.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  p.innovation = std::move(inn->innovation);
  p.scale = inn->scale;
  return p;
}

absl::StatusOr<std::string> EncodeInnovation(std::span<const float> innovation, float scale) {
  for (float v : innovation) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("lgc payload: non-finite innovation");
  }
  if (absl::Status st = CheckScale(scale); !st.ok()) return st;
  std::string out;
  AppendInnovation(innovation, scale, &out);
  return out;
}

absl::StatusOr<InnovationPart> DecodeInnovation(std::span<const uint8_t> body, size_t length) {
  ByteReader c(body);
  auto inn = ReadInnovation(&c, length);
  if (!inn.ok()) return inn.status();
  if (!c.done()) return absl::InvalidArgumentError("lgc payload: trailing bytes");
  return inn;
}

}  // namespace fedlgc::autoencoder
