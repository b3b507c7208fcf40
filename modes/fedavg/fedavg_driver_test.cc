// FedAvg's driver (fedavg_driver.h) running rounds against FedAvgClients in this thread
// (tests/coordinator/loopback_host.h): the committed model is the sample-weighted mean of
// the updates, a client that never answers is a straggler once the fake clock reaches the
// deadline, clipping bounds a client's pull on the aggregate, receipts settle the
// clients' pending updates, error feedback keeps what top-k did not send, and TernGrad's
// shared scale is agreed through reports before the updates go.
#include "modes/fedavg/fedavg_driver.h"

#include <cmath>

#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_test_clients.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {8, 5}}, {"b", {8}}}).value();
}

// A FedAvg job over a model of ones with `codec`, its driver and its loopback clients.
struct Job {
  codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  std::unique_ptr<FedAvgDriver> driver;
  std::unique_ptr<LoopbackHost> host;

  explicit Job(const std::string& codec, double clip = 0, const std::string& rounds_mode = "sync",
               const std::string& algorithm = "fedavg") {
    plan.codec = codec;
    plan.local_steps = 1;
    host = std::make_unique<LoopbackHost>(plan, layout);
    coordinator::DriverEnv env = host->DriverEnvFor(&plan, "fedavg_driver_test");
    env.robust.clip = clip;
    FedAvgOptions options;
    options.rounds_mode = rounds_mode;
    options.algorithm = algorithm;
    driver = FedAvgDriver::Create(options, env).value();
    host->set_driver(driver.get());
  }
  FakeClientEnv& Add(const std::string& id, uint64_t samples, float step_scale) {
    return AddFedAvgClient(*host, layout, id, samples, step_scale);
  }
  coordinator::CommitResult Run(const std::vector<std::string>& participants,
                                RoundReport* report = nullptr) {
    RoundReport ignored;
    coordinator::CommitResult commit;
    const auto deadline = host->Now() + std::chrono::seconds(60);
    EXPECT_TRUE(driver
                    ->RunRound(*host, participants, deadline, &commit,
                               report != nullptr ? report : &ignored)
                    .ok());
    EXPECT_TRUE(host->refused().empty());
    host->SendReceipts(commit);
    return commit;
  }
  std::vector<float> model() { return host->engine().ModelVector(); }
};

TEST(FedAvgDriver, CommitsTheSampleWeightedMeanOfTheUpdates) {
  Job job("fp32");
  job.Add("a", 100, 1.0f);
  job.Add("b", 300, 3.0f);
  const auto start = job.host->Now();
  RoundReport report;
  const coordinator::CommitResult commit = job.Run({"a", "b"}, &report);
  EXPECT_EQ(commit.round, 1u);
  EXPECT_EQ(commit.participants, 2);
  EXPECT_EQ(commit.stragglers, 0);
  EXPECT_FALSE(report.hit_deadline);
  EXPECT_LT(job.host->Now() - start, std::chrono::seconds(1));  // closed when all were in
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_NEAR(m[i], 1.0f + 2.5f * FakeClientEnv::Step(i, 1), 1e-6) << i;
  }
}

// --algorithm fedprox(mu=M): every participant trains with the proximal term's mu, in
// every round, sync or buffered; a plain job's RoundStart has no objective.
TEST(FedAvgDriver, FedProxAsksEveryParticipantForItsProximalTerm) {
  for (const char* mode : {"sync", "buffered(k=2,concurrency=2)"}) {
    Job job("fp32", 0, mode, "fedprox(mu=0.25)");
    FakeClientEnv& a = job.Add("a", 100, 1.0f);
    FakeClientEnv& b = job.Add("b", 300, 3.0f);
    job.Run({"a", "b"});
    job.Run({"a", "b"});
    for (const FakeClientEnv* env : {&a, &b}) {
      ASSERT_GE(env->trained_with.size(), 2u) << mode;
      for (const protos::RoundStart& start : env->trained_with) {
        EXPECT_FLOAT_EQ(start.objective().prox_mu(), 0.25f) << mode;
      }
    }
  }
  Job plain("fp32");
  FakeClientEnv& c = plain.Add("c", 100, 1.0f);
  plain.Run({"c"});
  ASSERT_EQ(c.trained_with.size(), 1u);
  EXPECT_FALSE(c.trained_with[0].has_objective());
  // What is not FedAvg's or FedProx's is refused, naming the flag.
  FedAvgOptions bad;
  for (const char* text : {"fedprox(mu=0)", "fedprox(nu=1)", "scaffolding", "fedavg(mu=1)"}) {
    bad.algorithm = text;
    const absl::Status st = bad.Validate();
    EXPECT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find("--algorithm"), std::string::npos) << st;
  }
  bad.algorithm = "fedprox";
  EXPECT_TRUE(bad.Validate().ok());
  EXPECT_EQ(Algorithm::Parse("fedprox")->ToString(), "fedprox(mu=0.01)");
}

