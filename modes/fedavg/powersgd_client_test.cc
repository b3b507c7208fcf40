// Two-phase PowerSGD at the edge (powersgd_client.h) against a fake ClientEnv: the client
// sends P against the round's query with M kept whole in its residual, sends Q against the
// factor and keeps M - P^ Q^T, and when the round moves past a pending payload (a restarted
// coordinator with another query or factor) it puts back what it sent and sends again
// without training twice; receipts that do not count put the sent part back. Throughout,
// the residual plus what counted is every update it trained.
#include "modes/fedavg/powersgd_client.h"

#include <cmath>
#include <cstring>

#include "codecs/frame.h"
#include "core/float_bytes.h"
#include "gtest/gtest.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::modes {
namespace {

using edge_client::PendingUpdate;
using FakeEnv = edge_client::FakeClientEnv;

constexpr char kSpec[] = "powersgd(rank=2,phases=2)";

// A 24 x 40 matrix, its bias, and a 2 x 17 matrix sent dense (34 < 2 x 2 x 19).
codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {24, 40}}, {"b", {24}}, {"d", {2, 17}}}).value();
}

protos::RoundStart Start(uint64_t round, std::span<const float> query,
                         std::span<const float> factor = {}) {
  protos::RoundStart s;
  s.set_round(round);
  s.set_model_version(round - 1);
  s.set_codec(kSpec);
  s.set_local_steps(1);
  s.set_deadline_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::minutes(1)).time_since_epoch())
          .count());
  s.mutable_fedavg()->mutable_powersgd()->set_query(core::FloatsToBytes(query));
  s.mutable_fedavg()->mutable_powersgd()->set_factor(core::FloatsToBytes(factor));
  return s;
}

protos::PowerSgdFactor FactorEvent(uint64_t round, std::span<const float> factor) {
  protos::PowerSgdFactor f;
  f.set_round(round);
  f.set_factor(core::FloatsToBytes(factor));
  return f;
}

// The payload's spec, tag and values.
struct Payload {
  std::string spec;
  uint32_t tag = 0;
  std::vector<float> values;
};
Payload Read(const PendingUpdate& p) {
  EXPECT_EQ(p.frames.size(), 1u);
  auto view = codecs::ParseFrame(p.frames[0], codecs::FrameLimits()).value();
  Payload out{std::string(view.spec)};
  std::memcpy(&out.tag, view.body.data(), 4);
  out.values.resize((view.body.size() - 4) / 4);
  std::memcpy(out.values.data(), view.body.data() + 4, out.values.size() * 4);
  return out;
}

double Worst(std::span<const float> a, std::span<const float> b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(double(a[i]) - b[i]));
  return w;
}

