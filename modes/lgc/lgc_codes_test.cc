// LGC's compact codes: the support set is the top-k in ascending order and costs its
// Elias-Fano bytes, cells decode to the bit what the sender counts and stay within their
// log-spacing of each value, bit corrections never leave a group's miss larger than it was
// (and leave less with more bits), rebuild the same at both ends, and hostile bodies are
// refused.
#include "modes/lgc/lgc_codes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "codecs/elias_fano.h"
#include "codecs/input_error.h"
#include "codecs/zstd_codec.h"
#include "gtest/gtest.h"
#include "modes/lgc/lgc_payload.h"
#include "modes/lgc/refused_for_tests.h"

namespace fedlgc::lgc {
namespace {

std::vector<float> Gaussian(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

double Norm2(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return s;
}

TEST(LgcCodes, TheSupportSetIsTheTopKInAscendingOrder) {
  const std::vector<float> u = {0.1f, -5.0f, 2.0f, 0.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(SelectSupportSet(u, 3), (std::vector<uint32_t>{1, 2, 5}));
  // Ties go to the lower index: 2 (|2|) before 4 (|-2|).
  EXPECT_EQ(SelectSupportSet(u, 4), (std::vector<uint32_t>{1, 2, 4, 5}));
  EXPECT_EQ(SelectSupportSet(u, 100).size(), u.size());
}

TEST(LgcCodes, ALeaderBodyIsTheSetAndCellsAndDecodesToWhatItsSenderCounts) {
  const uint64_t dim = 200000;
  const std::vector<float> u = Gaussian(dim, 1, 0.01f);
  const size_t k = 4000;
  const std::vector<uint32_t> support = SelectSupportSet(u, k);
  const std::vector<float> v = Gather(u, support);
  std::vector<float> sent;
  const std::string body = EncodeLeaderCells(support, v, dim, &sent);
  // u32 k, the set at its Elias-Fano size, 8 means and 4 bits a value.
  EXPECT_EQ(body.size(), 4 + codecs::EliasFanoBytes(k, dim) + 32 + k / 2);
  // About 8.6 bits an index: within 2 bits of the information bound.
  EXPECT_LT(codecs::EliasFanoBytes(k, dim) * 8.0, codecs::Log2Binomial(dim, k) + 2.0 * k);
  auto back = DecodeLeaderCells(Bytes(body), dim, k);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->support, support);
  ASSERT_EQ(back->values.size(), k);
  EXPECT_EQ(0, std::memcmp(back->values.data(), sent.data(), k * sizeof(float)));
  // Signs are kept; every value is within its cell's spread of the cell mean: 8 cells
  // between the smallest and largest |v| of the top 2% of a Gaussian (a ratio of about
  // 2.2) leave each value within 11% of what it decodes to, and the whole within 5%.
  float lo = INFINITY, hi = 0;
  for (float x : v) lo = std::min(lo, std::fabs(x)), hi = std::max(hi, std::fabs(x));
  const double cell_ratio = std::pow(double(hi) / lo, 1.0 / kCells);
  double err = 0;
  for (size_t j = 0; j < k; ++j) {
    EXPECT_EQ(std::signbit(sent[j]), std::signbit(v[j])) << j;
    EXPECT_LE(std::fabs(sent[j]) / std::fabs(v[j]), cell_ratio * 1.0001) << j;
    EXPECT_GE(std::fabs(sent[j]) / std::fabs(v[j]), 1 / cell_ratio / 1.0001) << j;
    err += (double(v[j]) - sent[j]) * (double(v[j]) - sent[j]);
  }
  EXPECT_LT(std::sqrt(err / Norm2(v)), 0.05);
}

TEST(LgcCodes, CellsOfEqualOrZeroMagnitudesDecodeExactly) {
  const std::vector<float> same = {0.5f, -0.5f, 0.5f};
  std::string out;
  std::vector<float> sent;
  EncodeCells(same, &out, &sent);
  EXPECT_EQ(out.size(), CellsBytes(3));
  EXPECT_EQ(sent, same);
  out.clear();
  EncodeCells(std::vector<float>(5, 0.0f), &out, &sent);
  EXPECT_EQ(sent, std::vector<float>(5, 0.0f));
}

TEST(LgcCodes, TheValueOrderSortsByDecodedValueTiesByPosition) {
  const std::vector<float> v = {0.5f, -1.0f, 0.5f, -2.0f};
  EXPECT_EQ(ValueOrder(v), (std::vector<uint32_t>{3, 1, 0, 2}));
}

TEST(LgcCodes, BitCorrectionsNeverLeaveAGroupsMissLargerAndShrinkWithBits) {
  const size_t k = 1000;  // 8 groups, the last one short
  const std::vector<float> p = Gaussian(k, 2);
  std::vector<float> v = Gaussian(k, 3);
  for (size_t j = 0; j < k; ++j) v[j] += 0.7f * p[j];
  double last = INFINITY;
  for (int bits : {1, 2, 4}) {
    const BitCorrection c = CorrectBits(v, p, bits);
    ASSERT_EQ(c.steps.size(), (k + kGroup - 1) / kGroup);
    // Per group: |v - sent| <= |v - gain p| (the least-squares step can always be 0).
    double total = 0;
    for (size_t g0 = 0; g0 < k; g0 += kGroup) {
      double miss = 0, left = 0;
      for (size_t j = g0; j < std::min(k, g0 + kGroup); ++j) {
        const double r = v[j] - double(c.gain * p[j]);
        miss += r * r;
        left += (double(v[j]) - c.sent[j]) * (double(v[j]) - c.sent[j]);
      }
      EXPECT_LE(left, miss * (1 + 1e-6)) << bits << " bits, group at " << g0;
      total += left;
    }
    const double rel = std::sqrt(total / Norm2(v));
    // Gaussian misses: a sign keeps sqrt(1 - 2/pi) = 0.60 of them, 2 bits about 0.35, 4
    // bits about 0.10 (of |v - gain p|, itself 0.82 of |v| here).
    EXPECT_LT(rel, bits == 1 ? 0.55 : bits == 2 ? 0.33 : 0.12) << bits;
    EXPECT_LT(rel, last) << bits;
    last = rel;
    // The body: header, a float per group, the codes; it rebuilds to the client's sent.
    auto body = EncodeBitCorrection(c);
    ASSERT_TRUE(body.ok());
    EXPECT_EQ(body->size(), 13 + 4 * c.steps.size() + (k * bits + 7) / 8);
    auto back = DecodeBitCorrection(Bytes(*body), k);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->bits, bits);
    const std::vector<float> rebuilt = Rebuild(back->gain, p, back->correction);
    EXPECT_EQ(SentCrc(rebuilt), c.sent_crc);
    EXPECT_EQ(0, std::memcmp(rebuilt.data(), c.sent.data(), k * sizeof(float)));
  }
}

TEST(LgcCodes, AZeroPredictionOrZeroMissIsHandled) {
  const std::vector<float> v = Gaussian(300, 4);
  const BitCorrection c = CorrectBits(v, std::vector<float>(300, 0.0f), 1);
  EXPECT_EQ(c.gain, 0.0f);
  EXPECT_LT(Norm2(std::vector<float>(c.sent.begin(), c.sent.end())), 2 * Norm2(v));
  const BitCorrection same = CorrectBits(v, v, 2);
  EXPECT_FLOAT_EQ(same.gain, 1.0f);
  for (size_t j = 0; j < v.size(); ++j) EXPECT_NEAR(same.sent[j], v[j], 1e-5);
}

TEST(LgcCodes, HostileBodiesAreRefused) {
  const uint64_t dim = 5000;
  const std::vector<float> u = Gaussian(dim, 5);
  const std::vector<uint32_t> support = SelectSupportSet(u, 100);
  const std::string leader = EncodeLeaderCells(support, Gather(u, support), dim, nullptr);
  EXPECT_TRUE(DecodeLeaderCells(Bytes(leader), dim, 100).ok());
  EXPECT_TRUE(Refused(DecodeLeaderCells(Bytes(leader), dim, 99)));  // another k
  EXPECT_TRUE(Refused(DecodeLeaderCells(Bytes(leader.substr(0, leader.size() - 1)), dim, 100)));
  EXPECT_TRUE(Refused(DecodeLeaderCells(Bytes(leader + "x"), dim, 100)));
  std::string bad = leader;
  const float nan = NAN, negative = -1.0f;
  const size_t means = 4 + codecs::EliasFanoBytes(100, dim);
  std::memcpy(bad.data() + means, &nan, 4);
  EXPECT_TRUE(Refused(DecodeLeaderCells(Bytes(bad), dim, 100), codecs::InputError::kNonFinite));
  std::memcpy(bad.data() + means, &negative, 4);
  EXPECT_TRUE(Refused(DecodeLeaderCells(Bytes(bad), dim, 100), codecs::InputError::kNonFinite));
  // A support that decodes past dim: the same code read against a smaller dim.
  EXPECT_FALSE(DecodeLeaderCells(Bytes(leader), support.back(), 100).ok());

  const BitCorrection c = CorrectBits(Gaussian(300, 6), Gaussian(300, 7), 2);
  const std::string body = EncodeBitCorrection(c).value();
  EXPECT_TRUE(DecodeBitCorrection(Bytes(body), 300).ok());
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(body), 301)));
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(body.substr(0, 12)), 300)));
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(body + "x"), 300)));
  std::string three = body;
  three[8] = 3;
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(three), 300)));
  std::string nan_gain = body;
  std::memcpy(nan_gain.data() + 4, &nan, 4);
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(nan_gain), 300), codecs::InputError::kNonFinite));
  std::string neg_step = body;
  std::memcpy(neg_step.data() + 13, &negative, 4);
  EXPECT_TRUE(Refused(DecodeBitCorrection(Bytes(neg_step), 300), codecs::InputError::kNonFinite));
  BitCorrection three_bits = c;
  three_bits.bits = 3;
  EXPECT_FALSE(EncodeBitCorrection(three_bits).ok());
}