TEST(FedAvgDriver, AClientThatNeverAnswersIsAStragglerAtTheDeadline) {
  Job job("fp32");
  job.Add("a", 100, 1.0f);
  job.Add("b", 300, 3.0f);
  job.host->client("b").silent = true;
  const auto start = job.host->Now();
  RoundReport report;
  const coordinator::CommitResult commit = job.Run({"a", "b"}, &report);
  EXPECT_EQ(commit.participants, 1);
  EXPECT_EQ(commit.stragglers, 1);
  EXPECT_TRUE(report.hit_deadline);
  EXPECT_EQ(job.host->Now() - start, std::chrono::seconds(60));  // on the fake clock
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_NEAR(m[i], 1.0f + FakeClientEnv::Step(i, 1), 1e-6) << i;
  }
}

TEST(FedAvgDriver, ClippingBoundsWhatOneClientPullsTheModelBy) {
  // Norms n, n and 10 n: clipped at 2 x the lower median (n), the third counts as 2 n.
  Job job("fp32", /*clip=*/2);
  job.Add("a", 100, 1.0f);
  job.Add("b", 100, 1.0f);
  job.Add("c", 100, 10.0f);
  RoundReport report;
  job.Run({"a", "b", "c"}, &report);
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_NEAR(m[i], 1.0f + (4.0f / 3.0f) * FakeClientEnv::Step(i, 1), 1e-6) << i;
  }
  EXPECT_EQ(report.figures.at("clipped"), 1);
}

TEST(FedAvgDriver, ReceiptsSettleTheClientsAndTopKKeepsTheRestInTheResidual) {
  Job job("topk(ratio=0.25)");
  FakeClientEnv& a = job.Add("a", 100, 1.0f);
  job.Run({"a"});
  EXPECT_FALSE(a.state().pending.has_value());
  // What the model moved by plus what the client kept is the whole update.
  const std::vector<float> m = job.model();
  ASSERT_EQ(a.state().residual.size(), m.size());
  size_t sent = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_NEAR((m[i] - 1.0f) + a.state().residual[i], FakeClientEnv::Step(i, 1), 1e-6) << i;
    sent += m[i] != 1.0f;
  }
  EXPECT_EQ(sent, m.size() / 4);
}

TEST(FedAvgDriver, SharedScaleTernGradAgreesOnTheScaleThroughReports) {
  Job job("terngrad(shared=1)");
  FakeClientEnv& a = job.Add("a", 100, 1.0f);
  FakeClientEnv& b = job.Add("b", 100, 2.0f);
  const coordinator::CommitResult commit = job.Run({"a", "b"});
  EXPECT_EQ(commit.participants, 2);
  ASSERT_EQ(a.reports.size(), 1u);
  ASSERT_EQ(b.reports.size(), 1u);
  // Each reported its own largest |update|; the round's scale is the larger.
  float max_a = 0;
  for (size_t i = 0; i < a.dim(); ++i)
    max_a = std::max(max_a, std::fabs(FakeClientEnv::Step(i, 1)));
  EXPECT_FLOAT_EQ(a.reports[0].fedavg().terngrad_scale(), max_a);
  EXPECT_FLOAT_EQ(b.reports[0].fedavg().terngrad_scale(), 2 * max_a);
  // Ternary values of the shared scale: every coordinate moved by a multiple of it / 2.
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    const float steps = (m[i] - 1.0f) / (max_a);  // (s_a + s_b) / 2 with s in {-2, 0, 2} max_a
    EXPECT_NEAR(steps, std::round(steps), 1e-4) << i;
  }
}

