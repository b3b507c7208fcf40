// LGC's stage-3 payloads: the support is the top-k by magnitude in ascending value order,
// bodies round-trip (indices and innovation exactly, the latent within its quantizer's
// error) with exact sizes, hostile bodies are refused; and the plan's spec.
#include "modes/lgc/lgc_payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "modes/lgc/lgc_plan.h"
#include "modes/lgc/refused_for_tests.h"

namespace fedlgc::lgc {
namespace {

std::vector<float> Gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::unique_ptr<codecs::DenseCodec> LatentCodec(const std::string& spec) {
  auto c = codecs::MakeCodec(spec).value();
  return std::unique_ptr<codecs::DenseCodec>(dynamic_cast<codecs::DenseCodec*>(c.release()));
}

TEST(LgcPayload, SupportIsTopKByMagnitudeInAscendingOrder) {
  const auto u = Gaussian(5000, 1);
  const auto s = SelectSupport(u, 50);
  ASSERT_EQ(s.size(), 50u);
  std::vector<float> mags;
  for (float x : u) mags.push_back(std::fabs(x));
  std::nth_element(mags.begin(), mags.begin() + 49, mags.end(), std::greater<float>());
  const float threshold = mags[49];
  std::set<uint32_t> unique(s.begin(), s.end());
  EXPECT_EQ(unique.size(), 50u);
  for (size_t j = 0; j < s.size(); ++j) {
    EXPECT_GE(std::fabs(u[s[j]]), threshold);
    if (j > 0) {
      EXPECT_LE(u[s[j - 1]], u[s[j]]) << "not ascending at " << j;
    }
  }
  EXPECT_EQ(SelectSupport(u, 9999).size(), u.size());
}

TEST(LgcPayload, RmsScale) {
  EXPECT_FLOAT_EQ(RmsScale(std::vector<float>{3, -4, 0, 0}), 2.5f);
  EXPECT_EQ(RmsScale(std::vector<float>(5, 0.0f)), 1.0f);
  EXPECT_EQ(RmsScale({}), 1.0f);
}

TEST(LgcPayload, InnovationKeepsTheLargestValuesOnTheSupport) {
  const auto u = Gaussian(2000, 5);
  const auto support = SelectSupport(u, 100);
  const auto inn = InnovationOfValues(Gather(u, support), 7);
  ASSERT_EQ(inn.size(), 100u);
  EXPECT_EQ(std::count_if(inn.begin(), inn.end(), [](float v) { return v != 0; }), 7);
  const auto v = Gather(u, support);
  // Ascending order: the largest magnitudes sit at the two ends of the support.
  float smallest_kept = INFINITY, largest_dropped = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    if (inn[j] != 0) {
      EXPECT_EQ(inn[j], v[j]);
      smallest_kept = std::min(smallest_kept, std::fabs(v[j]));
    } else {
      largest_dropped = std::max(largest_dropped, std::fabs(v[j]));
    }
  }
  EXPECT_GE(smallest_kept, largest_dropped);
}

TEST(LgcPayload, LeaderBodyRoundTripsWithExactSize) {
  constexpr uint64_t kDim = 215000;
  const auto u = Gaussian(kDim, 9);
  LeaderPayload p;
  p.support = SelectSupport(u, 2150);
  const std::vector<float> v = Gather(u, p.support);
  const Correction c = Correct(v, Gaussian(v.size(), 10), 21);
  p.innovation = c.innovation;
  p.scale = c.gain;
  p.step = c.step;
  p.sent_crc = c.sent_crc;
  p.latent = Gaussian(4 * 133, 11);
  for (const std::string spec : {"qsgd(bits=8,bucket=64)", "qsgd(bits=4,bucket=64)"}) {
    auto codec = LatentCodec(spec);
    auto body = EncodeLeader(p, kDim, *codec, 42);
    ASSERT_TRUE(body.ok()) << body.status();
    // 4 + 1 + 2150 indices at 18 bits + 4 + latent + gain, step, CRC, count + 21 positions
    // at 12 bits + 21 int8 values
    const size_t expect = 4 + 1 + (2150 * 18 + 7) / 8 + 4 + codec->MaxBodyBytes(p.latent.size()) +
                          16 + (21 * 12 + 7) / 8 + 21;
    EXPECT_EQ(body->size(), expect) << spec;
    const auto bytes =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    auto back = DecodeLeader(bytes, kDim, *codec, p.latent.size());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->support, p.support);
    EXPECT_EQ(back->innovation, p.innovation);
    EXPECT_EQ(back->scale, p.scale);
    EXPECT_EQ(back->step, p.step);
    EXPECT_EQ(back->sent_crc, p.sent_crc);
    // QSGD on buckets of 64: each value within its bucket's L2 norm / levels.
    const double levels = spec.find("bits=8") != std::string::npos ? 127 : 7;
    for (size_t b = 0; b < p.latent.size(); b += 64) {
      double norm = 0;
      for (size_t i = b; i < std::min(b + 64, p.latent.size()); ++i)
        norm += p.latent[i] * p.latent[i];
      norm = std::sqrt(norm);
      for (size_t i = b; i < std::min(b + 64, p.latent.size()); ++i) {
        EXPECT_LE(std::fabs(back->latent[i] - p.latent[i]), norm / levels * 1.0001 + 1e-6)
            << spec << i;
      }
    }
  }
}

