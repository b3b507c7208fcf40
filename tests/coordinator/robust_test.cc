// Clipping and the robust aggregators against oracles computed here by brute force, a
// Monte Carlo check that one Byzantine update of eight moves none of them far from the
// honest mean (while it drags the plain mean away), the streaming collector's clipping,
// the model guard's checks and ChooseUnderGuard's exclusions.
#include "coordinator/robust.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "base/str.h"
#include "codecs/gradiveq.h"
#include "codecs/registry.h"
#include "coordinator/collectors.h"
#include "coordinator/model_guard.h"
#include "coordinator/round_driver.h"
#include "gtest/gtest.h"
#include "tests/coordinator/fake_round_host.h"

namespace fedlgc::coordinator {
namespace {

// Updates of `dim` coordinates, complete, weight 1, named u0, u1, ...
struct Updates {
  std::vector<std::vector<float>> x;
  std::vector<std::string> names;
  std::vector<Range> whole;
  std::vector<Contribution> Contributions(std::vector<double> weights = {}) const {
    std::vector<Contribution> c;
    for (size_t i = 0; i < x.size(); ++i) {
      c.push_back({names[i], weights.empty() ? 1.0 : weights[i], x[i], whole, true});
    }
    return c;
  }
};

Updates Make(std::vector<std::vector<float>> x) {
  Updates u;
  u.x = std::move(x);
  for (size_t i = 0; i < u.x.size(); ++i) u.names.push_back(StrCat("u", i));
  u.whole = {{0, u.x.empty() ? 0 : u.x[0].size()}};
  return u;
}

AggregatorOptions Options(const std::string& spec, double clip = 0) {
  return AggregatorOptions::Parse(spec, clip).value();
}

std::vector<float> Aggregate(const std::string& spec, const Updates& u, double clip = 0,
                             std::vector<double> weights = {}, Aggregated* full = nullptr) {
  const auto c = u.Contributions(weights);
  const AggregatorOptions o = Options(spec, clip);
  auto agg = AggregateUpdates(o, c, ClipByMedian(c, o.clip), u.x[0].size()).value();
  if (full) *full = agg;
  return agg.values;
}

double Distance(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

TEST(Robust, SpecsParseAndPrintBack) {
  for (const char* spec : {"mean", "streaming", "median", "trimmed_mean(trim=0.2)",
                           "krum(f=2,select=3)", "bulyan(f=1)"}) {
    auto o = AggregatorOptions::Parse(spec, 3);
    ASSERT_TRUE(o.ok()) << spec << ": " << o.status();
    EXPECT_EQ(o->Spec(), spec);
  }
  EXPECT_EQ(Options("trimmed_mean").trim, 0.1);
  EXPECT_EQ(Options("krum").f, 1u);
  for (const char* bad : {"average", "trimmed_mean(trim=0.5)", "krum(g=1)", "median(x=1)",
                          "bulyan(f=-1)", "krum(("}) {
    EXPECT_FALSE(AggregatorOptions::Parse(bad, 3).ok()) << bad;
  }
  EXPECT_FALSE(AggregatorOptions::Parse("mean", 0.5).ok()) << "a bound below the median";
  EXPECT_FALSE(AggregatorOptions::Parse("mean", std::nan("")).ok());
  EXPECT_TRUE(AggregatorOptions::Parse("mean", 0).ok()) << "0: no clipping";
  EXPECT_FALSE(Options("median").takes_partial());
  EXPECT_FALSE(Options("streaming").buffered());
}

TEST(Robust, LowerMedianAndClippingBound) {
  EXPECT_EQ(LowerMedian({}), 0);
  EXPECT_EQ(LowerMedian({5}), 5);
  EXPECT_EQ(LowerMedian({4, 1}), 1);
  EXPECT_EQ(LowerMedian({3, 1, 2, 100}), 2);
  EXPECT_EQ(LowerMedian({3, 1, 2, 100, 7}), 3);
  // Norms 1, 2, 3, 100: the bound is 3 x 2 = 6; only the last is scaled, to norm 6.
  const Updates u = Make({{1, 0}, {0, 2}, {3, 0}, {0, 100}});
  const auto c = u.Contributions();
  const Clipping clip = ClipByMedian(c, 3);
  EXPECT_DOUBLE_EQ(clip.bound, 6);
  EXPECT_EQ(clip.clipped, 1);
  EXPECT_DOUBLE_EQ(clip.norms.at("u3"), 100);
  EXPECT_DOUBLE_EQ(clip.factors.at("u3"), 0.06);
  EXPECT_DOUBLE_EQ(clip.factors.at("u2"), 1);
  // The clipped mean: (1 + 3) / 4 and (2 + 6) / 4.
  const auto mean = Aggregate("mean", u, 3);
  EXPECT_FLOAT_EQ(mean[0], 1.0f);
  EXPECT_FLOAT_EQ(mean[1], 2.0f);
  EXPECT_EQ(ClipByMedian(c, 0).bound, 0) << "0: no clipping";
  EXPECT_EQ(ClipByMedian(c, 0).clipped, 0);
}

TEST(Robust, MeanIsWeightedPerCoordinateOverTheRangesThatArrived) {
  // Random partial updates: the mean equals the streaming collector's (no clipping).
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr uint64_t kDim = 300;
  std::vector<std::vector<float>> x(5, std::vector<float>(kDim, 0.0f));
  std::vector<std::vector<Range>> ranges(5);
  std::vector<double> w = {1, 3, 5, 2, 4};
  WeightedSumCollector sum(kDim);
  RoundFacts facts;
  facts.dim = kDim;
  std::vector<Contribution> c;
  for (int i = 0; i < 5; ++i) {
    for (uint64_t b = 0; b < kDim; b += 60) {
      if (rng() % 3 == 0) continue;  // a chunk that did not arrive
      ranges[i].push_back({b, b + 60});
      DecodedChunk d;
      d.begin = b;
      for (uint64_t j = b; j < b + 60; ++j) {
        x[i][j] = g(rng);
        d.values.push_back(x[i][j]);
      }
      ChunkIn chunk;
      chunk.client_id = StrCat("u", i);
      chunk.weight = w[i];
      sum.Collect(chunk, std::move(d), false, false, facts);
    }
  }
  for (int i = 0; i < 5; ++i) {
    c.push_back({StrCat("u", i), w[i], x[i], ranges[i], false});
  }
  auto agg = AggregateUpdates(Options("mean"), c, ClipByMedian(c, 0), kDim).value();
  const auto expect = sum.Mean().value();
  for (uint64_t j = 0; j < kDim; ++j) ASSERT_NEAR(agg.values[j], expect[j], 1e-6) << j;
}

TEST(Robust, MedianAndTrimmedMeanPerCoordinate) {
  const Updates odd = Make({{1, -5}, {9, 0}, {2, 7}, {4, 1}, {100, 2}});
  const auto med = Aggregate("median", odd);
  EXPECT_FLOAT_EQ(med[0], 4);
  EXPECT_FLOAT_EQ(med[1], 1);
  const Updates even = Make({{1, 0}, {2, 0}, {10, 0}, {4, 0}});
  EXPECT_FLOAT_EQ(Aggregate("median", even)[0], 3) << "the mean of the middle two";
  // 10 values per coordinate, trim 0.2: the two largest and two smallest go.
  std::vector<std::vector<float>> ten;
  for (float v : {5.f, -100.f, 3.f, 8.f, 1.f, 50.f, 2.f, 7.f, 4.f, 6.f}) ten.push_back({v});
  EXPECT_FLOAT_EQ(Aggregate("trimmed_mean(trim=0.2)", Make(ten))[0],
                  (2 + 3 + 4 + 5 + 6 + 7) / 6.0f);
  // trim 0.1 of 10 cuts one at each end.
  EXPECT_FLOAT_EQ(Aggregate("trimmed_mean(trim=0.1)", Make(ten))[0],
                  (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) / 8.0f);
}

TEST(Robust, KrumScoresAreSumsOfTheNearestSquaredDistances) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> x(7, std::vector<float>(4));
  for (auto& v : x) {
    for (float& e : v) e = g(rng);
  }
  const uint32_t f = 2;
  const auto scores = KrumScores(x, f);
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> d;
    for (size_t j = 0; j < x.size(); ++j) {
      if (i == j) continue;
      double s = 0;
      for (size_t k = 0; k < 4; ++k) s += (double(x[i][k]) - x[j][k]) * (double(x[i][k]) - x[j][k]);
      d.push_back(s);
    }
    std::sort(d.begin(), d.end());
    const double expect = std::accumulate(d.begin(), d.begin() + (7 - f - 2), 0.0);
    EXPECT_NEAR(scores[i], expect, 1e-9 * std::max(1.0, expect)) << i;
  }
}

TEST(Robust, KrumAndBulyanPickHonestUpdates) {
  // Five honest updates near (1, 1, 1) and two far ones (f = 2; Krum needs 2f + 3 = 7).
  std::vector<std::vector<float>> x = {{1.0f, 1.1f, 0.9f}, {0.9f, 1.0f, 1.1f},   {1.1f, 0.9f, 1.0f},
                                       {1.0f, 1.0f, 1.0f}, {1.05f, 0.95f, 1.0f}, {50, -50, 50},
                                       {-40, 60, 30}};
  Aggregated full;
  const auto krum = Aggregate("krum(f=2,select=1)", Make(x), 0, {}, &full);
  ASSERT_EQ(full.used.size(), 1u);
  EXPECT_FALSE(full.used.count("u5") || full.used.count("u6"));
  // Every update was weighed: receipts count all seven (the two left out are discarded).
  EXPECT_EQ(full.considered.size(), 7u);
  EXPECT_LT(Distance(krum, std::vector<float>{1, 1, 1}), 0.2);
  const auto multi = Aggregate("krum(f=2,select=5)", Make(x), 0, {}, &full);
  EXPECT_EQ(full.used, (std::set<std::string>{"u0", "u1", "u2", "u3", "u4"}));
  EXPECT_NEAR(multi[0], (1.0 + 0.9 + 1.1 + 1.0 + 1.05) / 5, 1e-6);
  // Bulyan with f = 1 needs 4f + 3 = 7: one far update among six honest ones.
  std::vector<std::vector<float>> y(x.begin(), x.begin() + 5);
  y.push_back({0.95f, 1.05f, 1.0f});
  y.push_back({1e4f, -1e4f, 1e4f});
  const auto bulyan = Aggregate("bulyan(f=1)", Make(y), 0, {}, &full);
  EXPECT_EQ(full.used.size(), 5u) << "n - 2f updates picked";
  EXPECT_FALSE(full.used.count("u6"));
  EXPECT_LT(Distance(bulyan, std::vector<float>{1, 1, 1}), 0.15);
  EXPECT_TRUE(full.fallback.empty());
}

TEST(Robust, TooFewUpdatesFallBackToTheMedian) {
  const Updates u = Make({{1}, {2}, {30}});
  Aggregated full;
  const auto v = Aggregate("krum(f=1)", u, 0, {}, &full);
  EXPECT_FALSE(full.fallback.empty());
  EXPECT_FLOAT_EQ(v[0], 2);
  Aggregate("bulyan(f=1)", Make({{1}, {2}, {3}, {4}, {5}, {6}}), 0, {}, &full);
  EXPECT_NE(full.fallback.find("7 complete updates"), std::string::npos) << full.fallback;
  // A partial update does not enter a robust aggregator.
  std::vector<Range> half = {{0, 1}};
  std::vector<float> a = {1, 1}, b = {5, 5};
  std::vector<Contribution> c = {{"a", 1, a, {}, true}, {"b", 1, b, half, false}};
  c[0].ranges = u.whole;
  auto agg = AggregateUpdates(Options("median"), c, ClipByMedian(c, 0), 2).value();
  EXPECT_EQ(agg.used, std::set<std::string>{"a"});
  EXPECT_EQ(agg.considered, std::set<std::string>{"a"}) << "the partial update comes back";
}

// One Byzantine update of eight: every aggregator with default clipping stays near the
// honest mean for each attack, by a margin the bound explains; the plain mean does not.
TEST(Robust, OneByzantineOfEightMovesNoAggregatorFar) {
  constexpr size_t kDim = 200;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const std::vector<std::string> specs = {"mean", "median", "trimmed_mean(trim=0.2)",
                                          "krum(f=1,select=4)", "bulyan(f=1)"};
  std::map<std::string, double> worst;
  double worst_unclipped = std::numeric_limits<double>::infinity();
  for (int trial = 0; trial < 60; ++trial) {
    // Honest updates: a common direction (norm ~2.8) plus noise (norm ~1.4 each).
    std::vector<float> center(kDim);
    for (float& c : center) c = 0.2f * g(rng);
    std::vector<std::vector<float>> x(8, center);
    for (int i = 0; i < 7; ++i) {
      for (float& e : x[i]) e += 0.1f * g(rng);
    }
    std::vector<float> honest(kDim, 0.0f);
    for (int i = 0; i < 7; ++i) {
      for (size_t j = 0; j < kDim; ++j) honest[j] += x[i][j] / 7;
    }
    const double scale = std::sqrt(kDim) * 0.2;  // the honest updates' norm
    for (int attack = 0; attack < 3; ++attack) {
      for (size_t j = 0; j < kDim; ++j) {
        x[7][j] = attack == 0 ? 100 * x[0][j] : attack == 1 ? -x[0][j] : 10 * g(rng);
      }
      const Updates u = Make(x);
      for (const std::string& spec : specs) {
        const double d = Distance(Aggregate(spec, u, 3), honest) / scale;
        worst[spec] = std::max(worst[spec], d);
      }
      // The clipped mean is (7 h + c) / 8 with |c| <= 3 x the lower median norm: it lies
      // within (|c| + |h|) / 8 of h.
      std::vector<double> norms;
      for (const auto& v : x) norms.push_back(L2Norm(v));
      const double bound = (3 * LowerMedian(norms) + L2Norm(honest)) / 8;
      EXPECT_LE(Distance(Aggregate("mean", u, 3), honest), bound * (1 + 1e-6));
      if (attack != 1) {
        worst_unclipped =
            std::min(worst_unclipped, Distance(Aggregate("mean", u, 0), honest) / scale);
      }
    }
  }
  // In honest norms: the mean within about (3 x 1.1 + 1) / 8; the others also differ
  // from the honest mean by their own sampling noise (about 0.2 for the median here).
  for (const std::string& spec : specs) {
    EXPECT_LT(worst[spec], 0.6) << spec;
    std::printf("%-24s worst distance to the honest mean: %.3f of an update's norm\n", spec.c_str(),
                worst[spec]);
  }
  EXPECT_GT(worst_unclipped, 5) << "without clipping, x100 or noise drags the mean away";
}

TEST(WeightedSumCollector, ClipsWhatCountsOfAnUpdateInArrivalOrder) {
  constexpr uint64_t kDim = 12;
  WeightedSumCollector sum(kDim, /*clip_bound=*/5);
  RoundFacts facts;
  facts.dim = kDim;
  // An update of norm 10 in three chunks of norm 6, 6 and sqrt(28): only norm 5 counts.
  const std::vector<std::vector<float>> chunks = {
      {6, 0, 0, 0}, {0, 6, 0, 0}, {0, 0, 4, 2 * std::sqrt(3.0f)}};
  for (uint64_t k = 0; k < chunks.size(); ++k) {
    DecodedChunk d;
    d.begin = 4 * k;
    d.values = chunks[k];
    ChunkIn c;
    c.client_id = "big";
    c.weight = 1;
    sum.Collect(c, std::move(d), k == 0, k == 2, facts);
  }
  const auto mean = sum.Mean().value();
  EXPECT_NEAR(L2Norm(mean), 5.0, 1e-6);
  EXPECT_FLOAT_EQ(mean[0], 5.0f) << "the first chunk takes the budget";
  EXPECT_FLOAT_EQ(mean[4], 0.0f);
  EXPECT_NEAR(sum.Norms().at("big"), 10.0, 1e-5) << "as sent";
  EXPECT_EQ(sum.clipped(), 1);
}

// Codes summed without decoding and the mean code decoded once give the same mean, to
// float rounding, as decoding every chunk and summing the values, with partial updates,
// weights, chunk scales and a clip bound that cuts one update (client 3's, 4x the others).
void ExpectSummedCodesMatchDecodes(codecs::Codec& codec, uint64_t dim, uint64_t frame_bytes,
                                   double bound, std::mt19937_64& rng) {
  const auto* code = dynamic_cast<const codecs::LinearCode*>(&codec);
  ASSERT_NE(code, nullptr);
  ASSERT_TRUE(codec.traits().summable);
  ASSERT_LT(code->code_size(), dim / 3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  RoundFacts facts;
  facts.dim = dim;
  facts.decoder = &codec;
  WeightedSumCollector decoded(dim, bound);
  WeightedSumCollector summed(dim, bound, code);
  for (int i = 0; i < 5; ++i) {
    std::vector<float> x(dim);
    for (float& v : x) v = g(rng) * (i == 3 ? 4.0f : 1.0f);
    std::vector<codecs::Frame> frames;
    codecs::EncodeOptions opts;
    opts.seed = 50 + i;  // senders' own seeds do not matter to a shared code
    opts.max_frame_bytes = frame_bytes;
    ASSERT_TRUE(codec.Encode(x, opts, &frames).ok());
    ASSERT_GT(frames.size(), 3u);
    for (size_t k = 0; k < frames.size(); ++k) {
      if (i % 2 == 1 && k % 3 == 0) continue;  // chunks that did not arrive
      ChunkIn c;
      c.client_id = StrCat("u", i);
      c.weight = 1 + i;
      c.scale = i == 2 ? 0.5f : 1.0f;
      c.frame = frames[k].bytes;
      auto a = decoded.Decode(c, facts);
      auto b = summed.Decode(c, facts);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->begin, b->begin);
      EXPECT_EQ(a->coordinates, b->coordinates);
      EXPECT_LT(b->values.size(), a->values.size() / 2 + 4) << "codes, not coordinates";
      decoded.Collect(c, *std::move(a), k == 0, false, facts);
      summed.Collect(c, *std::move(b), k == 0, false, facts);
    }
  }
  const auto want = decoded.Mean().value(), got = summed.Mean().value();
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    ASSERT_NEAR(got[j], want[j], 1e-5 * (1 + std::abs(want[j]))) << j << " bound " << bound;
  }
  for (const auto& [client, norm] : decoded.Norms()) {
    EXPECT_NEAR(summed.Norms().at(client), norm, 1e-4 * norm) << client;
  }
  EXPECT_EQ(summed.clipped(), decoded.clipped());
  if (bound > 0) {
    EXPECT_EQ(summed.clipped(), 1);
  }
}