TEST(FedAvgDriver, RefusesReportsAndBlobsItDoesNotServe) {
  Job job("fp32");
  EXPECT_EQ(job.driver->AcceptReport("a", protos::ProgressReport()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job.driver->Blob("a", "lsgd-global", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Buffered rounds (buffered_rounds.h): b's link is 150 ms slow and c's 350 ms, so the first
// commit takes a's and b's updates; the second takes the first two of the three that
// complete next: a's second, and c's, asked one version earlier and scaled by (1 + 1)^-1.
// b's second waits for the third commit.
TEST(FedAvgDriver, BufferedRoundsCommitEveryKUpdatesAndWeighStaleOnesDown) {
  Job job("fp32", 0, "buffered(k=2, concurrency=3, staleness=poly(1))");
  job.Add("a", 100, 1.0f);
  job.Add("b", 100, 1.0f);
  job.Add("c", 200, 2.0f);
  job.host->client("b").lag = std::chrono::milliseconds(150);
  job.host->client("c").lag = std::chrono::milliseconds(350);
  RoundReport r1, r2;
  const coordinator::CommitResult c1 = job.Run({"a", "b", "c"}, &r1);
  EXPECT_EQ(c1.round, 1u);
  EXPECT_EQ(c1.participants, 2);
  EXPECT_EQ(c1.receipts.size(), 2u);  // c trains on: no receipt yet
  EXPECT_EQ(r1.per_client.at("staleness"), (std::map<std::string, double>{{"a", 0}, {"b", 0}}));
  std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_NEAR(m[i], 1.0f + FakeClientEnv::Step(i, 1), 1e-6) << i;
  }
  const coordinator::CommitResult c2 = job.Run({"a", "b", "c"}, &r2);
  EXPECT_EQ(c2.round, 2u);
  EXPECT_EQ(c2.participants, 2);
  EXPECT_EQ(r2.per_client.at("staleness"), (std::map<std::string, double>{{"a", 0}, {"c", 1}}));
  EXPECT_EQ(r2.figures.at("staleness_max"), 1);
  EXPECT_EQ(c2.receipts.at("c").round, 1u);    // the round c was asked in
  EXPECT_EQ(c2.receipts.at("c").version, 2u);  // the version that took it
  EXPECT_TRUE(job.host->engine().Participants().at("b").complete);  // the next commit's
  // (100 x Step2 + 200 x 1/2 x 2 Step1) / 300 on top of the first commit.
  m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_NEAR(
        m[i],
        1.0f + (5.0f / 3) * FakeClientEnv::Step(i, 1) + (1.0f / 3) * FakeClientEnv::Step(i, 2),
        1e-6)
        << i;
  }
  // The receipts settle a's and c's updates once the slow links have carried them.
  job.host->clock.Advance(std::chrono::milliseconds(400));
  job.host->Deliver();
  for (const char* id : {"a", "c"}) {
    EXPECT_FALSE(job.host->client(id).env->state().pending.has_value()) << id;
  }
  EXPECT_TRUE(job.host->client("b").env->state().pending.has_value());
}

// With k = concurrency every update is fresh, and buffered rounds are synchronous ones.
TEST(FedAvgDriver, BufferedRoundsWithKEqualToConcurrencyAreSynchronousRounds) {
  Job sync("qsgd(bits=8)");
  Job buffered("qsgd(bits=8)", 0, "buffered(k=3, concurrency=3)");
  for (Job* job : {&sync, &buffered}) {
    job->Add("a", 100, 1.0f);
    job->Add("b", 300, 2.0f);
    job->Add("c", 200, 3.0f);
    for (int round = 0; round < 4; ++round) job->Run({"a", "b", "c"});
  }
  const std::vector<float> a = sync.model(), b = buffered.model();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << i;
  EXPECT_NE(a[0], 1.0f);
}

// In a population larger than `concurrency`, FedBuff's refill on arrival asks the next
// client as soon as one finishes, from a version the commit then supersedes: with k =
// concurrency, c is asked as a's update arrives and its update comes after the commit of
// a's and b's (links of 100 and 150 ms), a version behind. With refill=commit a
// finished client's place frees only when a commit takes its update: every update is fresh
// and no more than `concurrency` are ever asked and not committed.
TEST(FedAvgDriver, BufferedRoundsThatRefillAtCommitKeepEveryUpdateFresh) {
  for (const bool at_commit : {false, true}) {
    Job job(
        "fp32", 0,
        at_commit ? "buffered(k=2, concurrency=2, refill=commit)" : "buffered(k=2, concurrency=2)");
    const std::vector<std::string> all = {"a", "b", "c", "d"};
    for (const std::string& id : all) job.Add(id, 100, 1.0f);
    for (const char* fast : {"a", "c"}) job.host->client(fast).lag = std::chrono::milliseconds(100);
    for (const char* slow : {"b", "d"}) job.host->client(slow).lag = std::chrono::milliseconds(150);
    double worst = 0;
    size_t most_asked = 0;
    for (int round = 0; round < 6; ++round) {
      RoundReport report;
      const coordinator::CommitResult commit = job.Run(all, &report);
      EXPECT_EQ(commit.participants, 2) << at_commit << " " << round;
      worst = std::max(worst, report.figures.at("staleness_max"));
      most_asked = std::max(most_asked, job.host->engine().Participants().size());
    }
    if (at_commit) {
      EXPECT_EQ(worst, 0);
      EXPECT_EQ(most_asked, 0u);  // each commit took every update asked
    } else {
      EXPECT_GE(worst, 1);
      EXPECT_GE(most_asked, 1u);
    }
  }
}

// A client more versions behind than max_staleness is let go: its update is not waited
// for, and the chunks of the round it was let go from are refused when they come.
TEST(FedAvgDriver, BufferedRoundsLetATooStaleClientGo) {
  Job job("fp32", 0, "buffered(k=1, concurrency=2, max_staleness=1)");
  job.Add("a", 100, 1.0f);
  job.Add("c", 100, 1.0f);
  job.host->client("c").lag = std::chrono::seconds(1);
  RoundReport report;
  coordinator::CommitResult commit;
  double released = 0;
  const auto deadline = [&] { return job.host->Now() + std::chrono::seconds(60); };
  for (int round = 0; round < 4; ++round) {
    ASSERT_TRUE(job.driver->RunRound(*job.host, {"a", "c"}, deadline(), &commit, &report).ok());
    job.host->SendReceipts(commit);
    EXPECT_EQ(commit.receipts.count("c"), 0u) << round;
    released += report.figures.at("released");
  }
  EXPECT_EQ(released, 1);
  job.host->clock.Advance(std::chrono::seconds(2));
  job.host->Deliver();  // c's late update of round 1 arrives; c was asked again in round 3
  ASSERT_FALSE(job.host->refused().empty());
  EXPECT_NE(std::string(job.host->refused().front().message()).find("round 1 is not open"),
            std::string::npos)
      << job.host->refused().front();
}

TEST(FedAvgDriver, RoundsModeSpecsParseOrSayWhatIsWrong) {
  auto b = ParseRoundsMode("buffered(k=4, concurrency=12, staleness=poly(0.5))").value();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->k, 4u);
  EXPECT_EQ(b->concurrency, 12u);
  EXPECT_EQ(b->MaxStaleness(), 12u);  // 4 x ceil(12 / 4)
  EXPECT_DOUBLE_EQ(b->Scale(3), 0.5);
  EXPECT_EQ(FormatRoundsMode(b),
            "buffered(k=4,concurrency=12,staleness=poly(0.5),max_staleness=12)");
  EXPECT_FALSE(ParseRoundsMode("sync").value().has_value());
  auto fresh = ParseRoundsMode("buffered(k=12, concurrency=12, refill=commit)").value();
  EXPECT_TRUE(fresh->refill_at_commit);
  EXPECT_FALSE(b->refill_at_commit);
  EXPECT_EQ(FormatRoundsMode(fresh),
            "buffered(k=12,concurrency=12,staleness=poly(0.5),max_staleness=4,refill=commit)");
  EXPECT_DOUBLE_EQ(ParseRoundsMode("buffered(staleness=none)").value()->Scale(9), 1.0);
  for (const char* bad :
       {"async", "buffered(k=0)", "buffered(k=30, concurrency=20)", "buffered(k=2.5)",
        "buffered(staleness=exp(1))", "buffered(4)", "buffered(k=1, k=2)", "buffered(foo=1)",
        "buffered(refill=never)", "buffered(refill=1)"}) {
    auto st = ParseRoundsMode(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(st.status())) << bad;
    EXPECT_NE(std::string(st.status().message()).find("--rounds-mode"), std::string::npos) << bad;
  }
}

TEST(FedAvgDriver, BufferedRoundsRefuseCodecsWhoseRoundsDiffer) {
  for (const char* codec : {"randk(ratio=0.1, seed=round)", "terngrad(shared=1)"}) {
    coordinator::RoundPlan plan;
    plan.codec = codec;
    LoopbackHost host(plan, Layout());
    FedAvgOptions options;
    options.rounds_mode = "buffered(k=1, concurrency=2)";
    auto made = FedAvgDriver::Create(options, host.DriverEnvFor(&plan, "fedavg_driver_test"));
    EXPECT_TRUE(absl::IsInvalidArgument(made.status())) << codec;
  }
}

}  // namespace
}  // namespace fedlgc::modes