TEST(PowerSgdClient, SendsPThenQAndResendsAgainstWhatTheRoundHoldsNow) {
  const codecs::ModelLayout layout = Layout();
  ASSERT_EQ(layout.dim(), 1018u);
  const auto t = codecs::PowerSgdTwoPhase::Create(kSpec, layout).value();
  FakeEnv env(layout);
  PowerSgdClient client(env, [] {});
  const std::vector<float> q1 = t.DrawQuery(1), q2 = t.DrawQuery(2);

  // Phase 1: P = M Q1, and M (the whole update) waits in the residual.
  ASSERT_TRUE(client.OnRoundStart(Start(1, q1)).ok());
  ASSERT_EQ(env.trained, 1);
  ASSERT_EQ(env.uploads.size(), 1u);
  const std::vector<float> m = env.state().residual;
  EXPECT_EQ(Worst(m, env.trained_sum), 0.0);
  Payload p = Read(env.uploads.back());
  EXPECT_EQ(p.spec, codecs::kPowerSgdProjectionSpec);
  EXPECT_EQ(p.tag, codecs::PowerSgdTwoPhase::Tag(q1));
  EXPECT_EQ(p.values, t.Project(m, q1));
  ASSERT_NE(client.in_flight().Of(env.state()), nullptr);
  EXPECT_EQ(client.in_flight().Of(env.state())->phase, 1u);

  // The same round again with another query (a restarted coordinator drew one): P again
  // against it, without training again.
  ASSERT_TRUE(client.OnRoundStart(Start(1, q2)).ok());
  EXPECT_EQ(env.trained, 1);
  p = Read(env.uploads.back());
  EXPECT_EQ(p.tag, codecs::PowerSgdTwoPhase::Tag(q2));
  EXPECT_EQ(p.values, t.Project(m, q2));
  // Again with the same query: the same P goes out (a resumed upload).
  ASSERT_TRUE(client.OnRoundStart(Start(1, q2)).ok());
  EXPECT_EQ(env.uploads.back().update_id, env.uploads[env.uploads.size() - 2].update_id);

  // Phase 2: Q = M^T P^ as a new update, and the residual keeps M - P^ Q^T.
  const std::vector<float> f1 = t.Orthonormalize(t.Project(m, q2));
  ASSERT_TRUE(client.OnFactor(FactorEvent(1, f1)).ok());
  Payload q = Read(env.uploads.back());
  EXPECT_EQ(q.spec, codecs::kPowerSgdMessageSpec);
  EXPECT_EQ(q.tag, codecs::PowerSgdTwoPhase::Tag(f1));
  EXPECT_EQ(q.values, t.Message(m, f1));
  EXPECT_NE(env.uploads.back().update_id, env.uploads[env.uploads.size() - 2].update_id);
  std::vector<float> sent(layout.dim(), 0.0f);
  t.AddRebuilt(f1, q.values, 1.0, sent);
  for (size_t i = 0; i < m.size(); ++i) ASSERT_EQ(env.state().residual[i], m[i] - sent[i]) << i;
  // The same factor again (a repeated event) changes nothing.
  const size_t n = env.uploads.size();
  ASSERT_TRUE(client.OnFactor(FactorEvent(1, f1)).ok());
  EXPECT_EQ(env.uploads.size(), n);

  // The coordinator restarted before the round committed: its RoundStart has a query and
  // no factor. What Q carried goes back, and P goes out again.
  ASSERT_TRUE(client.OnRoundStart(Start(1, q2)).ok());
  EXPECT_EQ(env.trained, 1);
  EXPECT_LT(Worst(env.state().residual, m), 1e-8);
  p = Read(env.uploads.back());
  EXPECT_EQ(p.spec, codecs::kPowerSgdProjectionSpec);
  // Another factor than the one sent against: Q again, against it.
  const std::vector<float> f2 = t.Orthonormalize(t.Project(m, q1));
  ASSERT_TRUE(client.OnFactor(FactorEvent(1, f2)).ok());
  ASSERT_TRUE(client.OnRoundStart(Start(1, q2, t.Orthonormalize(t.Project(m, q2)))).ok());
  q = Read(env.uploads.back());
  EXPECT_EQ(q.tag, codecs::PowerSgdTwoPhase::Tag(f1));  // the RoundStart's factor is f1's
  EXPECT_LT(Worst(q.values, t.Message(m, f1)), 1e-7);

  // A receipt that does not count this update: all of M is back in the residual.
  protos::RoundReceipt lost;
  lost.set_round(1);
  lost.set_update_id(env.uploads.back().update_id + 100);
  ASSERT_TRUE(client.OnReceipt(lost).ok());
  EXPECT_FALSE(env.state().pending.has_value());
  EXPECT_LT(Worst(env.state().residual, env.trained_sum), 1e-7);

  // Round 2: M = the new update + the residual; a factor in the RoundStart (a client that
  // connects after it went out) skips P. Its receipt counts: the residual is M - sent.
  ASSERT_TRUE(client.OnRoundStart(Start(2, q1, f2)).ok());
  EXPECT_EQ(env.trained, 2);
  const std::vector<float> m2 = env.trained_sum;
  q = Read(env.uploads.back());
  EXPECT_EQ(q.spec, codecs::kPowerSgdMessageSpec);
  EXPECT_LT(Worst(q.values, t.Message(m2, f2)), 1e-6);
  protos::RoundReceipt counted;
  counted.set_round(2);
  counted.set_update_id(env.uploads.back().update_id);
  counted.add_counted_chunks(0);
  ASSERT_TRUE(client.OnReceipt(counted).ok());
  std::fill(sent.begin(), sent.end(), 0.0f);
  t.AddRebuilt(f2, q.values, 1.0, sent);
  for (size_t i = 0; i < m2.size(); ++i) {
    EXPECT_NEAR(env.state().residual[i] + sent[i], m2[i], 1e-6) << i;
  }
}

TEST(PowerSgdClient, RefusesRoundStartsItCannotUseBeforeTraining) {
  const codecs::ModelLayout layout = Layout();
  const auto t = codecs::PowerSgdTwoPhase::Create(kSpec, layout).value();
  FakeEnv env(layout);
  PowerSgdClient client(env, [] {});
  const std::vector<float> q = t.DrawQuery(1);
  // A query of the wrong size: refused before anything trains.
  EXPECT_FALSE(client.OnRoundStart(Start(1, std::span<const float>(q).first(q.size() - 1))).ok());
  EXPECT_EQ(env.trained, 0);
  EXPECT_TRUE(env.state().residual.empty());
  // A factor outside [-1, 1] (an orthonormal column has none): refused before training too.
  std::vector<float> f = t.Orthonormalize(t.Project(std::vector<float>(layout.dim(), 1.0f), q));
  std::vector<float> bad = f;
  bad[0] = 3;
  EXPECT_FALSE(client.OnRoundStart(Start(1, q, bad)).ok());
  EXPECT_EQ(env.trained, 0);
  // The good one: trained once, sent against it.
  ASSERT_TRUE(client.OnRoundStart(Start(1, q, f)).ok());
  EXPECT_EQ(env.trained, 1);
  const PowerSgdInFlight* in_flight = client.in_flight().Of(env.state());
  ASSERT_NE(in_flight, nullptr);
  EXPECT_EQ(in_flight->phase, 2u);
  EXPECT_EQ(in_flight->factor, f);
}

}  // namespace
}  // namespace fedlgc::modes
