// Each mode's client state lives in the mode's slot: a client of every mode, given the
// state file a release before slots wrote (tests/state_files/fixtures/client_state-v11),
// takes its fields from it, writes them in its slot, and reads them back from the slot
// alone to the same slot bytes; what it kept is what the old file held.
#include <map>
#include <string>

#include "core/float_bytes.h"
#include "edge_client/client_state.h"
#include "gtest/gtest.h"
#include "modes/clients.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "modes/lgc/lgc_state.pb.h"
#include "modes/local_model.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::modes {
namespace {

using Slots = std::map<std::string, std::string>;

edge_client::ClientState OldState() {
  auto s = edge_client::LoadClientState(std::string(FEDLGC_STATE_FIXTURES) +
                                        "/client_state-v11/client-0.state");
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s.ok() && s->legacy.has_value());
  return s.ok() ? *s : edge_client::ClientState();
}

// The slots a client of `mode` writes after LoadState(state).
Slots SlotsAfterLoading(Mode mode, const edge_client::ClientState& state) {
  edge_client::FakeClientEnv env(codecs::ModelLayout::Create({{"w", {5}}}).value());
  env.state() = state;
  auto client = MakeClientMode(mode, env);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  EXPECT_TRUE((*client)->LoadState(env.state()).ok());
  Slots slots;
  EXPECT_TRUE((*client)->SaveState(&slots).ok());
  return slots;
}

// The old file's fields go into the slots, and the slots alone give the same slots again.
Slots Converted(Mode mode) {
  const edge_client::ClientState old = OldState();
  const Slots slots = SlotsAfterLoading(mode, old);
  edge_client::ClientState fresh = old;
  fresh.legacy.reset();
  fresh.modes = slots;
  EXPECT_EQ(SlotsAfterLoading(mode, fresh), slots) << ModeName(mode);
  return slots;
}

TEST(ClientSlots, FedAvgKeepsTheSharedScaleRoundAndPowerSgdsUpdateInFlight) {
  const Slots slots = Converted(Mode::kFedAvg);
  ASSERT_EQ(slots.count("fedavg"), 1u);
  pb::FedAvgClientState s;
  ASSERT_TRUE(s.ParseFromString(slots.at("fedavg")));
  EXPECT_EQ(s.scale_round(), 9u);
  EXPECT_EQ(s.scale_version(), 8u);
  EXPECT_EQ(s.psgd_update_id(), OldState().pending->update_id);
  EXPECT_EQ(s.psgd_phase(), 2u);
  EXPECT_EQ(s.psgd_factor(), core::FloatsToBytes(std::vector<float>{0.6f, -0.8f}));
}

TEST(ClientSlots, LgcKeepsItsStageSupportAndValuesBesideFedAvgs) {
  const Slots slots = Converted(Mode::kLgc);
  ASSERT_EQ(slots.count("lgc"), 1u);
  ASSERT_EQ(slots.count("fedavg"), 1u);  // its warm-up rounds' state
  pb::LgcClientState s;
  ASSERT_TRUE(s.ParseFromString(slots.at("lgc")));
  EXPECT_EQ(s.update_id(), OldState().pending->update_id);
  EXPECT_EQ(s.stage(), 2u);
  const std::vector<uint32_t> support = {1, 3, 4};
  EXPECT_EQ(s.support(), std::string(reinterpret_cast<const char*>(support.data()), 12));
  EXPECT_EQ(s.values(), core::FloatsToBytes(std::vector<float>{0.5f, -0.25f, 8.0f}));
}

TEST(ClientSlots, LsgdAndSgpKeepTheirLocalModel) {
  const edge_client::ClientState old = OldState();
  ASSERT_TRUE(old.legacy.has_value());
  const edge_client::LegacyModeFields& l = *old.legacy;
  for (Mode mode : {Mode::kLsgd, Mode::kSgp}) {
    SCOPED_TRACE(ModeName(mode));
    edge_client::ClientState state = OldState();
    state.legacy.reset();
    state.modes = Converted(mode);
    auto m = LoadLocalModel(state, std::string(ModeName(mode)));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->x, l.x);
    EXPECT_EQ(m->w, l.w);
    EXPECT_EQ(m->trained_round, l.trained_round);
    EXPECT_EQ(m->pulled_round, l.pulled_round);
    EXPECT_EQ(m->loss, l.loss);
    EXPECT_EQ(m->inbox_applied, l.inbox_applied);
    EXPECT_EQ(m->contributed, l.contributed);
    EXPECT_EQ(m->share_pw, l.share_pw);
    EXPECT_EQ(m->share, l.share);
  }
}

// A slot that does not parse is refused when the mode loads (the client stops with the
// file named by the edge client) rather than read as a fresh start.
TEST(ClientSlots, AMalformedSlotIsRefused) {
  for (Mode mode : {Mode::kFedAvg, Mode::kLgc, Mode::kLsgd, Mode::kSgp}) {
    SCOPED_TRACE(ModeName(mode));
    edge_client::FakeClientEnv env(codecs::ModelLayout::Create({{"w", {5}}}).value());
    env.state().modes[std::string(ModeName(mode))] = "\xff\xff\xff";
    auto client = MakeClientMode(mode, env);
    ASSERT_TRUE(client.ok()) << client.status();
    const absl::Status st = (*client)->LoadState(env.state());
    EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  }
}

}  // namespace
}  // namespace fedlgc::modes
