// The smooth mode, the worked example of docs/adding-a-mode.md: its client alone on the
// fake ClientEnv (the average it sends, bias-corrected; the average moving only on a
// receipt; its slot across a restart), and its driver running rounds against its clients
// in this thread (tests/coordinator/loopback_host.h): the sample-weighted mean committed,
// its gauge set, its codec rules. Nothing outside modes/smooth/ and the mode tables names
// the mode (scripts/seams.py counts it).
#include <cmath>

#include "gtest/gtest.h"
#include "modes/catalog.h"
#include "modes/smooth/smooth_client.h"
#include "modes/smooth/smooth_driver.h"
#include "prometheus/registry.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {6, 5}}, {"b", {6}}}).value();
}

protos::RoundStart Start(uint64_t round) {
  protos::RoundStart s;
  s.set_round(round);
  s.set_model_version(round - 1);
  s.set_codec("fp32");
  s.set_deadline_unix_ms(edge_client::DeadlineInAMinute());
  s.mutable_fedavg();
  return s;
}

protos::RoundReceipt Receipt(const edge_client::PendingUpdate& p, bool counted) {
  protos::RoundReceipt r;
  r.set_round(p.round);
  r.set_update_id(p.update_id);
  r.set_chunk_count(static_cast<uint32_t>(p.frames.size()));
  for (uint32_t i = 0; counted && i < p.frames.size(); ++i) r.add_counted_chunks(i);
  return r;
}

// What a client sends in its second counted round: the average of u1 and u2 with beta 1/2,
// bias-corrected: (beta (1 - beta) u1 + (1 - beta) u2) / (1 - beta^2) = (u1 + 2 u2) / 3.
float SecondSent(size_t i, int first, int second) {
  return (FakeClientEnv::Step(i, first) + 2 * FakeClientEnv::Step(i, second)) / 3;
}

TEST(SmoothClient, SendsItsUpdateFirstThenTheBiasCorrectedAverage) {
  FakeClientEnv env(Layout());
  SmoothClient client(env);
  ASSERT_TRUE(client.LoadState(env.state()).ok());
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  ASSERT_EQ(env.uploads.size(), 1u);
  std::vector<float> sent = edge_client::DecodeFp32(env.uploads[0], env.dim());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_NEAR(sent[i], FakeClientEnv::Step(i, 1), 1e-7);
  EXPECT_TRUE(client.average().values.empty());  // nothing counted yet
  ASSERT_TRUE(client.OnReceipt(Receipt(env.uploads[0], true)).ok());
  EXPECT_FALSE(env.state().pending);
  EXPECT_EQ(client.average().folded, 1u);

  ASSERT_TRUE(client.OnRoundStart(Start(2)).ok());
  ASSERT_EQ(env.uploads.size(), 2u);
  sent = edge_client::DecodeFp32(env.uploads[1], env.dim());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_NEAR(sent[i], SecondSent(i, 1, 2), 1e-7) << i;
  ASSERT_TRUE(client.OnReceipt(Receipt(env.uploads[1], true)).ok());
  EXPECT_EQ(client.average().folded, 2u);
}

TEST(SmoothClient, AnUpdateThatDidNotCountLeavesTheAverageWhereItWas) {
  FakeClientEnv env(Layout());
  SmoothClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  ASSERT_TRUE(client.OnReceipt(Receipt(env.uploads[0], true)).ok());
  const SmoothClient::Average after_one = client.average();
  // Round 2's update is refused (a receipt counting nothing) ...
  ASSERT_TRUE(client.OnRoundStart(Start(2)).ok());
  ASSERT_TRUE(client.OnReceipt(Receipt(env.uploads[1], false)).ok());
  EXPECT_EQ(client.average(), after_one);
  // ... and round 3's receipt never comes: round 4 starts from the same average.
  ASSERT_TRUE(client.OnRoundStart(Start(3)).ok());
  ASSERT_TRUE(client.OnRoundStart(Start(4)).ok());
  EXPECT_EQ(client.average(), after_one);
  ASSERT_EQ(env.uploads.size(), 4u);
  const std::vector<float> sent = edge_client::DecodeFp32(env.uploads[3], env.dim());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_NEAR(sent[i], SecondSent(i, 1, 4), 1e-7) << i;
}