// entropy=0, zstd=1: a body packs and unpacks to itself, smaller on a real-sized update
// (the cell codes and the Elias-Fano high bits are far from uniform); the largest bodies
// bound what a packed one may inflate to; zstd=0 sends the bodies as they are.
TEST(LgcCodes, PackedBodiesUnpackToThemselvesWithinTheirLargestSize) {
  const uint64_t dim = 215370;
  const std::vector<float> u = Gaussian(dim, 41, 0.01f), w = Gaussian(dim, 42, 0.01f);
  const size_t k = 6462;
  LgcPlan packed, plain;
  packed.entropy = plain.entropy = false;
  plain.zstd = false;
  const std::vector<uint32_t> support = SelectSupportSet(u, k);
  std::vector<float> sent;
  const std::string leader = EncodeLeaderCells(support, Gather(u, support), dim, &sent);
  EXPECT_EQ(leader.size(), LeaderCellsBytes(k, dim));
  BitCorrection c = CorrectBits(Gather(w, support), sent, 2);
  const std::string follower = EncodeBitCorrection(c).value();
  EXPECT_EQ(follower.size(), BitCorrectionBytes(k, 2));
  EXPECT_EQ(PackLeaderCells(plain, leader, support, dim).value(), leader);
  const std::string pl = PackLeaderCells(packed, leader, support, dim).value();
  const std::string pf = PackBitCorrection(packed, follower, c).value();
  EXPECT_LT(pl.size(), leader.size());
  auto lc = UnpackLeaderCells(packed, Bytes(pl), dim, k);
  ASSERT_TRUE(lc.ok()) << lc.status();
  EXPECT_EQ(lc->support, support);
  EXPECT_EQ(0, std::memcmp(lc->values.data(), sent.data(), k * sizeof(float)));
  auto bc = UnpackBitCorrection(packed, Bytes(pf), k);
  ASSERT_TRUE(bc.ok()) << bc.status();
  EXPECT_EQ(bc->codes, c.codes);
  EXPECT_EQ(bc->steps, c.steps);
  // A body packed for the other setting, torn, or inflating past the largest body.
  EXPECT_FALSE(UnpackLeaderCells(packed, Bytes(leader), dim, k).ok());
  EXPECT_FALSE(UnpackLeaderCells(plain, Bytes(pl), dim, k).ok());
  for (size_t n : {size_t{0}, size_t{1}, pl.size() / 2, pl.size() - 1}) {
    EXPECT_TRUE(Refused(UnpackLeaderCells(packed, Bytes(pl.substr(0, n)), dim, k))) << n;
  }
  const std::string big(BitCorrectionBytes(k, 4) + 1, '\0');
  const std::string bomb = codecs::ZstdPack(Bytes(big), 3).value();
  EXPECT_TRUE(Refused(UnpackBitCorrection(packed, Bytes(bomb), k), codecs::InputError::kMalformed));
  // Random byte flips: refused or a well-formed body, never a crash.
  std::mt19937_64 rng(43);
  for (int t = 0; t < 300; ++t) {
    std::string m = pf;
    m[rng() % m.size()] ^= static_cast<char>(1 + rng() % 255);
    auto r = UnpackBitCorrection(packed, Bytes(m), k);
    if (r.ok()) {
      EXPECT_EQ(r->codes.size(), k);
    }
  }
}