TEST(WeightedSumCollector, SummingGradiveqCodesEqualsSummingTheirDecodes) {
  const auto layout =
      codecs::ModelLayout::Create({{"w", {40, 64}}, {"b", {40}}, {"m", {3, 4}}}).value();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> sample(layout.dim());
  for (float& v : sample) v = g(rng);
  auto basis = std::make_shared<const codecs::SliceBasis>(
      codecs::SliceBasis::Fit(layout, 16, 4, 1, sample).value());
  auto made = codecs::MakeCodec("gradiveq(dims=4,slice=16)", &layout, basis).value();
  for (double bound : {0.0, 30.0}) {
    ExpectSummedCodesMatchDecodes(*made, layout.dim(), 700, bound, rng);
  }
}

// rand-k with a shared seed: every sender keeps the same set, and the code is its values.
TEST(WeightedSumCollector, SummingSharedSeedRandkCodesEqualsSummingTheirDecodes) {
  const auto layout = codecs::ModelLayout::Flat(3000);
  std::mt19937_64 rng(8);
  auto made = codecs::MakeCodec("randk(ratio=0.1,seed=12345)", &layout).value();
  for (double bound : {0.0, 350.0}) {
    ExpectSummedCodesMatchDecodes(*made, layout.dim(), 400, bound, rng);
  }
}