TEST(SmoothClient, ARestartKeepsTheAverageAndTheUpdateInFlight) {
  FakeClientEnv env(Layout());
  auto client = std::make_unique<SmoothClient>(env);
  ASSERT_TRUE(client->OnRoundStart(Start(1)).ok());
  ASSERT_TRUE(client->OnReceipt(Receipt(env.uploads[0], true)).ok());
  ASSERT_TRUE(client->OnRoundStart(Start(2)).ok());
  std::map<std::string, std::string> slots;
  ASSERT_TRUE(client->SaveState(&slots).ok());
  ASSERT_EQ(slots.count("smooth"), 1u);
  const SmoothClient::Average before = client->average();

  env.state().modes = slots;  // what the file holds when the process dies
  SmoothClient again(env);
  ASSERT_TRUE(again.LoadState(env.state()).ok());
  EXPECT_EQ(again.average(), before);
  const int trained = env.trained;
  ASSERT_TRUE(again.OnRoundStart(Start(2)).ok());  // the round's start again
  EXPECT_EQ(env.trained, trained);                 // not trained twice
  ASSERT_EQ(env.uploads.size(), 3u);
  EXPECT_EQ(env.uploads[2], env.uploads[1]);  // the same update sent again
  ASSERT_TRUE(again.OnReceipt(Receipt(env.uploads[2], true)).ok());
  EXPECT_EQ(again.average().folded, 2u);
  for (size_t i = 0; i < env.dim(); ++i) {
    // 1/4 u1 + 1/2 u2: the average the first process would have reached.
    EXPECT_NEAR(again.average().values[i],
                0.25f * FakeClientEnv::Step(i, 1) + 0.5f * FakeClientEnv::Step(i, 2), 1e-7);
  }
  env.state().modes["smooth"] = "not a message";
  SmoothClient broken(env);
  EXPECT_EQ(broken.LoadState(env.state()).code(), absl::StatusCode::kDataLoss);
}

double GaugeValue(monitoring::Metrics& metrics, const std::string& name) {
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    if (f.name == name && !f.metric.empty()) return f.metric[0].gauge.value;
  }
  return -1;
}

TEST(SmoothDriver, CommitsTheWeightedMeanOfWhatTheClientsSendAndSetsItsGauge) {
  const codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  plan.codec = "fp32";
  plan.local_steps = 1;
  LoopbackHost host(plan, layout);
  coordinator::DriverEnv denv = host.DriverEnvFor(&plan, "smooth_test");
  denv.metrics = &host.metrics();
  auto driver = SmoothDriver::Create(denv).value();
  host.set_driver(driver.get());
  for (auto [id, samples, scale] : {std::tuple{"a", 100, 1.0f}, std::tuple{"b", 300, 3.0f}}) {
    LoopbackHost::Client& c = host.AddClient(id, samples, layout, [](edge_client::ClientEnv& e) {
      return std::make_unique<SmoothClient>(e);
    });
    c.env->num_samples = samples;
    c.env->step_scale = scale;
  }
  double norm2 = 0;  // of (u1 + 2 u2) / 3 at step scale 1
  for (size_t i = 0; i < layout.dim(); ++i) norm2 += std::pow(SecondSent(i, 1, 2), 2);
  for (int round = 1; round <= 2; ++round) {
    RoundReport report;
    coordinator::CommitResult commit;
    ASSERT_TRUE(
        driver->RunRound(host, {"a", "b"}, host.Now() + std::chrono::seconds(60), &commit, &report)
            .ok());
    EXPECT_TRUE(host.refused().empty());
    host.SendReceipts(commit);
    EXPECT_EQ(commit.participants, 2);
    EXPECT_EQ(report.figures.at("smooth_clients"), 2);
    if (round == 2) {
      // Weights 1/4 and 3/4 of steps x1 and x3: 2.5 x each round's smoothed step.
      EXPECT_NEAR(report.figures.at("smooth_update_norm"), 2.5 * std::sqrt(norm2), 1e-6);
      EXPECT_NEAR(GaugeValue(host.metrics(), "fedlgc_smooth_update_norm"), 2.5 * std::sqrt(norm2),
                  1e-6);
    }
  }
  const std::vector<float> m = host.engine().ModelVector();
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_NEAR(m[i], 1.0f + 2.5f * (FakeClientEnv::Step(i, 1) + SecondSent(i, 1, 2)), 1e-6) << i;
  }
}

TEST(SmoothDriver, TheModeIsFoundByNameAndRefusesCodecsWithSenderState) {
  auto traits = JobMode("smooth", "fp32");
  ASSERT_TRUE(traits.ok()) << traits.status();
  EXPECT_EQ((*traits)->mode, Mode::kSmooth);
  EXPECT_EQ(ModeName(Mode::kSmooth), "smooth");
  EXPECT_TRUE((*traits)->robust_aggregators);
  const codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  for (const char* ok : {"fp32", "qsgd(bits=4)", "topk(ratio=0.1)"}) {
    plan.codec = ok;
    EXPECT_TRUE((*traits)->check_codecs(plan, layout).ok()) << ok;
  }
  for (const char* refused : {"ef(topk(ratio=0.1))", "dgc(ratio=0.01)", "terngrad(shared=1)"}) {
    plan.codec = refused;
    const absl::Status st = (*traits)->check_codecs(plan, layout);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(std::string(st.message()).find("smooth"), std::string::npos) << st;  // says why
  }
}

}  // namespace
}  // namespace fedlgc::modes