TEST(LgcPayload, HostileBodiesAreRefused) {
  constexpr uint64_t kDim = 5000;
  const auto u = Gaussian(kDim, 13);
  LeaderPayload p;
  p.support = SelectSupport(u, 100);
  const Correction c = Correct(Gather(u, p.support), Gaussian(100, 14), 5);
  p.innovation = c.innovation;
  p.scale = c.gain;
  p.step = c.step;
  p.latent = Gaussian(4 * 5, 17);
  auto codec = LatentCodec("qsgd(bits=8,bucket=64)");
  const std::string body = EncodeLeader(p, kDim, *codec, 1).value();
  auto view = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_TRUE(Refused(DecodeLeader(view(body.substr(0, n)), kDim, *codec, 20))) << n;
  }
  EXPECT_TRUE(Refused(DecodeLeader(view(body + "x"), kDim, *codec, 20)));
  EXPECT_TRUE(Refused(DecodeLeader(view(body), kDim, *codec, 21))) << "latent size";
  EXPECT_TRUE(Refused(DecodeLeader(view(body), kDim * 4, *codec, 20))) << "index width";
  // Repeated and out-of-range indices.
  LeaderPayload dup = p;
  dup.support[1] = dup.support[0];
  EXPECT_FALSE(
      DecodeLeader(view(EncodeLeader(dup, kDim, *codec, 1).value()), kDim, *codec, 20).ok());
  LeaderPayload far = p;
  far.support[0] = kDim + 3;
  EXPECT_FALSE(EncodeLeader(far, kDim, *codec, 1).ok());
  // Random single-byte mutations: refused or decoded to a well-formed payload, never a crash.
  std::mt19937_64 rng(7);
  for (int t = 0; t < 2000; ++t) {
    std::string m = body;
    m[rng() % m.size()] ^= static_cast<char>(1 + rng() % 255);
    auto r = DecodeLeader(view(m), kDim, *codec, 20);
    if (r.ok()) {
      EXPECT_EQ(r->support.size(), r->innovation.size());
      for (uint32_t i : r->support) EXPECT_LT(i, kDim);
      for (float v : r->latent) EXPECT_TRUE(std::isfinite(v));
    }
  }
}