// entropy=1, the default: a body's entropy form unpacks to the body byte for byte, is
// smaller than its zstd frame, and falls back to the body itself when that is shorter; a
// form the plan does not take, a cut stream or flipped bytes are refused or decode to a
// well-formed body, never a crash.
TEST(LgcCodes, EntropyCodedBodiesUnpackToThemselvesAndAreSmallerThanZstd) {
  const uint64_t dim = 215370;
  const std::vector<float> u = Gaussian(dim, 51, 0.01f), w = Gaussian(dim, 52, 0.01f);
  const size_t k = 6462;
  LgcPlan entropy, zstd;
  zstd.entropy = false;
  const std::vector<uint32_t> support = SelectSupportSet(u, k);
  std::vector<float> sent;
  const std::string leader = EncodeLeaderCells(support, Gather(u, support), dim, &sent);
  for (int bits : {1, 2, 4}) {
    BitCorrection c = CorrectBits(Gather(w, support), sent, bits);
    const std::string follower = EncodeBitCorrection(c).value();
    const std::string ef = PackBitCorrection(entropy, follower, c).value();
    auto bc = UnpackBitCorrection(entropy, Bytes(ef), k);
    ASSERT_TRUE(bc.ok()) << bc.status();
    EXPECT_EQ(EncodeBitCorrection(*bc).value(), follower) << bits;
    EXPECT_LE(ef.size(), follower.size() + 1) << bits;
  }
  const std::string el = PackLeaderCells(entropy, leader, support, dim).value();
  const std::string zl = PackLeaderCells(zstd, leader, support, dim).value();
  ASSERT_EQ(el[0], '\x02');
  EXPECT_LT(el.size(), zl.size());
  auto lc = UnpackLeaderCells(entropy, Bytes(el), dim, k);
  ASSERT_TRUE(lc.ok()) << lc.status();
  EXPECT_EQ(lc->support, support);
  EXPECT_EQ(0, std::memcmp(lc->values.data(), sent.data(), k * sizeof(float)));
  // A tiny support: the body itself is shorter than any stream, and goes as it is.
  const std::vector<uint32_t> one = {7};
  const std::vector<float> seven = {u[7]};
  const std::string tiny = EncodeLeaderCells(one, seven, dim, nullptr);
  const std::string et = PackLeaderCells(entropy, tiny, one, dim).value();
  EXPECT_EQ(et, std::string(1, '\0') + tiny);
  EXPECT_TRUE(UnpackLeaderCells(entropy, Bytes(et), dim, 1).ok());
  // Refused: zstd's form, the empty body, cut streams, another support size.
  ASSERT_EQ(zl[0], '\x01');
  EXPECT_TRUE(Refused(UnpackLeaderCells(entropy, Bytes(zl), dim, k)));
  EXPECT_TRUE(Refused(UnpackLeaderCells(entropy, Bytes(""), dim, k)));
  for (size_t n : {size_t{1}, size_t{20}, el.size() / 2, el.size() - 6, el.size() - 1}) {
    EXPECT_TRUE(Refused(UnpackLeaderCells(entropy, Bytes(el.substr(0, n)), dim, k))) << n;
  }
  EXPECT_TRUE(Refused(UnpackLeaderCells(entropy, Bytes(el), dim, k + 1)));
  std::mt19937_64 rng(53);
  for (int t = 0; t < 200; ++t) {
    std::string m = el;
    m[1 + rng() % (m.size() - 1)] ^= static_cast<char>(1 + rng() % 255);
    auto r = UnpackLeaderCells(entropy, Bytes(m), dim, k);
    if (r.ok()) {
      ASSERT_EQ(r->support.size(), k);
      for (size_t j = 1; j < k; ++j) ASSERT_LT(r->support[j - 1], r->support[j]);
      ASSERT_LT(r->support.back(), dim);
    }
  }
}

}  // namespace
}  // namespace fedlgc::lgc