TEST(ModelGuard, RefusesNonFiniteGrownOrExplodedModels) {
  int evaluated = 0;
  ModelGuard guard(GuardOptions{}, [&](std::span<const float> m) -> absl::StatusOr<double> {
    ++evaluated;
    return m[0];  // the "loss" is the first coordinate
  });
  const std::vector<float> model = {1.0f, 2.0f, 2.0f};  // norm 3
  auto ok = guard.Check(model, 7, std::vector<float>{1.5f, 2.0f, 2.0f}).value();
  EXPECT_TRUE(ok.passed()) << ok.detail;
  EXPECT_EQ(evaluated, 2) << "the committed model's loss once, the candidate's";
  EXPECT_TRUE(guard.Check(model, 7, std::vector<float>{2.0f, 2.0f, 2.0f}).value().passed());
  EXPECT_EQ(evaluated, 3) << "the committed model's loss is kept per version";
  auto nan = guard.Check(model, 7, std::vector<float>{1.0f, std::nanf(""), 0.0f}).value();
  EXPECT_EQ(nan.check, GuardCheck::kNonFinite);
  auto grown = guard.Check(model, 7, std::vector<float>{1.0f, 9.0f, 2.0f}).value();
  EXPECT_EQ(grown.check, GuardCheck::kNorm) << "norm sqrt(86) > 3 x 3";
  auto exploded = guard.Check(model, 7, std::vector<float>{2.2f, 2.0f, 2.0f}).value();
  EXPECT_EQ(exploded.check, GuardCheck::kLoss) << "2.2 > 2 x 1 + 0.1";
  GuardOptions off;
  off.enabled = false;
  ModelGuard none(off, nullptr);
  EXPECT_TRUE(none.Check(model, 1, std::vector<float>{1e30f, 0, 0}).value().passed());
  GuardOptions bad;
  bad.max_growth = 1;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(ModelGuard, MeasuresGrowthOnTheWholeModelFrozenParametersIncluded) {
  // Adapters that start at zero beside a frozen pretrained model (norm 10): the trained
  // vector's own norm grows without bound in its first round, the model's hardly.
  const std::vector<float> adapters = {0.0f, 0.0f};
  const std::vector<float> trained = {3.0f, 4.0f};  // norm 5: 5x max(|0|, 1)
  ModelGuard alone(GuardOptions{}, nullptr);
  EXPECT_EQ(alone.Check(adapters, 1, trained).value().check, GuardCheck::kNorm);
  ModelGuard whole(GuardOptions{}, nullptr, /*frozen_norm_sq=*/100);
  auto v = whole.Check(adapters, 1, trained).value();
  EXPECT_TRUE(v.passed()) << v.detail;
  EXPECT_NEAR(v.growth, std::sqrt(125.0) / 10, 1e-9);
  EXPECT_NEAR(v.step, 5.0 / 10, 1e-9);
  // A liar's blow-up of the adapters is still refused: sqrt(100 + 40^2) > 3 x 10.
  EXPECT_EQ(whole.Check(adapters, 1, std::vector<float>{0.0f, 40.0f}).value().check,
            GuardCheck::kNorm);
}

// A host whose only real part is the guard.
class GuardHost : public testing::FakeRoundHost {
 public:
  explicit GuardHost(ModelGuard* guard) : guard_(guard) {}
  absl::StatusOr<GuardVerdict> CheckModel(std::span<const float> candidate) override {
    return guard_->Check(model_, 1, candidate);
  }
  void Quarantine(const std::set<std::string>& clients, const std::string&) override {
    quarantined_.insert(clients.begin(), clients.end());
  }
  std::vector<float> ServedModel() const override { return model_; }
  std::vector<float> model_ = {1, 0};
  std::set<std::string> quarantined_;

 private:
  ModelGuard* guard_;
};

TEST(ChooseUnderGuard, LeavesOutTheLargestUpdatesUntilTheModelPasses) {
  ModelGuard guard(GuardOptions{}, nullptr);
  GuardHost host(&guard);
  // Each client's update adds its value to coordinate 1; the guard refuses norms > 3.
  const std::map<std::string, float> updates = {{"a", 1}, {"b", 50}, {"c", -1}, {"d", 20}};
  std::map<std::string, double> norms;
  for (const auto& [c, v] : updates) norms[c] = std::abs(v);
  const CandidateFn candidate =
      [&](const std::set<std::string>& excluded) -> absl::StatusOr<std::vector<float>> {
    std::vector<float> m = host.model_;
    for (const auto& [c, v] : updates) {
      if (!excluded.count(c)) m[1] += v;
    }
    return m;
  };
  RoundReport report;
  auto choice = ChooseUnderGuard(host, ByNormDescending(norms), 2, candidate, &report).value();
  EXPECT_EQ(choice.excluded, (std::set<std::string>{"b", "d"}));
  EXPECT_EQ(choice.model, (std::vector<float>{1, 0}));
  EXPECT_EQ(choice.first.check, GuardCheck::kNorm);
  EXPECT_EQ(report.Label("guard"), "refused:norm");
  EXPECT_EQ(report.Figure("guard_excluded"), 2);
  QuarantineExcluded(host, 4, choice);
  EXPECT_EQ(host.quarantined_, choice.excluded);
  // Allowed to leave out one only: nothing passes, nobody is left out.
  auto none = ChooseUnderGuard(host, ByNormDescending(norms), 1, candidate, &report).value();
  EXPECT_TRUE(none.model.empty());
  EXPECT_TRUE(none.excluded.empty());
  // A round that passes as it is leaves nobody out.
  const std::map<std::string, double> small = {{"a", 1}};
  auto fine = ChooseUnderGuard(
                  host, ByNormDescending(small), 0,
                  [&](const std::set<std::string>&) -> absl::StatusOr<std::vector<float>> {
                    return std::vector<float>{1, 1};
                  },
                  &report)
                  .value();
  EXPECT_TRUE(fine.first.passed());
  EXPECT_EQ(report.Label("guard"), "passed");
}

}  // namespace
}  // namespace fedlgc::coordinator
