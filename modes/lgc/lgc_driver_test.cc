// LGC's driver and client (lgc_driver.h, lgc_client.h) running rounds against each other
// in this thread (tests/coordinator/loopback_host.h): a warm-up round is a FedAvg round;
// in a stage-2 round the leader sends its cells on its own top-k, the driver pushes them
// to the followers, who send their bit corrections on the same support, and the model
// moves by the mean of what every client sent, which is its update plus residual minus
// the residual it keeps now; a leader that does not deliver by half the round's time is
// replaced by the next participant, whose payload the rest then answer, and the round
// commits without it at its deadline.
#include "modes/lgc/lgc_driver.h"

#include <set>

#include "gtest/gtest.h"
#include "modes/lgc/lgc_client.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {40, 25}}, {"b", {40}}}).value();
}

// An LGC job over a model of ones: one warm-up round of top-k, then stage-2 rounds.
struct Job {
  codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  std::unique_ptr<LgcDriver> driver;
  std::unique_ptr<LoopbackHost> host;

  explicit Job(const std::string& leader) {
    plan.codec = "lgc(ratio=0.05,entropy=0,zstd=0)";
    plan.warmup_codecs = {"topk(ratio=0.05)"};
    plan.local_steps = 1;
    host = std::make_unique<LoopbackHost>(plan, layout);
    const coordinator::DriverEnv env = host->DriverEnvFor(&plan, "lgc_driver_test");
    LgcOptions o;
    o.leader = leader;
    driver = LgcDriver::Create(o, coordinator::ServerOptimizer{1.0f, 0.0f}, env).value();
    host->set_driver(driver.get());
    // Updates that differ in more than scale: a follower's correction has work to do.
    int phase = 0;
    for (const auto& [id, scale] : {std::pair{"a", 1.0f}, {"b", 2.0f}, {"c", -1.5f}}) {
      FakeClientEnv& e = *host->AddClient(id, 100, layout,
                                          [](edge_client::ClientEnv& env) {
                                            return std::make_unique<LgcClient>(env);
                                          })
                              .env;
      e.step_scale = scale;
      e.step_phase = 100 * phase++;
    }
  }
  FakeClientEnv& env(const std::string& id) { return *host->client(id).env; }
  coordinator::CommitResult Run(RoundReport* report) {
    coordinator::CommitResult commit;
    const auto deadline = host->Now() + std::chrono::seconds(60);
    EXPECT_TRUE(driver->RunRound(*host, {"a", "b", "c"}, deadline, &commit, report).ok());
    EXPECT_TRUE(host->refused().empty());
    host->SendReceipts(commit);
    return commit;
  }
  std::vector<float> model() { return host->engine().ModelVector(); }
};

// The residuals of the three clients.
std::map<std::string, std::vector<float>> Residuals(Job& job) {
  std::map<std::string, std::vector<float>> r;
  for (const char* id : {"a", "b", "c"}) {
    r[id] = job.env(id).state().residual;
    if (r[id].empty()) r[id].assign(job.layout.dim(), 0.0f);
  }
  return r;
}

// The model moved by the mean of what the clients in `counted` sent: for each, its update
// of this round (`k`-th training) plus its residual before, minus its residual after.
void ExpectMovedByTheMeanSent(Job& job, const std::vector<float>& before_model,
                              const std::map<std::string, std::vector<float>>& before,
                              const std::set<std::string>& counted, int k) {
  const auto after = Residuals(job);
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) {
    double sum = 0;
    for (const std::string& id : counted) {
      const FakeClientEnv& e = job.env(id);
      const float u = e.step_scale * FakeClientEnv::Step(i, k + e.step_phase) + before.at(id)[i];
      sum += u - after.at(id)[i];
    }
    EXPECT_NEAR(m[i] - before_model[i], sum / counted.size(), 1e-5) << i;
  }
}

TEST(LgcDriver, AWarmUpRoundThenACellsRoundMoveTheModelByWhatWasSent) {
  Job job("a");
  RoundReport warm;
  auto before = Residuals(job);
  std::vector<float> model = job.model();
  EXPECT_EQ(job.Run(&warm).participants, 3);
  EXPECT_EQ(warm.figures.at("lgc_stage"), 1);
  ExpectMovedByTheMeanSent(job, model, before, {"a", "b", "c"}, 1);

  before = Residuals(job);
  model = job.model();
  RoundReport cells;
  const coordinator::CommitResult commit = job.Run(&cells);
  EXPECT_EQ(commit.participants, 3);
  EXPECT_EQ(cells.figures.at("lgc_stage"), 2);
  EXPECT_EQ(cells.labels.at("lgc_leader"), "a");
  ExpectMovedByTheMeanSent(job, model, before, {"a", "b", "c"}, 2);
  // Everyone sent on the leader's support: the model moved on 5% of it alone.
  size_t moved = 0;
  const std::vector<float> m = job.model();
  for (size_t i = 0; i < m.size(); ++i) moved += m[i] != model[i];
  EXPECT_EQ(moved, job.layout.dim() / 20);
  for (const char* id : {"a", "b", "c"}) EXPECT_FALSE(job.env(id).state().pending.has_value());
}

TEST(LgcDriver, ALeaderThatDoesNotDeliverIsReplacedAtHalfTheRound) {
  Job job("a");
  RoundReport warm;
  job.Run(&warm);
  job.host->client("a").silent = true;
  const auto before = Residuals(job);
  const std::vector<float> model = job.model();
  const auto start = job.host->Now();
  RoundReport report;
  const coordinator::CommitResult commit = job.Run(&report);
  // The round stays open for its straggler to the deadline.
  EXPECT_EQ(job.host->Now() - start, std::chrono::seconds(60));
  EXPECT_EQ(commit.participants, 2);
  EXPECT_EQ(commit.stragglers, 1);
  const std::string leader = report.labels.at("lgc_leader");
  EXPECT_NE(leader, "a");
  ExpectMovedByTheMeanSent(job, model, before, {"b", "c"}, 2);
}

}  // namespace
}  // namespace fedlgc::modes
