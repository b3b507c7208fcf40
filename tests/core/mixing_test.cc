// The oracles of LSGD (the pull) and SGP (push-sum; docs/modes.md), on the functions
// the coordinator and the edge clients use.
#include "core/mixing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "codecs/codec.h"
#include "codecs/registry.h"

namespace fedlgc::core {
namespace {

std::vector<float> RandomVector(size_t d, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(d);
  for (float& x : v) x = g(rng);
  return v;
}

double Distance(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

TEST(PullTest, ShrinksTheDistanceToTheLeaderByExactlyOneMinusC) {
  std::mt19937_64 rng(1);
  const std::vector<float> leader = RandomVector(1000, rng);
  for (double c : {0.1, 0.25, 0.5}) {
    std::vector<float> x = RandomVector(1000, rng);
    for (int pull = 0; pull < 5; ++pull) {
      const double before = Distance(x, leader);
      Pull(x, leader, c);
      EXPECT_NEAR(Distance(x, leader) / before, 1.0 - c, 1e-6) << "c=" << c << " pull " << pull;
    }
  }
}

TEST(PullTest, LeaderIsUnchangedByItsOwnPull) {
  std::mt19937_64 rng(2);
  const std::vector<float> leader = RandomVector(500, rng);
  std::vector<float> x = leader;
  Pull(x, leader, 0.1);
  EXPECT_EQ(x, leader);
}

TEST(ExponentialGraphTest, EveryRoundIsAPermutationWithoutSelfLoops) {
  for (size_t n = 2; n <= 33; ++n) {
    for (uint64_t round = 1; round <= 12; ++round) {
      std::set<size_t> targets;
      for (size_t i = 0; i < n; ++i) {
        const size_t peer = ExponentialPeer(i, n, round);
        EXPECT_NE(peer, i) << "n=" << n << " round " << round;
        targets.insert(peer);
      }
      EXPECT_EQ(targets.size(), n) << "n=" << n << " round " << round;
    }
  }
  EXPECT_EQ(ExponentialPeer(0, 1, 1), 0u);
  EXPECT_EQ(ExponentialHops(8), 3);
  EXPECT_EQ(ExponentialHops(9), 4);
  EXPECT_EQ(ExponentialHops(2), 1);
}

// A network of push-sum nodes that shares through a codec and loses messages.
struct Network {
  std::vector<std::vector<float>> x;
  std::vector<double> w;

  // One mixing round. `drop` says whether node i's share goes unacknowledged (the
  // sender then keeps it); `absent` nodes neither send nor receive.
  void Mix(uint64_t round, codecs::Codec& codec, const std::vector<float>& reference,
           const std::function<bool(size_t)>& drop, const std::set<size_t>& absent = {}) {
    std::vector<size_t> live;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!absent.count(i)) live.push_back(i);
    }
    const size_t n = live.size();
    std::vector<Share> shares(n);
    for (size_t k = 0; k < n; ++k) {
      codecs::EncodeOptions opts;
      opts.seed = round * 1000 + k;
      opts.max_frame_bytes = 4096;
      auto s = MakeShare(x[live[k]], w[live[k]], n < 2 ? 1.0 : 0.5, reference, codec, opts);
      ASSERT_TRUE(s.ok()) << s.status();
      shares[k] = std::move(s).value();
    }
    for (size_t k = 0; k < n && n >= 2; ++k) {
      if (drop(live[k])) continue;  // not acknowledged: nothing moves
      const size_t to = live[ExponentialPeer(k, n, round)];
      // The receiver decodes the frames itself, as the relay does.
      std::vector<float> got(x[0].size());
      ASSERT_TRUE(DecodeFrames(codec, shares[k].frames, shares[k].scales, got).ok());
      std::vector<float> full(got.size());
      ReconstructShare(got, shares[k].pw, reference, full);
      ASSERT_EQ(full, shares[k].full) << "sender and receiver disagree on the share";
      for (size_t i = 0; i < full.size(); ++i) {
        x[live[k]][i] -= shares[k].full[i];
        x[to][i] += full[i];
      }
      w[live[k]] -= shares[k].pw;
      w[to] += shares[k].pw;
    }
  }
  std::vector<double> SumX() const {
    std::vector<double> s(x[0].size(), 0.0);
    for (const auto& xi : x) {
      for (size_t i = 0; i < s.size(); ++i) s[i] += xi[i];
    }
    return s;
  }
  double SumW() const { return std::accumulate(w.begin(), w.end(), 0.0); }
};

Network MakeNetwork(size_t n, size_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Network net;
  for (size_t i = 0; i < n; ++i) net.x.push_back(RandomVector(d, rng));
  net.w.assign(n, 1.0);
  return net;
}

TEST(PushSumTest, ExactAverageAfterLog2NRoundsForPowersOfTwo) {
  auto codec = codecs::MakeCodec("fp32").value();
  for (size_t n : {2, 4, 8, 16}) {
    Network net = MakeNetwork(n, 300, n);
    const std::vector<double> sum = net.SumX();
    const int rounds = ExponentialHops(n);
    ASSERT_EQ(size_t{1} << rounds, n);
    for (int r = 1; r <= rounds; ++r) net.Mix(r, *codec, {}, [](size_t) { return false; });
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(net.w[i], 1.0) << "n=" << n;
      const std::vector<float> z = Debias(net.x[i], net.w[i]);
      for (size_t k = 0; k < z.size(); ++k) {
        ASSERT_NEAR(z[k], sum[k] / n, 1e-5) << "n=" << n << " node " << i << " coordinate " << k;
      }
    }
  }
}

