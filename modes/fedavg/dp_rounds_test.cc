// DP-FedAvg's rounds (dp_rounds.h) through FedAvg's driver against FedAvgClients in this
// thread (tests/coordinator/loopback_host.h): every update cut to norm C and counted once
// whatever its sample count, the noise's standard deviation z x C / (q x clients), Poisson
// sampling at rate q, the accountant's epsilon in every report and the job's end before
// the round that would pass the limit, the account across a restart, and the refusals.
#include "modes/fedavg/dp_rounds.h"

#include <cmath>

#include "base/str.h"
#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/fedavg_test_clients.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

// A FedAvg job with --dp over a model of ones.
struct DpJob {
  codecs::ModelLayout layout;
  coordinator::RoundPlan plan;
  std::unique_ptr<FedAvgDriver> driver;
  std::unique_ptr<LoopbackHost> host;
  coordinator::DriverEnv env;

  DpJob(const std::string& dp, double fraction, double max_epsilon = 0,
        const std::string& folder = "dp_rounds_test", size_t cols = 5, uint64_t committed = 0)
      : layout(codecs::ModelLayout::Create({{"w", {8, cols}}, {"b", {8}}}).value()) {
    plan.codec = "fp32";
    plan.local_steps = 1;
    host = std::make_unique<LoopbackHost>(plan, layout);
    env = host->DriverEnvFor(&plan, folder);
    env.fraction = fraction;
    env.rounds = 10;
    env.committed_round = committed;
    env.metrics = &host->metrics();
    FedAvgOptions options;
    options.dp = dp;
    options.dp_max_epsilon = max_epsilon;
    auto made = FedAvgDriver::Create(options, env);
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) driver = *std::move(made);
    host->set_driver(driver.get());
  }
  FakeClientEnv& Add(const std::string& id, uint64_t samples, float step_scale) {
    return AddFedAvgClient(*host, layout, id, samples, step_scale);
  }
  RoundReport Run() {
    RoundReport report;
    coordinator::CommitResult commit;
    const auto deadline = host->Now() + std::chrono::seconds(60);
    EXPECT_TRUE(driver->RunRound(*host, {}, deadline, &commit, &report).ok());
    EXPECT_TRUE(host->refused().empty());
    host->SendReceipts(commit);
    EXPECT_TRUE(driver->Save(commit.round).ok());
    return report;
  }
  std::vector<float> model() { return host->engine().ModelVector(); }
};

double Norm(float scale, size_t dim) {
  double s = 0;
  for (size_t i = 0; i < dim; ++i) s += std::pow(scale * FakeClientEnv::Step(i, 1), 2);
  return std::sqrt(s);
}

// b's update is 50 times a's and comes with 9 times the samples: cut to C, it counts as
// much as a's, and the mean divides by q x the clients (2), not by their samples.
TEST(DpRounds, EachUpdateIsCutToCAndCountsOnce) {
  DpJob job("gaussian(noise=1e-6, clip=0.1)", 1.0);
  job.Add("a", 100, 1.0f);
  job.Add("b", 900, 50.0f);
  const size_t dim = job.host->engine().dim();
  const double na = Norm(1, dim), nb = Norm(50, dim);
  ASSERT_LT(na, 0.1);
  ASSERT_GT(nb, 0.1);
  const RoundReport report = job.Run();
  EXPECT_EQ(report.figures.at("clipped"), 1);
  EXPECT_EQ(report.figures.at("dp_sampled"), 2);
  EXPECT_EQ(report.figures.at("dp_expected"), 2);
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < dim; ++i) {
    const double want =
        1 + (FakeClientEnv::Step(i, 1) + 0.1 / nb * 50 * FakeClientEnv::Step(i, 1)) / 2;
    EXPECT_NEAR(m[i], want, 1e-5) << i;
  }
}

// Clients whose updates are 0: the model moves by the noise alone, N(0, (z C / 4)^2) per
// coordinate over 4,008 coordinates (the sample deviation within 5 standard errors).
TEST(DpRounds, TheNoiseHasDeviationZTimesCOverTheExpectedParticipants) {
  DpJob job("gaussian(noise=2, clip=0.5)", 1.0, 0, "dp_rounds_noise", 500);
  for (const char* id : {"a", "b", "c", "d"}) job.Add(id, 10, 0.0f);
  job.Run();
  const std::vector<float> m = job.model();
  double sum = 0, sum2 = 0;
  for (float x : m) {
    sum += x - 1;
    sum2 += (x - 1.0) * (x - 1.0);
  }
  const double n = static_cast<double>(m.size()), sd = 2 * 0.5 / 4;
  EXPECT_NEAR(sum / n, 0, 5 * sd / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(sum2 / n), sd, 5 * sd / std::sqrt(2 * n));
}