TEST(LgcPayload, PredictiveCorrectionIsTheLeastSquaresGainPlusTheLargestMisses) {
  // v = 0.6 p + noise: the gain is <v, p> / |p|^2, the innovation the k_inn largest entries
  // of v - gain p rounded to 8 bits (within half a step), and sent = gain p + innovation
  // leaves much less than |v|.
  const auto p = Gaussian(400, 21);
  auto v = Gaussian(400, 22);
  for (size_t j = 0; j < v.size(); ++j) v[j] = 0.6f * p[j] + 0.5f * v[j];
  const Correction c = Correct(v, p, 40);
  double vp = 0, pp = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    vp += double(v[j]) * p[j];
    pp += double(p[j]) * p[j];
  }
  EXPECT_FLOAT_EQ(c.gain, static_cast<float>(vp / pp));
  EXPECT_NEAR(c.gain, 0.6, 0.1);
  EXPECT_EQ(std::count_if(c.innovation.begin(), c.innovation.end(), [](float x) { return x != 0; }),
            40);
  float smallest_kept = INFINITY, largest_left = 0, max_abs = 0;
  double miss = 0, before = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    const float m = v[j] - c.gain * p[j];
    if (c.innovation[j] != 0) {
      EXPECT_LE(std::fabs(c.innovation[j] - m), 0.5f * c.step * 1.0001f) << j;
      const long q = std::lround(c.innovation[j] / c.step);
      EXPECT_EQ(static_cast<float>(q) * c.step, c.innovation[j]) << "off the 8-bit grid at " << j;
      EXPECT_LE(std::abs(q), 127);
      smallest_kept = std::min(smallest_kept, std::fabs(m));
      max_abs = std::max(max_abs, std::fabs(m));
    } else {
      largest_left = std::max(largest_left, std::fabs(m));
    }
    EXPECT_EQ(c.sent[j], c.gain * p[j] + c.innovation[j]);
    miss += (double(v[j]) - c.sent[j]) * (v[j] - c.sent[j]);
    before += double(v[j]) * v[j];
  }
  EXPECT_GE(smallest_kept, largest_left);
  EXPECT_FLOAT_EQ(c.step, max_abs / 127);
  EXPECT_LT(miss, 0.5 * before);  // 0.36 of the energy predicted, then the 10% largest misses
  EXPECT_EQ(Rebuild(c.gain, p, c.innovation), c.sent);
  // A useless prediction costs nothing: gain 0, and the innovation alone is sent.
  const Correction zero = Correct(v, std::vector<float>(400, 0.0f), 40);
  EXPECT_EQ(zero.gain, 0.0f);
  EXPECT_EQ(zero.sent, zero.innovation);
  // An anticorrelated prediction gets a negative gain, still a contraction.
  std::vector<float> minus(p);
  for (float& x : minus) x = -x;
  const Correction neg = Correct(v, minus, 1);
  EXPECT_LT(neg.gain, 0.0f);
  double neg_miss = 0;
  for (size_t j = 0; j < v.size(); ++j) neg_miss += (v[j] - neg.sent[j]) * (v[j] - neg.sent[j]);
  EXPECT_LT(neg_miss, before);
}