TEST(PushSumTest, MassIsConservedWithALossyCodecDroppedSharesAndAbsentNodes) {
  std::mt19937_64 rng(7);
  for (const char* spec : {"qsgd(bits=4)", "topk(ratio=0.05)", "fp16"}) {
    auto codec = codecs::MakeCodec(spec).value();
    Network net = MakeNetwork(7, 2000, 3);
    const std::vector<double> sum0 = net.SumX();
    std::bernoulli_distribution drop(0.3);
    std::vector<float> reference(2000, 0.0f);
    for (int r = 1; r <= 20; ++r) {
      // The reference: a vector every node knows (here, node 0's model of round start).
      reference = Debias(net.x[0], net.w[0]);
      std::set<size_t> absent;
      if (r % 5 == 0) absent = {static_cast<size_t>(r) % 7};
      net.Mix(
          r, *codec, r % 2 ? reference : std::vector<float>{}, [&](size_t) { return drop(rng); },
          absent);
      ASSERT_NEAR(net.SumW(), 7.0, 1e-12) << spec << " round " << r;
    }
    const std::vector<double> sum = net.SumX();
    double worst = 0;
    for (size_t k = 0; k < sum.size(); ++k) worst = std::max(worst, std::fabs(sum[k] - sum0[k]));
    // Float rounding of 20 rounds of adds and subtracts of O(1) values.
    EXPECT_LT(worst, 2e-5) << spec;
    // The weights moved (drops and absences make the mixing irregular).
    EXPECT_GT(*std::max_element(net.w.begin(), net.w.end()) -
                  *std::min_element(net.w.begin(), net.w.end()),
              0.01)
        << spec;
  }
}

TEST(PushSumTest, DebiasedModelsConvergeToTheMeanForAnyN) {
  auto codec = codecs::MakeCodec("fp32").value();
  Network net = MakeNetwork(6, 200, 11);
  const std::vector<double> sum = net.SumX();
  std::vector<std::span<const float>> views;
  const double start = [&] {
    for (const auto& xi : net.x) views.emplace_back(xi);
    return ConsensusDistance(views, net.w);
  }();
  for (int r = 1; r <= 60; ++r) net.Mix(r, *codec, {}, [&](size_t i) { return i == 2 && r < 10; });
  views.clear();
  for (const auto& xi : net.x) views.emplace_back(xi);
  EXPECT_LT(ConsensusDistance(views, net.w), 1e-4 * start);
  const std::vector<float> z = Debias(net.x[4], net.w[4]);
  for (size_t k = 0; k < z.size(); ++k) ASSERT_NEAR(z[k], sum[k] / 6, 1e-4);
}