// Each of 40 clients is asked with probability 0.25, independently: the rounds' sizes
// average 10 (within 5 standard errors of 30 rounds) and vary, as do their members.
TEST(DpRounds, ParticipantsAreAPoissonSampleAtTheFraction) {
  DpJob job("gaussian(noise=1, clip=1)", 0.25, /*max_epsilon=*/1e9);
  for (int i = 0; i < 40; ++i) job.Add(StrCat("c", i), 10, 1.0f);
  double total = 0;
  std::set<double> sizes;
  std::set<std::set<std::string>> members;
  for (int round = 0; round < 30; ++round) {
    const RoundReport r = job.Run();
    EXPECT_EQ(r.figures.at("dp_expected"), 10);
    total += r.figures.at("dp_sampled");
    sizes.insert(r.figures.at("dp_sampled"));
    std::set<std::string> who;
    for (const auto& [client, asked] : r.per_client.at("dp_asked")) who.insert(client);
    members.insert(who);
  }
  EXPECT_NEAR(total / 30, 10, 5 * std::sqrt(40 * 0.25 * 0.75 / 30));
  EXPECT_GT(sizes.size(), 2u);
  EXPECT_GT(members.size(), 20u);
}

// Rounds of q = 0.5 and z = 1 spend what the accountant says after each, and the job
// ends before the round that would pass --dp-max-epsilon (between the third and fourth
// round's epsilon); a restart goes on from the account saved beside the checkpoint.
TEST(DpRounds, TheAccountantReportsEveryRoundAndTheJobEndsBeforeTheLimit) {
  const auto after = [](int rounds) {
    privacy::RdpAccountant a;
    a.Compose(0.5, 1.0, static_cast<uint64_t>(rounds));
    return a.Spent(1e-5).epsilon;
  };
  const double limit = (after(3) + after(4)) / 2;
  DpJob job("gaussian(noise=1, clip=1)", 0.5, limit, "dp_rounds_limit");
  for (const char* id : {"a", "b", "c", "d"}) job.Add(id, 10, 1.0f);
  int rounds = 0;
  while (!job.driver->Exhausted()) {
    const RoundReport r = job.Run();
    ++rounds;
    EXPECT_DOUBLE_EQ(r.figures.at("dp_epsilon"), after(rounds)) << rounds;
    EXPECT_EQ(r.figures.at("dp_noise_multiplier"), 1);
    ASSERT_LE(rounds, 4);
  }
  EXPECT_EQ(rounds, 3);
  EXPECT_NE(job.driver->Exhausted()->find("privacy budget"), std::string::npos);
  // The metric says the same.
  double gauge = -1;
  for (const auto& family : job.host->metrics().registry()->Collect()) {
    if (family.name == "fedlgc_dp_epsilon") gauge = family.metric.at(0).gauge.value;
  }
  EXPECT_DOUBLE_EQ(gauge, after(3));
  // A restart from round 2's checkpoint goes on from what rounds 1 and 2 spent.
  DpJob again("gaussian(noise=1, clip=1)", 0.5, limit, "dp_rounds_limit", 5, /*committed=*/2);
  for (const char* id : {"a", "b", "c", "d"}) again.Add(id, 10, 1.0f);
  EXPECT_FALSE(again.driver->Exhausted());
  EXPECT_DOUBLE_EQ(again.Run().figures.at("dp_epsilon"), after(3));
  EXPECT_TRUE(again.driver->Exhausted());
  // Nor with another limit, nor without --dp.
  const auto restart = [&](const std::string& folder, uint64_t committed, const std::string& dp,
                           double max_epsilon) {
    coordinator::RoundPlan plan;
    plan.codec = "fp32";
    LoopbackHost host(plan, again.layout);
    coordinator::DriverEnv env = host.DriverEnvFor(&plan, folder);
    env.committed_round = committed;
    FedAvgOptions options;
    options.dp = dp;
    options.dp_max_epsilon = max_epsilon;
    return FedAvgDriver::Create(options, env).status();
  };
  const std::string dp = "gaussian(noise=1, clip=1)";
  EXPECT_TRUE(absl::IsFailedPrecondition(restart("dp_rounds_limit", 3, dp, 2 * limit)));
  const absl::Status st = restart("dp_rounds_limit", 3, "", 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(std::string(st.message()).find("restart it with the --dp flags"), std::string::npos);
  // Without the account a DP job does not restart.
  EXPECT_TRUE(absl::IsFailedPrecondition(restart("dp_rounds_none", 7, dp, 0)));
}

TEST(DpRounds, ATargetEpsilonSetsTheNoiseAndTheLimit) {
  auto o = ParseDp("gaussian(clip=0.5)", 8, 1e-5, 0).value();
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->Limit(), 8);
  coordinator::RoundPlan plan;
  plan.codec = "fp32";
  LoopbackHost host(plan, codecs::ModelLayout::Create({{"w", {4}}}).value());
  coordinator::DriverEnv env = host.DriverEnvFor(&plan, "dp_rounds_target");
  env.fraction = 0.1;
  env.rounds = 100;
  auto rounds = DpRounds::Create(*o, env.fraction, env.rounds, env.state_dir, 0, nullptr).value();
  EXPECT_EQ(rounds->noise(), privacy::NoiseForEpsilon(0.1, 100, 8, 1e-5).value());
}

