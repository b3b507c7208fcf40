// Fuzz target for the LGC decoders the coordinator runs on what clients send
// (modes/lgc/lgc_codes.h, lgc_payload.h, envelope.h): the first input byte picks the decoder, the
// rest is its body. Every input must decode or fail with a status; what decodes must hold what the
// decoder promises (indices in range and distinct, values finite). Seeds are valid bodies of each
// kind. Built like decode_fuzzer.cc (libFuzzer with clang, the seeded driver everywhere else);
// libtorch-free, so it builds in the codecs-only configuration.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "autoencoder/envelope.h"
#include "codecs/dense_codec.h"
#include "codecs/registry.h"
#include "modes/lgc/lgc_codes.h"
#include "modes/lgc/lgc_payload.h"

namespace {

using namespace fedlgc::autoencoder;  // NOLINT: the envelope
using namespace fedlgc::lgc;          // NOLINT: the payloads

constexpr uint64_t kDim = 5000;
constexpr size_t kSupport = 64;
constexpr size_t kLatent = 16;

enum Kind : uint8_t {
  kLeader,
  kCorrection,
  kLeaderCells,    // range-coded (the default plan, entropy=1)
  kBitCorrection,  // range-coded
  kSupportBytes,
  kEnvelope,
  kLeaderCellsZstd,    // packed with zstd (entropy=0)
  kBitCorrectionZstd,  // packed with zstd
  kKinds
};

const LgcPlan& Plan(bool entropy = true) {
  static const LgcPlan plan;
  static const LgcPlan zstd = [] {
    LgcPlan p;
    p.entropy = false;
    return p;
  }();
  return entropy ? plan : zstd;
}

const fedlgc::codecs::DenseCodec& LatentCodec() {
  static const auto* codec = dynamic_cast<fedlgc::codecs::DenseCodec*>(
      fedlgc::codecs::MakeCodec("qsgd(bits=4,bucket=8)").value().release());
  return *codec;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckFinite(std::span<const float> v) {
  for (float x : v) Check(std::isfinite(x));
}

void CheckSupport(std::span<const uint32_t> s) {
  std::set<uint32_t> seen;
  for (uint32_t i : s) Check(i < kDim && seen.insert(i).second);
}

void CheckCells(const absl::StatusOr<LeaderCells>& lc) {
  if (!lc.ok()) return;
  CheckSupport(lc->support);
  Check(lc->values.size() == kSupport);
  CheckFinite(lc->values);
  for (size_t j = 1; j < lc->support.size(); ++j) Check(lc->support[j - 1] < lc->support[j]);
}

void CheckBits(const absl::StatusOr<BitCorrection>& c) {
  if (!c.ok()) return;
  Check(c->codes.size() == kSupport && c->correction.size() == kSupport);
  Check(c->bits == 1 || c->bits == 2 || c->bits == 4);
  Check(std::isfinite(c->gain));
  CheckFinite(c->correction);
}

std::string Tagged(Kind k, const std::string& body) { return std::string(1, char(k)) + body; }

}  // namespace

// Valid bodies of every kind, tagged (fuzz_driver.cc writes them as the corpus).
extern "C" const char* FedlgcFuzzSpec() { return "lgc-payload"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> u(kDim);
  for (float& x : u) x = normal(rng);
  LeaderPayload p;
  p.support = SelectSupport(u, kSupport);
  const std::vector<float> v = Gather(u, p.support);
  p.latent.resize(kLatent);
  for (float& x : p.latent) x = normal(rng);
  const Correction c = Correct(v, std::vector<float>(v.rbegin(), v.rend()), 8);
  p.scale = c.gain;
  p.step = c.step;
  p.innovation = c.innovation;
  p.sent_crc = c.sent_crc;
  std::vector<std::string> seeds;
  seeds.push_back(Tagged(kLeader, EncodeLeader(p, kDim, LatentCodec(), 1).value()));
  seeds.push_back(Tagged(kCorrection, EncodeCorrection(c).value()));
  const std::vector<uint32_t> set = SelectSupportSet(u, kSupport);
  std::vector<float> sent;
  const std::string cells = EncodeLeaderCells(set, Gather(u, set), kDim, &sent);
  std::vector<float> w(kSupport);
  for (float& x : w) x = normal(rng);
  const BitCorrection bits = CorrectBits(w, sent, 2);
  for (bool entropy : {true, false}) {
    seeds.push_back(Tagged(entropy ? kLeaderCells : kLeaderCellsZstd,
                           PackLeaderCells(Plan(entropy), cells, set, kDim).value()));
    seeds.push_back(
        Tagged(entropy ? kBitCorrection : kBitCorrectionZstd,
               PackBitCorrection(Plan(entropy), EncodeBitCorrection(bits).value(), bits).value()));
  }
  seeds.push_back(Tagged(kSupportBytes, SupportToBytes(p.support)));
  seeds.push_back(Tagged(kEnvelope, Seal(kKindDecoder, kSupport, std::string(200, 'w'))));
  return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Kind kind = static_cast<Kind>(data[0] % kKinds);
  const std::span<const uint8_t> body(data + 1, size - 1);
  switch (kind) {
    case kLeader: {
      auto p = DecodeLeader(body, kDim, LatentCodec(), kLatent);
      if (p.ok()) {
        CheckSupport(p->support);
        CheckFinite(p->latent);
        CheckFinite(p->innovation);
        Check(p->latent.size() == kLatent && p->innovation.size() == p->support.size());
        Check(std::isfinite(p->scale) && std::isfinite(p->step));
      }
      break;
    }
    case kCorrection: {
      auto c = DecodeCorrection(body, kSupport);
      if (c.ok()) {
        Check(c->innovation.size() == kSupport);
        Check(std::isfinite(c->gain) && std::isfinite(c->step));
        CheckFinite(c->innovation);
      }
      break;
    }
    case kLeaderCells:
    case kLeaderCellsZstd:
      CheckCells(UnpackLeaderCells(Plan(kind == kLeaderCells), body, kDim, kSupport));
      break;
    case kBitCorrection:
    case kBitCorrectionZstd:
      CheckBits(UnpackBitCorrection(Plan(kind == kBitCorrection), body, kSupport));
      break;
    case kSupportBytes: {
      const std::string_view bytes(reinterpret_cast<const char*>(body.data()), body.size());
      auto s = SupportFromBytes(bytes, 0, kDim);
      if (s.ok()) {
        for (uint32_t i : *s) Check(i < kDim);
      }
      break;
    }
    case kEnvelope: {
      int64_t length = 0;
      const std::string_view bytes(reinterpret_cast<const char*>(body.data()), body.size());
      auto b = OpenEnvelope(bytes, kKindDecoder, &length);
      if (b.ok()) Check(b->size() <= bytes.size());
      break;
    }
    default:
      break;
  }
  return 0;
}
