// LSGD at the edge (lsgd_client.h) against a fake ClientEnv: the first round starts from
// the run's model, each round applies its pulls in order before training and reports the
// running loss (none when it diverged), a lead uploads the model minus the group's
// reference (exactly, through fp32), a stale lead sends nothing, a restart in the middle
// of a round neither trains nor pulls twice, and a bad round start is refused.
#include "modes/lsgd/lsgd_client.h"

#include <cmath>
#include <map>
#include <string>

#include "codecs/registry.h"
#include "core/mixing.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::modes {
namespace {

using edge_client::DecodeFp32;
using edge_client::Ramp;
using FakeEnv = edge_client::FakeClientEnv;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {6, 5}}, {"b", {6}}}).value();
}

protos::RoundStart Start(uint64_t round, const std::string& codec = "fp32") {
  protos::RoundStart s;
  s.set_round(round);
  s.set_model_version(round - 1);
  s.set_codec(codec);
  s.set_seed(round * 11);
  s.set_local_steps(1);
  s.set_deadline_unix_ms(edge_client::DeadlineInAMinute());
  s.mutable_lsgd();
  return s;
}

void AddPull(protos::RoundStart* s, const std::string& blob, uint64_t version, float c) {
  protos::Pull* p = s->mutable_lsgd()->add_pulls();
  p->set_blob(blob);
  p->set_version(version);
  p->set_strength(c);
}

protos::ModeEvent Lead(uint64_t round, const std::string& blob, uint64_t version) {
  protos::ModeEvent e;
  e.mutable_lsgd_lead()->set_round(round);
  e.mutable_lsgd_lead()->set_reference_blob(blob);
  e.mutable_lsgd_lead()->set_reference_version(version);
  return e;
}

TEST(LsgdClient, TheFirstRoundStartsFromTheRunsModelTrainsAndReportsItsLoss) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  env.model = Ramp(dim, 0.5f, 0.01f);
  LsgdClient client(env);
  protos::RoundStart s = Start(1);
  AddPull(&s, "lsgd-group-0", 0, 0.5f);  // already in the run's model: not applied
  ASSERT_TRUE(client.OnRoundStart(s).ok());
  EXPECT_EQ(env.model_downloads, 1);
  EXPECT_EQ(env.trained, 1);
  const LocalModel& m = client.local();
  EXPECT_EQ(m.trained_round, 1u);
  EXPECT_EQ(m.pulled_round, 1u);
  for (size_t i = 0; i < dim; ++i) EXPECT_EQ(m.x[i], env.model[i] + FakeEnv::Step(i, 1)) << i;
  ASSERT_EQ(env.reports.size(), 1u);
  EXPECT_EQ(env.reports[0].round(), 1u);
  EXPECT_DOUBLE_EQ(env.reports[0].lsgd().loss(), 0.5);
  EXPECT_TRUE(env.uploads.empty());
}

TEST(LsgdClient, PullsApplyInOrderBeforeTraining) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  LsgdClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  std::vector<float> expect = client.local().x;
  const std::vector<float> group = Ramp(dim, -1.0f, 0.02f), global = Ramp(dim, 2.0f, -0.03f);
  env.floats[{"lsgd-group-1", 4}] = group;
  env.floats[{"lsgd-global", 4}] = global;
  protos::RoundStart s = Start(2);
  AddPull(&s, "lsgd-group-1", 4, 0.25f);
  AddPull(&s, "lsgd-global", 4, 0.1f);
  core::Pull(expect, group, 0.25);
  core::Pull(expect, global, 0.1);
  const std::vector<float> before_training = expect;
  ASSERT_TRUE(client.OnRoundStart(s).ok());
  EXPECT_EQ(client.local().pulled_round, 2u);
  EXPECT_EQ(env.trained, 2);
  // Training adds its step after the pulls: the difference is that step alone.
  for (size_t i = 0; i < dim; ++i) {
    EXPECT_EQ(client.local().x[i], before_training[i] + FakeEnv::Step(i, 2)) << i;
  }
}