TEST(DpRounds, SkellamSolvesItsNoiseKeepsBothEpsilonsAndResumesOnlyAsSkellam) {
  const SkellamGrid grid{5000, 127, 4};
  auto o = ParseDp("skellam(clip=1)", 8, 1e-5, 0).value();
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->mechanism, DpMechanism::kSkellam);
  const std::string dir = ::testing::TempDir() + "/dp_rounds_skellam";
  auto rounds = DpRounds::Create(*o, 0.1, 50, dir, 0, nullptr, grid);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  // The solved noise spends at most 8 over the 50 rounds, and 0.2% less would not.
  const auto spent = [&](double z, double q) {
    privacy::SkellamStep step = privacy::RoundedSensitivity(grid.ClipInSteps(), grid.dim);
    step.variance = std::pow(z * grid.ClipInSteps(), 2);
    privacy::RdpAccountant a;
    a.ComposeRdp([&](double order) { return privacy::SampledSkellamRdp(step, q, order); }, 50);
    return a.Spent(1e-5).epsilon;
  };
  const double z = (*rounds)->noise();
  EXPECT_LE(spent(z, 0.1), 8);
  EXPECT_GT(spent(z * 0.998, 0.1), 8);
  EXPECT_NEAR((*rounds)->SumVariance(), std::pow(z * grid.ClipInSteps(), 2), 1e-6);
  // A round whose inputs carried 3/4 of the noise (a client of 4 dropped).
  RoundReport r;
  (*rounds)->SpendSkellam(4, 0.75, &r);
  EXPECT_NEAR(r.figures.at("dp_noise_variance"), 0.75 * (*rounds)->SumVariance(), 1e-6);
  EXPECT_GT(r.figures.at("dp_epsilon_coordinator"), r.figures.at("dp_epsilon"))
      << "without the sampling's amplification";
  ASSERT_TRUE((*rounds)->Save(1).ok());
  auto again = DpRounds::Create(*o, 0.1, 50, dir, 1, nullptr, grid);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ((*again)->epsilon(), r.figures.at("dp_epsilon"));
  auto gaussian = ParseDp("gaussian(clip=1)", 8, 1e-5, 0).value();
  EXPECT_TRUE(absl::IsFailedPrecondition(
      DpRounds::Create(*gaussian, 0.1, 50, dir, 1, nullptr, grid).status()));
  EXPECT_FALSE(DpRounds::Create(*o, 0.1, 50, dir, 0, nullptr, SkellamGrid{}).ok())
      << "skellam needs the grid";
}

TEST(DpRounds, RefusesWhatItCannotAccountFor) {
  for (auto [spec, eps] : {std::pair{"gaussian(clip=1)", 0.0},
                           {"gaussian(noise=1)", 0.0},
                           {"gaussian(noise=1, clip=1)", 5.0},
                           {"laplace(noise=1, clip=1)", 0.0},
                           {"gaussian(noise=-1, clip=1)", 0.0},
                           {"gaussian(noise=1, clip=1, x=2)", 0.0},
                           {"none", 3.0},
                           {"gaussian(clip=1)", INFINITY}}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseDp(spec, eps, 1e-5, 0).status())) << spec;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ParseDp("gaussian(noise=1, clip=1)", 0, 1.5, 0).status()));
  EXPECT_FALSE(ParseDp("", 0, 1e-5, 0).value().has_value());
  const auto make = [](const std::string& codec, const std::string& rounds_mode,
                       coordinator::AggregatorKind kind) {
    coordinator::RoundPlan plan;
    plan.codec = codec;
    LoopbackHost host(plan, codecs::ModelLayout::Create({{"w", {8, 5}}}).value());
    coordinator::DriverEnv env = host.DriverEnvFor(&plan, "dp_rounds_refused");
    env.robust.kind = kind;
    FedAvgOptions options;
    options.dp = "gaussian(noise=1, clip=1)";
    options.rounds_mode = rounds_mode;
    return FedAvgDriver::Create(options, env).status();
  };
  EXPECT_TRUE(make("fp32", "sync", coordinator::AggregatorKind::kMean).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      make("fp32", "buffered(k=2, concurrency=4)", coordinator::AggregatorKind::kMean)));
  EXPECT_TRUE(absl::IsInvalidArgument(make("fp32", "sync", coordinator::AggregatorKind::kMedian)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(make("fp32", "sync", coordinator::AggregatorKind::kStreaming)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      make("terngrad(shared=1)", "sync", coordinator::AggregatorKind::kMean)));
}

}  // namespace
}  // namespace fedlgc::modes
