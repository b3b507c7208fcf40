// FedAvg's driver (fedavg_driver.h) running rounds against FedAvgClients in this thread
// (tests/coordinator/loopback_host.h): the committed model is the sample-weighted mean of
// the updates, a client that never answers is a straggler once the fake clock reaches the
// deadline, clipping bounds a client's pull on the aggregate, receipts settle the
// clients' pending updates, error feedback keeps what top-k did not send, and TernGrad's
// shared scale is agreed through reports before the updates go.
#include "modes/fedavg/fedavg_driver.h"

#include <cmath>

#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_client.h"
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

  explicit Job(const std::string& codec, double clip = 0) {
    plan.codec = codec;
    plan.local_steps = 1;
    host = std::make_unique<LoopbackHost>(plan, layout);
    coordinator::DriverEnv env = host->DriverEnvFor(&plan, "fedavg_driver_test");
    env.robust.clip = clip;
    driver = FedAvgDriver::Create(FedAvgOptions(), env).value();
    host->set_driver(driver.get());
  }
  FakeClientEnv& Add(const std::string& id, uint64_t samples, float step_scale) {
    LoopbackHost::Client& c = host->AddClient(id, samples, layout, [](edge_client::ClientEnv& e) {
      return std::make_unique<FedAvgClient>(e);
    });
    c.env->step_scale = step_scale;
    c.env->num_samples = samples;
    return *c.env;
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

}  // namespace
}  // namespace fedlgc::modes