TEST(LgcPayload, CorrectionBodiesRoundTripExactlyAndHostileOnesAreRefused) {
  auto view = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const auto p = Gaussian(100, 31);
  Correction c = Correct(Gaussian(100, 32), p, 9);
  EXPECT_EQ(c.sent_crc, SentCrc(c.sent));
  c.reference = 0xdeadbeef;
  c.gain = -0.75f;  // a gain may be negative; a scale may not
  const std::string body = EncodeCorrection(c).value();
  // u32 reference, f32 gain, f32 step, u32 sent CRC, u32 count, 9 positions of 7 bits, 9
  // int8 values.
  EXPECT_EQ(body.size(), 4u + 4 + 4 + 4 + 4 + 8 + 9);
  auto back = DecodeCorrection(view(body), 100);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->reference, 0xdeadbeefu);
  EXPECT_EQ(back->gain, -0.75f);
  EXPECT_EQ(back->step, c.step);
  EXPECT_EQ(back->sent_crc, c.sent_crc);
  EXPECT_EQ(back->innovation, c.innovation);  // to the bit: the client's EF relies on it
  EXPECT_TRUE(back->sent.empty());
  for (size_t n = 0; n < body.size(); ++n)
    EXPECT_TRUE(Refused(DecodeCorrection(view(body.substr(0, n)), 100))) << n;
  EXPECT_TRUE(Refused(DecodeCorrection(view(body + "x"), 100)));
  EXPECT_TRUE(Refused(DecodeCorrection(view(body), 5))) << "positions beyond the support";
  auto refused = [&](auto change) {
    Correction bad = c;
    change(bad);
    return !EncodeCorrection(bad).ok();
  };
  EXPECT_TRUE(refused([](Correction& b) { b.gain = NAN; }));
  EXPECT_TRUE(refused([](Correction& b) { b.gain = INFINITY; }));
  EXPECT_TRUE(refused([](Correction& b) { b.step = -b.step; }));
  EXPECT_TRUE(refused([](Correction& b) { b.step = 1e38f; }));  // 127 steps overflow
  EXPECT_TRUE(refused([](Correction& b) {
    for (float& x : b.innovation) {
      if (x != 0) {
        x += 0.25f * b.step;  // off the grid
        break;
      }
    }
  }));
  EXPECT_TRUE(refused([](Correction& b) { b.innovation[7] = 200 * b.step; }));  // > 127 steps
  EXPECT_FALSE(refused([](Correction& b) {
    b.step = 0;
    b.innovation.assign(100, 0.0f);
  }));
  // Hostile bytes: a zero or -128 value, a zero step with values, a NaN step.
  std::string zero_q = body;
  zero_q[body.size() - 1] = 0;
  EXPECT_TRUE(Refused(DecodeCorrection(view(zero_q), 100)));
  std::string min_q = body;
  min_q[body.size() - 1] = static_cast<char>(0x80);
  EXPECT_TRUE(Refused(DecodeCorrection(view(min_q), 100)));
  // A zero step with nonzero values is inconsistent; a negative, NaN or huge one (127 steps
  // overflow) is not a finite scale.
  std::string zero_step = body;
  const float zero = 0.0f;
  std::memcpy(zero_step.data() + 8, &zero, 4);
  EXPECT_TRUE(Refused(DecodeCorrection(view(zero_step), 100)));
  for (float bad : {-1.0f, NAN, 1e38f}) {
    std::string b = body;
    std::memcpy(b.data() + 8, &bad, 4);
    EXPECT_TRUE(Refused(DecodeCorrection(view(b), 100), codecs::InputError::kNonFinite)) << bad;
  }
  // A leader's gain may be negative.
  constexpr uint64_t kDim = 5000;
  const auto u = Gaussian(kDim, 33);
  LeaderPayload lp;
  lp.support = SelectSupport(u, 100);
  lp.innovation = c.innovation;
  lp.step = c.step;
  lp.sent_crc = 99;
  lp.latent = Gaussian(20, 34);
  lp.scale = -2.0f;
  auto codec = LatentCodec("qsgd(bits=8,bucket=64)");
  const std::string leader = EncodeLeader(lp, kDim, *codec, 1).value();
  auto lb = DecodeLeader(view(leader), kDim, *codec, 20);
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_EQ(lb->scale, -2.0f);
  EXPECT_EQ(lb->step, c.step);
  EXPECT_EQ(lb->sent_crc, 99u);
  EXPECT_EQ(lb->innovation, c.innovation);
  lp.scale = NAN;
  EXPECT_FALSE(EncodeLeader(lp, kDim, *codec, 1).ok());
  for (size_t n = 0; n < leader.size(); ++n)
    EXPECT_TRUE(Refused(DecodeLeader(view(leader.substr(0, n)), kDim, *codec, 20))) << n;
}

TEST(LgcPayload, TheReferenceNamesItsLeaderPayload) {
  // The reference covers the support and the latent: any change to either changes it.
  const std::vector<uint32_t> s = {4, 9, 2};
  const std::vector<float> z = {0.5f, -1.0f};
  const uint32_t r = ReferenceOf(s, z);
  EXPECT_EQ(r, ReferenceOf(s, z));
  EXPECT_NE(r, ReferenceOf(std::vector<uint32_t>{4, 2, 9}, z));
  EXPECT_NE(r, ReferenceOf(s, std::vector<float>{0.5f, -1.5f}));
  EXPECT_NE(r, ReferenceOf(s, {}));
}

