// Batch normalisation's statistics outside the model (core/statistics.h): the pairs a
// layout holds, pooling clients' estimates into the statistics of their union, writing
// them into the flat vector's form.
#include "core/statistics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fedlgc::core {
namespace {

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"conv.weight", {4, 1, 3, 3}},
                                      {"bn.weight", {4}},
                                      {"bn.running_mean", {4}},
                                      {"lonely.running_mean", {3}},  // no variance
                                      {"odd.running_mean", {2}},     // a variance of 3
                                      {"odd.running_var", {3}},
                                      {"bn.running_var", {4}},
                                      {"running_mean", {2}},  // the root module's
                                      {"running_var", {2}},
                                      {"xrunning_mean", {2}},  // a pair too, of the root
                                      {"xrunning_var", {2}}})
      .value();
}

TEST(Statistics, PairsAreAModulesMeanAndVarianceOfOneSize) {
  const std::vector<StatisticsPair> pairs = StatisticsPairs(Layout());
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].module, "bn");
  EXPECT_EQ(pairs[0].mean_at, 40u);
  EXPECT_EQ(pairs[0].var_at, 52u);
  EXPECT_EQ(pairs[0].channels, 4u);
  EXPECT_EQ(pairs[1].module, "");
  EXPECT_EQ(pairs[1].mean_at, 56u);
  EXPECT_EQ(pairs[1].var_at, 58u);
  EXPECT_EQ(pairs[2].module, "");
  EXPECT_EQ(pairs[2].mean_at, 60u);
  EXPECT_EQ(StatisticsChannels(pairs), 8u);
  EXPECT_TRUE(StatisticsPairs(codecs::ModelLayout::Flat(10)).empty());
}

// Clients' samples drawn with different means, sizes and spreads: pooling each client's
// mean and (population) variance weighted by its size gives the union's mean and
// variance, computed here from the samples themselves.
TEST(Statistics, PoolingByWeightIsTheUnionsMeanAndVariance) {
  std::mt19937_64 rng(5);
  const size_t channels = 3;
  std::vector<std::vector<float>> means, vars;
  std::vector<double> sizes = {50, 400, 7};
  std::vector<std::vector<double>> union_values(channels);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> m(channels), v(channels);
    for (size_t c = 0; c < channels; ++c) {
      std::normal_distribution<double> g(3.0 * i - 2.0 + c, 0.5 + i);
      std::vector<double> xs;
      for (size_t k = 0; k < sizes[i]; ++k) xs.push_back(g(rng));
      double mu = 0, ss = 0;
      for (double x : xs) mu += x;
      mu /= xs.size();
      for (double x : xs) ss += (x - mu) * (x - mu);
      m[c] = static_cast<float>(mu);
      v[c] = static_cast<float>(ss / xs.size());
      union_values[c].insert(union_values[c].end(), xs.begin(), xs.end());
    }
    means.push_back(m);
    vars.push_back(v);
  }
  std::vector<StatisticsEstimate> in;
  for (size_t i = 0; i < sizes.size(); ++i) in.push_back({sizes[i], means[i], vars[i]});
  std::vector<float> mean, var;
  ASSERT_TRUE(PoolStatistics(in, /*median=*/false, &mean, &var).ok());
  for (size_t c = 0; c < channels; ++c) {
    const std::vector<double>& xs = union_values[c];
    double mu = 0, ss = 0;
    for (double x : xs) mu += x;
    mu /= xs.size();
    for (double x : xs) ss += (x - mu) * (x - mu);
    EXPECT_NEAR(mean[c], mu, 1e-5 * (1 + std::fabs(mu))) << c;
    EXPECT_NEAR(var[c], ss / xs.size(), 1e-5 * (1 + ss / xs.size())) << c;
    // The variances' average alone is well below: the clients' means differ.
    double avg = 0;
    for (size_t i = 0; i < sizes.size(); ++i) avg += sizes[i] * vars[i][c] / 457.0;
    EXPECT_GT(var[c], avg + 0.5) << c;
  }
  // The median ignores the weights and is each channel's middle value; one client far
  // off does not move it past the others.
  std::vector<float> far_m = {1e6f, -1e6f, 1e6f}, far_v = {1e9f, 0.0f, 1e9f};
  in.push_back({1e6, far_m, far_v});
  ASSERT_TRUE(PoolStatistics(in, /*median=*/true, &mean, &var).ok());
  for (size_t c = 0; c < channels; ++c) {
    std::vector<float> m = {means[0][c], means[1][c], means[2][c], far_m[c]};
    std::sort(m.begin(), m.end());
    EXPECT_FLOAT_EQ(mean[c], 0.5f * (m[1] + m[2])) << c;
    EXPECT_GE(var[c], std::min({vars[0][c], vars[1][c], vars[2][c]})) << c;
    EXPECT_LE(var[c], std::max({vars[0][c], vars[1][c], vars[2][c]})) << c;
  }
}

