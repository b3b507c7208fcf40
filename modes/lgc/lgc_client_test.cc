// LGC at the edge (lgc_client.h) against a fake ClientEnv, for what a federation rarely
// shows: a follower waits with all of its update in the residual, a leader whose payload
// did not count gets all of it back, a follower restarted while waiting leads when the
// round start says so, and a stage it does not know is refused.
#include "modes/lgc/lgc_client.h"

#include <cmath>

#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::modes {
namespace {

using FakeEnv = edge_client::FakeClientEnv;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {30, 20}}, {"b", {30}}}).value();
}

protos::RoundStart Start(uint64_t round, protos::LgcStage stage, bool leader) {
  protos::RoundStart s;
  s.set_round(round);
  s.set_model_version(round - 1);
  s.set_codec("lgc(ratio=0.05,entropy=0,zstd=0)");
  s.set_seed(round);
  s.set_local_steps(1);
  s.set_deadline_unix_ms(edge_client::DeadlineInAMinute());
  s.mutable_lgc()->set_stage(stage);
  s.mutable_lgc()->set_leader(leader);
  return s;
}

TEST(LgcClient, AFollowerWaitsWithAllOfItsUpdateInTheResidual) {
  FakeEnv env(Layout());
  LgcClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, protos::LGC_STAGE_CELLS, false)).ok());
  EXPECT_TRUE(env.uploads.empty());
  ASSERT_TRUE(env.state().pending.has_value());
  EXPECT_TRUE(env.state().pending->frames.empty());
  ASSERT_EQ(env.state().residual.size(), env.dim());
  // The update is what training added to the model of ones, (1 + step) - 1.
  for (size_t i = 0; i < env.dim(); ++i) {
    EXPECT_NEAR(env.state().residual[i], FakeEnv::Step(i, 1), 1e-7) << i;
  }
}

TEST(LgcClient, ALeaderWhosePayloadDidNotCountGetsAllOfItBack) {
  FakeEnv env(Layout());
  LgcClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, protos::LGC_STAGE_CELLS, true)).ok());
  ASSERT_EQ(env.uploads.size(), 1u);
  ASSERT_EQ(env.uploads[0].frames.size(), 1u);
  // Only the support (5% of 630) was taken out of the residual.
  size_t taken = 0;
  for (size_t i = 0; i < env.dim(); ++i) {
    taken += std::fabs(env.state().residual[i] - FakeEnv::Step(i, 1)) > 1e-6;
  }
  EXPECT_LE(taken, env.dim() / 20 + 1);
  EXPECT_GT(taken, 0u);
  protos::RoundReceipt r;
  r.set_round(1);
  r.set_update_id(env.uploads[0].update_id);
  r.set_chunk_count(1);  // none counted
  ASSERT_TRUE(client.OnReceipt(r).ok());
  EXPECT_FALSE(env.state().pending.has_value());
  for (size_t i = 0; i < env.dim(); ++i) {
    EXPECT_NEAR(env.state().residual[i], FakeEnv::Step(i, 1), 1e-7) << i;
  }
}

TEST(LgcClient, AFollowerRestartedWhileWaitingLeadsWhenTheRoundStartSaysSo) {
  FakeEnv env(Layout());
  std::map<std::string, std::string> slots;
  {
    LgcClient client(env);
    ASSERT_TRUE(client.OnRoundStart(Start(1, protos::LGC_STAGE_CELLS, false)).ok());
    ASSERT_TRUE(client.SaveState(&slots).ok());
  }
  const uint64_t waited_as = env.state().pending->update_id;
  env.state().modes = slots;
  LgcClient again(env);
  ASSERT_TRUE(again.LoadState(env.state()).ok());
  // Promoted while it was away: the round start says it leads.
  ASSERT_TRUE(again.OnRoundStart(Start(1, protos::LGC_STAGE_CELLS, true)).ok());
  EXPECT_EQ(env.trained, 1);  // not trained again
  ASSERT_EQ(env.uploads.size(), 1u);
  EXPECT_NE(env.uploads[0].update_id, waited_as);  // a leader's update is another
  EXPECT_EQ(env.uploads[0].frames.size(), 1u);
}

TEST(LgcClient, AStageItDoesNotKnowIsRefused) {
  FakeEnv env(Layout());
  LgcClient client(env);
  const absl::Status st = client.OnRoundStart(Start(1, static_cast<protos::LgcStage>(7), true));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("does not know"), std::string::npos) << st;
  protos::RoundStart none = Start(1, protos::LGC_STAGE_CELLS, true);
  none.clear_lgc();
  EXPECT_EQ(client.OnRoundStart(none).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedlgc::modes
