// SGP at the edge (sgp_client.h) against a fake ClientEnv: a share leaves x and w when it
// is made, what is left plus the share is the trained model (push-sum's mass kept), a
// delivered receipt drops the share and one that is not (or none before the next round)
// puts it back exactly; the inbox is added once; the report carries the mail added and the
// distance to the reference; with overlap the next period trains while a copy uploads.
#include "modes/sgp/sgp_client.h"

#include <cmath>
#include <map>
#include <string>

#include "codecs/registry.h"
#include "core/mixing.h"
#include "gtest/gtest.h"
#include "modes/sgp/inbox.h"
#include "protos/fedlgc.pb.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::modes {
namespace {

using edge_client::DecodeFp32;
using edge_client::Ramp;
using FakeEnv = edge_client::FakeClientEnv;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {7, 4}}, {"b", {7}}}).value();
}

protos::RoundStart Start(uint64_t round, double share, bool reference = false,
                         uint32_t overlap = 0) {
  protos::RoundStart s;
  s.set_round(round);
  s.set_model_version(round - 1);
  s.set_codec("fp32");
  s.set_seed(round * 7);
  s.set_next_seed(round * 7 + 7);
  s.set_local_steps(1);
  s.set_deadline_unix_ms(edge_client::DeadlineInAMinute());
  s.mutable_sgp()->set_share(share);
  s.mutable_sgp()->set_reference(reference);
  s.mutable_sgp()->set_overlap(overlap);
  return s;
}

protos::RoundReceipt Receipt(const edge_client::PendingUpdate& p, size_t counted) {
  protos::RoundReceipt r;
  r.set_round(p.round);
  r.set_update_id(p.update_id);
  r.set_chunk_count(static_cast<uint32_t>(p.frames.size()));
  for (uint32_t i = 0; i < counted; ++i) r.add_counted_chunks(i);
  return r;
}

TEST(SgpClient, AShareLeavesXAndWAndWhatIsLeftPlusTheShareIsTheTrainedModel) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  env.model = Ramp(dim, 0.2f, 0.03f);
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 0.25)).ok());
  ASSERT_EQ(env.uploads.size(), 1u);
  ASSERT_TRUE(env.upload_shares[0].has_value());
  const LocalModel& m = client.local();
  EXPECT_DOUBLE_EQ(env.upload_shares[0]->weight, 0.25);
  EXPECT_DOUBLE_EQ(m.w, 0.75);
  EXPECT_DOUBLE_EQ(m.share_pw, 0.25);
  // fp32 carries p x exactly: the share decodes to a quarter of the trained model.
  const std::vector<float> sent = DecodeFp32(env.uploads[0], dim);
  for (size_t i = 0; i < dim; ++i) {
    const float trained = env.model[i] + FakeEnv::Step(i, 1);
    EXPECT_EQ(sent[i], m.share[i]) << i;
    EXPECT_NEAR(sent[i], 0.25f * trained, 1e-6) << i;
    EXPECT_NEAR(m.x[i] + sent[i], trained, 1e-6) << i;
    EXPECT_NEAR(m.contributed[i], trained, 1e-6) << i;
  }
  ASSERT_EQ(env.reports.size(), 1u);
  EXPECT_EQ(env.reports[0].sgp().inbox_applied(), 0u);
  EXPECT_EQ(env.reports[0].sgp().distance_sq(), -1);  // no reference this round
}

TEST(SgpClient, ADeliveredShareIsGoneAndOneNotDeliveredComesBack) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 0.5)).ok());
  const std::vector<float> kept = client.local().x;
  ASSERT_TRUE(client.OnReceipt(Receipt(env.uploads[0], env.uploads[0].frames.size())).ok());
  EXPECT_FALSE(env.state().pending.has_value());
  EXPECT_EQ(client.local().x, kept);
  EXPECT_DOUBLE_EQ(client.local().w, 0.5);

  ASSERT_TRUE(client.OnRoundStart(Start(2, 0.5)).ok());
  const LocalModel before = client.local();
  // Some chunks counted is not delivered: the relay forwards whole shares only.
  const edge_client::PendingUpdate& p = env.uploads.back();
  protos::RoundReceipt partial = Receipt(p, p.frames.size());
  partial.mutable_counted_chunks()->RemoveLast();
  ASSERT_TRUE(client.OnReceipt(partial).ok());
  EXPECT_FALSE(env.state().pending.has_value());
  for (size_t i = 0; i < dim; ++i) EXPECT_EQ(client.local().x[i], before.x[i] + before.share[i]);
  EXPECT_DOUBLE_EQ(client.local().w, 0.5);  // 0.25 left + 0.25 back
  EXPECT_TRUE(client.local().share.empty());
}

TEST(SgpClient, AShareWithoutAReceiptComesBackAtTheNextRound) {
  FakeEnv env(Layout());
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 0.5)).ok());
  const LocalModel before = client.local();
  ASSERT_TRUE(client.OnRoundStart(Start(2, 1.0)).ok());  // keeps everything this round
  EXPECT_DOUBLE_EQ(client.local().w, 1.0);
  EXPECT_EQ(env.uploads.size(), 1u);
  EXPECT_EQ(env.trained, 2);
  for (size_t i = 0; i < before.x.size(); ++i) {
    // Back in, then trained on x / w with w = 1: x + share + the second step.
    EXPECT_NEAR(client.local().x[i], before.x[i] + before.share[i] + FakeEnv::Step(i, 2), 1e-6);
  }
}