TEST(Statistics, PoolingRefusesWhatIsNotAnEstimate) {
  std::vector<float> m = {0, 1}, v = {1, 2}, short_m = {0}, nan_m = {0, NAN}, neg_v = {1, -1};
  std::vector<float> mean, var;
  const auto refused = [&](std::vector<StatisticsEstimate> in) {
    return absl::IsInvalidArgument(PoolStatistics(in, false, &mean, &var));
  };
  EXPECT_TRUE(refused({}));
  EXPECT_TRUE(refused({{1, m, v}, {1, short_m, v}}));
  EXPECT_TRUE(refused({{1, m, v}, {1, nan_m, v}}));
  EXPECT_TRUE(refused({{1, m, v}, {1, m, neg_v}}));
  EXPECT_TRUE(refused({{1, m, v}, {0, m, v}}));
  EXPECT_TRUE(refused({{1, m, v}, {NAN, m, v}}));
  EXPECT_TRUE(PoolStatistics(std::vector<StatisticsEstimate>{{1, m, v}}, false, &mean, &var).ok());
  EXPECT_EQ(mean, m);
  EXPECT_EQ(var, v);
}

TEST(Statistics, WritingPutsTheScaleFreeFormWhereThePairsAre) {
  const codecs::ModelLayout layout = Layout();
  const std::vector<StatisticsPair> pairs = StatisticsPairs(layout);
  std::vector<float> flat(layout.dim(), 7.0f);
  const std::vector<float> mean = {1, -2, 0, 3, 0.5f, 9, 1, 1}, var = {4, 1, 0, 0.25f, 2, 3, 1, 1};
  ASSERT_TRUE(WriteStatistics(pairs, mean, var, /*skipped=*/{}, flat).ok());
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(flat[40 + c], mean[c] / std::sqrt(var[c] + kStatisticsEps));
    EXPECT_FLOAT_EQ(flat[52 + c], std::log(var[c] + kStatisticsEps));
  }
  EXPECT_FLOAT_EQ(flat[57], 9 / std::sqrt(3 + kStatisticsEps));
  size_t touched = 0;
  for (float f : flat) touched += f != 7.0f;
  EXPECT_EQ(touched, 16u);
  // A skipped pair keeps its values; sizes that do not fit are refused.
  std::vector<float> again(layout.dim(), 7.0f);
  const std::vector<uint32_t> skip = {0};
  ASSERT_TRUE(WriteStatistics(pairs, mean, var, skip, again).ok());
  EXPECT_EQ(again[40], 7.0f);
  EXPECT_NE(again[56], 7.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(
      WriteStatistics(pairs, std::span<const float>(mean).first(7), var, {}, flat)));
  std::vector<float> small(50);
  EXPECT_TRUE(absl::IsInvalidArgument(WriteStatistics(pairs, mean, var, {}, small)));
}

}  // namespace
}  // namespace fedlgc::core