TEST(PushSumTest, ReferenceMakesTheLossyShareCloser) {
  // With the network mean as reference, 4-bit QSGD loses much less of a share than when it
  // encodes the whole model: the error scales with x - w m, not with x.
  std::mt19937_64 rng(5);
  auto codec = codecs::MakeCodec("qsgd(bits=4)").value();
  const std::vector<float> mean = RandomVector(5000, rng);
  std::vector<float> x = mean;
  const std::vector<float> drift = RandomVector(5000, rng, 0.01f);
  for (size_t i = 0; i < x.size(); ++i) x[i] += drift[i];
  codecs::EncodeOptions opts;
  opts.seed = 3;
  auto with = MakeShare(x, 1.0, 0.5, mean, *codec, opts).value();
  auto without = MakeShare(x, 1.0, 0.5, {}, *codec, opts).value();
  std::vector<float> exact(x.size());
  for (size_t i = 0; i < x.size(); ++i) exact[i] = 0.5f * x[i];
  EXPECT_LT(Distance(with.full, exact) * 20, Distance(without.full, exact));
}

TEST(EncodeScaledTest, TheScaledDecodingIsNeverFartherThanTheTargetAndBeatsTheRawOne) {
  std::mt19937_64 rng(9);
  const std::vector<float> v = RandomVector(20000, rng);
  const std::vector<float> zero(v.size(), 0.0f);
  codecs::EncodeOptions opts;
  opts.max_frame_bytes = 4096;
  for (const char* spec : {"qsgd(bits=4)", "qsgd(bits=2)", "terngrad"}) {
    auto codec = codecs::MakeCodec(spec).value();
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      opts.seed = seed;
      auto scaled = EncodeScaled(v, *codec, opts).value();
      std::vector<float> raw(v.size());
      ASSERT_TRUE(DecodeFrames(*codec, scaled.frames, {}, raw).ok());
      const double err = Distance(scaled.decoded, v), raw_err = Distance(raw, v);
      EXPECT_LT(err, Distance(zero, v)) << spec;  // contractive, unlike the raw decoding
      EXPECT_LT(err, raw_err) << spec;
      double mean = 0;
      for (float s : scaled.scales) {
        EXPECT_LT(s, 1.0f) << spec;  // unbiased: shrink
        mean += s / scaled.scales.size();
      }
      if (seed == 1) {
        std::printf("%s on Gaussian data: mean scale %.3f, error %.3f of |v| (raw %.3f)\n", spec,
                    mean, err / Distance(zero, v), raw_err / Distance(zero, v));
      }
      // The receiver's decoding with the scales is the sender's, bit for bit.
      std::vector<float> again(v.size());
      ASSERT_TRUE(DecodeFrames(*codec, scaled.frames, scaled.scales, again).ok());
      EXPECT_EQ(again, scaled.decoded) << spec;
    }
  }
  // Top-k decodes a projection: its best scale is 1.
  auto topk = codecs::MakeCodec("topk(ratio=0.05)").value();
  auto scaled = EncodeScaled(v, *topk, opts).value();
  for (float s : scaled.scales) EXPECT_FLOAT_EQ(s, 1.0f);
}

TEST(PushSumTest, RefusesBadShares) {
  auto codec = codecs::MakeCodec("fp32").value();
  std::vector<float> x(10, 1.0f);
  codecs::EncodeOptions opts;
  EXPECT_FALSE(MakeShare(x, 0.0, 0.5, {}, *codec, opts).ok());
  EXPECT_FALSE(MakeShare(x, 1.0, 1.5, {}, *codec, opts).ok());
  EXPECT_FALSE(MakeShare(x, 1.0, 0.5, std::vector<float>(3), *codec, opts).ok());
}

}  // namespace
}  // namespace fedlgc::core