TEST(LgcPlan, SpecFieldsDefaultsAndRefusals) {
  auto plain = ParseLgcSpec("qsgd(bits=4)");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->has_value());
  auto d = ParseLgcSpec("lgc");
  ASSERT_TRUE(d.ok() && d->has_value()) << d.status();
  EXPECT_EQ((*d)->ratio, 0.05);
  EXPECT_EQ((*d)->bits, 2);
  EXPECT_EQ((*d)->ramp, 0u);
  EXPECT_TRUE((*d)->entropy);
  EXPECT_TRUE((*d)->zstd);
  EXPECT_EQ((*d)->train_rounds, 0u);
  EXPECT_FALSE((*d)->autoencoder());
  EXPECT_EQ(StageOf(**d, 1, 0, 0), LgcStage::kCells);
  EXPECT_EQ(StageOf(**d, 1000, 0, 7), LgcStage::kCells);  // the compact codes throughout
  EXPECT_EQ(StageOf(**d, 2, 2, 0), LgcStage::kWarmUp);
  EXPECT_FALSE(TrainsAutoencoder(**d, 1, 0));
  EXPECT_FALSE((*d)->ae_wait);
  EXPECT_EQ((*d)->SupportSize(215370), 10769u);
  auto p = ParseLgcSpec(
      "lgc(ratio=0.05,bits=4,ramp=2,entropy=0,zstd=0,innovation=0.02,train=6,ae_steps=3,"
      "ae_optimizer=sgd,ae_lr=0.01,latent=qsgd(bits=4,bucket=64),ae_wait=1)");
  ASSERT_TRUE(p.ok() && p->has_value()) << p.status();
  EXPECT_EQ((*p)->ratio, 0.05);
  EXPECT_EQ((*p)->bits, 4);
  EXPECT_EQ((*p)->ramp, 2u);
  EXPECT_FALSE((*p)->entropy);
  EXPECT_FALSE((*p)->zstd);
  EXPECT_EQ((*p)->innovation, 0.02);
  EXPECT_EQ((*p)->train_rounds, 6u);
  EXPECT_EQ((*p)->ae_steps, 3u);
  EXPECT_EQ((*p)->ae_optimizer, "sgd");
  EXPECT_NE((*p)->latent.find("bits=4"), std::string::npos) << (*p)->latent;
  EXPECT_EQ((*p)->InnovationSize(2154), 44u);
  EXPECT_TRUE((*p)->ae_wait);
  // Rounds 1 to 6 train; stage 3 begins at the switch, round 7 or later.
  EXPECT_TRUE(TrainsAutoencoder(**p, 6, 0));
  EXPECT_FALSE(TrainsAutoencoder(**p, 7, 0));
  EXPECT_EQ(StageOf(**p, 7, 0, 0), LgcStage::kCells);
  EXPECT_EQ(StageOf(**p, 8, 0, 9), LgcStage::kCells);
  EXPECT_EQ(StageOf(**p, 9, 0, 9), LgcStage::kAutoencoder);
  // The keys of the protocols before this one: what is now the protocol is accepted.
  EXPECT_TRUE(ParseLgcSpec("lgc(predict=1,code=cells,echo=0)").ok());
  EXPECT_TRUE(ParseLgcSpec("lgc(train=3,ramp=2)").ok());  // the ramp ends before training does
  for (const char* removed : {"lgc(predict=0)", "lgc(code=fp32)", "lgc(echo=1)"}) {
    auto r = ParseLgcSpec(removed);
    ASSERT_FALSE(r.ok()) << removed;
    EXPECT_NE(r.status().message().find("one protocol"), std::string_view::npos) << r.status();
  }
  for (const char* bad :
       {"lgc(predict=2)", "lgc(ratio=0)", "lgc(ratio=2)", "lgc(bits=3)", "lgc(bits=8)",
        "lgc(zstd=2)", "lgc(entropy=2)", "lgc(ae_wait=2)", "lgc(ramp=21)", "lgc(train=-1)", "lgc(train=2,ramp=2)",
        "lgc(ae_optimizer=rmsprop)", "lgc(latent=topk(ratio=0.1))", "lgc(colour=red)"}) {
    EXPECT_FALSE(ParseLgcSpec(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace fedlgc::lgc