TEST(SgpClient, TheInboxIsAddedOnceAndReported) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 1.0)).ok());
  const LocalModel before = client.local();
  const std::vector<float> mail = Ramp(dim, 0.1f, -0.01f);
  env.blobs[{"inbox", 1}] = EncodeInbox(0.5, mail);
  protos::RoundStart s = Start(2, 1.0);
  s.mutable_sgp()->add_inbox_rounds(1);
  ASSERT_TRUE(client.OnRoundStart(s).ok());
  EXPECT_EQ(client.local().inbox_applied, 1u);
  EXPECT_DOUBLE_EQ(client.local().w, 1.5);
  ASSERT_EQ(env.reports.size(), 2u);
  EXPECT_EQ(env.reports[1].sgp().inbox_applied(), 1u);
  // Trained on z = x / w after the mail: the step lands on x as w times the step.
  for (size_t i = 0; i < dim; ++i) {
    const float x = before.x[i] + mail[i];
    const float z = static_cast<float>(x / 1.5) + FakeEnv::Step(i, 2);
    EXPECT_NEAR(client.local().x[i], 1.5 * z, 1e-5) << i;
  }
  // Listed again (a reconnect): not added twice.
  const LocalModel after = client.local();
  ASSERT_TRUE(client.OnRoundStart(s).ok());
  EXPECT_EQ(client.local().x, after.x);
  EXPECT_DOUBLE_EQ(client.local().w, after.w);
  // A job that ends with mail added reports it once more.
  ASSERT_TRUE(client.OnJobOver().ok());
  EXPECT_EQ(env.reports.back().round(), 0u);
  EXPECT_EQ(env.reports.back().sgp().inbox_applied(), 1u);
}

TEST(SgpClient, AnInboxOfAnotherSizeIsRefused) {
  FakeEnv env(Layout());
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 1.0)).ok());
  env.blobs[{"inbox", 1}] = EncodeInbox(0.5, std::vector<float>(3, 1.0f));
  protos::RoundStart s = Start(2, 1.0);
  s.mutable_sgp()->add_inbox_rounds(1);
  EXPECT_FALSE(client.OnRoundStart(s).ok());
  EXPECT_EQ(client.local().inbox_applied, 0u);
}

TEST(SgpClient, WithAReferenceItReportsItsDistanceToIt) {
  FakeEnv env(Layout());
  const size_t dim = env.dim();
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 1.0)).ok());
  const std::vector<float> z = client.local().x;  // w = 1
  env.floats[{"", 1}] = Ramp(dim, 1.5f, 0.0f);
  ASSERT_TRUE(client.OnRoundStart(Start(2, 0.5, /*reference=*/true)).ok());
  double d = 0;
  for (size_t i = 0; i < dim; ++i) d += (double(z[i]) - 1.5) * (double(z[i]) - 1.5);
  ASSERT_EQ(env.reports.size(), 2u);
  EXPECT_NEAR(env.reports[1].sgp().distance_sq(), d, 1e-9 * d);
  // Coded against p w times the reference: what is left plus the share is still x.
  const LocalModel& m = client.local();
  for (size_t i = 0; i < dim; ++i) {
    EXPECT_NEAR(m.x[i] + m.share[i], z[i] + FakeEnv::Step(i, 2), 1e-5) << i;
  }
}

TEST(SgpClient, WithOverlapTheNextPeriodTrainsWhileACopyUploads) {
  FakeEnv env(Layout());
  SgpClient client(env);
  ASSERT_TRUE(client.OnRoundStart(Start(1, 0.5, false, /*overlap=*/1)).ok());
  client.Settle();
  EXPECT_EQ(env.trained, 2);  // round 1's period, then round 2's ahead of its start
  EXPECT_EQ(client.local().trained_round, 2u);
  EXPECT_TRUE(env.uploads.empty());
  {
    absl::MutexLock l(&env.copies_mu);
    ASSERT_EQ(env.copies.size(), 1u);
    EXPECT_EQ(env.copies[0].first.round, 1u);
    EXPECT_DOUBLE_EQ(env.copies[0].second.weight, 0.5);
  }
  EXPECT_EQ(env.counted, std::vector<uint64_t>{1});
  // Not after the job's last round (the fake's job has 3).
  FakeEnv last(Layout());
  SgpClient at_end(last);
  ASSERT_TRUE(at_end.OnRoundStart(Start(3, 0.5, false, 1)).ok());
  EXPECT_EQ(last.trained, 1);
  EXPECT_EQ(last.uploads.size(), 1u);
}

TEST(SgpClient, ItsModelAndShareSurviveARestart) {
  FakeEnv env(Layout());
  std::map<std::string, std::string> slots;
  LocalModel saved;
  {
    SgpClient client(env);
    ASSERT_TRUE(client.OnRoundStart(Start(1, 0.5)).ok());
    ASSERT_TRUE(client.SaveState(&slots).ok());
    saved = client.local();
  }
  env.state().modes = slots;
  SgpClient again(env);
  ASSERT_TRUE(again.LoadState(env.state()).ok());
  EXPECT_EQ(again.local(), saved);
  // The same round's start: the pending share goes again, nothing trains.
  ASSERT_TRUE(again.OnRoundStart(Start(1, 0.5)).ok());
  EXPECT_EQ(env.trained, 1);
  ASSERT_EQ(env.uploads.size(), 2u);
  EXPECT_EQ(env.uploads[1].update_id, env.uploads[0].update_id);
}

}  // namespace
}  // namespace fedlgc::modes