TEST(LsgdClient, ALeadUploadsItsModelMinusTheReferenceAndItsReceiptEndsIt) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  LsgdClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  const std::vector<float> ref = Ramp(dim, 0.9f, 0.005f);
  env.floats[{"lsgd-ref-0", 1}] = ref;
  ASSERT_TRUE(client.OnModeEvent(Lead(1, "lsgd-ref-0", 1)).ok());
  ASSERT_EQ(env.uploads.size(), 1u);
  EXPECT_EQ(env.uploads[0].round, 1u);
  EXPECT_FALSE(env.upload_shares[0].has_value());
  const std::vector<float> got = DecodeFp32(env.uploads[0], dim);
  for (size_t i = 0; i < dim; ++i) {
    EXPECT_EQ(got[i], client.local().x[i] - ref[i]) << i;
  }
  // A second lead for the round resends the same update, not a new one.
  ASSERT_TRUE(client.OnModeEvent(Lead(1, "lsgd-ref-0", 1)).ok());
  ASSERT_EQ(env.uploads.size(), 2u);
  EXPECT_EQ(env.uploads[1].update_id, env.uploads[0].update_id);
  protos::RoundReceipt r;
  r.set_round(1);
  ASSERT_TRUE(client.OnReceipt(r).ok());
  EXPECT_FALSE(env.state().pending.has_value());
}

TEST(LsgdClient, AStaleLeadSendsNothing) {
  FakeEnv env(Layout());
  LsgdClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(3)).ok());
  ASSERT_TRUE(client.OnModeEvent(Lead(2, "lsgd-ref-0", 1)).ok());
  ASSERT_TRUE(client.OnModeEvent(Lead(4, "lsgd-ref-0", 1)).ok());
  EXPECT_TRUE(env.uploads.empty());
}

TEST(LsgdClient, ALeadInTheRoundStartLeadsAtOnce) {
  FakeEnv env(Layout());
  LsgdClient client(env);
  protos::RoundStart s = Start(1);
  s.mutable_lsgd()->mutable_lead()->CopyFrom(Lead(1, "lsgd-ref-0", 0).lsgd_lead());
  ASSERT_TRUE(client.OnRoundStart(s).ok());
  EXPECT_EQ(env.uploads.size(), 1u);
}

TEST(LsgdClient, ARestartedClientNeitherTrainsNorPullsTwice) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  std::vector<float> x;
  std::map<std::string, std::string> slots;
  {
    LsgdClient client(env);
    ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
    env.floats[{"lsgd-global", 1}] = Ramp(dim, 3.0f, 0.0f);
    protos::RoundStart s = Start(2);
    AddPull(&s, "lsgd-global", 1, 0.5f);
    ASSERT_TRUE(client.OnRoundStart(s).ok());
    x = client.local().x;
    ASSERT_TRUE(client.SaveState(&slots).ok());
  }
  env.state().modes = slots;
  LsgdClient again(env);
  ASSERT_TRUE(again.LoadState(env.state()).ok());
  protos::RoundStart s = Start(2);  // the same round's start, after a reconnect
  AddPull(&s, "lsgd-global", 1, 0.5f);
  ASSERT_TRUE(again.OnRoundStart(s).ok());
  EXPECT_EQ(env.trained, 2);
  EXPECT_EQ(again.local().x, x);
  EXPECT_EQ(env.reports.size(), 3u);  // the loss goes again: the coordinator may lack it
}

TEST(LsgdClient, ADivergedModelReportsNothing) {
  FakeEnv env(Layout());
  env.loss = std::nan("");
  LsgdClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  EXPECT_EQ(env.trained, 1);
  EXPECT_TRUE(env.reports.empty());
}

TEST(LsgdClient, ABadRoundStartIsRefused) {
  FakeEnv env(Layout());
  LsgdClient client(env);
  protos::RoundStart s = Start(1);
  s.clear_lsgd();
  EXPECT_EQ(client.OnRoundStart(s).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client.OnRoundStart(Start(1)).ok());
  protos::RoundStart bad = Start(2);
  AddPull(&bad, "lsgd-global", 1, 1.5f);
  const absl::Status st = client.OnRoundStart(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pull strength"), std::string::npos) << st;
}

}  // namespace
}  // namespace fedlgc::modes
