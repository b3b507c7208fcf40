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

namespace fedlgc::modes {
namespace {

using edge_client::PendingUpdate;

// Trains by adding a fixed step (different each time) to the weights; uploads are recorded.
class FakeEnv final : public edge_client::ClientEnv {
 public:
  explicit FakeEnv(codecs::ModelLayout layout) : layout_(std::move(layout)) {}

  const std::string& client_id() const override { return id_; }
  monitoring::Metrics& metrics() override { return metrics_; }
  edge_client::Transport& transport() override { std::abort(); }
  edge_client::ClientState& state() override { return state_; }
  absl::Status Persist() override {
    ++persists;
    return absl::OkStatus();
  }
  uint64_t dim() const override { return layout_.dim(); }
  const codecs::ModelLayout& layout() const override { return layout_; }
  const std::string& device() const override { return device_; }
  uint64_t total_rounds() const override { return 3; }
  absl::StatusOr<double> TrainLocal(const protos::RoundStart&,
                                    std::vector<float>* weights) override {
    ++trained;
    std::vector<float> step(weights->size());
    for (size_t i = 0; i < step.size(); ++i) {
      step[i] = 0.01f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(trained));
      (*weights)[i] += step[i];
    }
    for (size_t i = 0; i < step.size(); ++i) trained_sum[i] += (*weights)[i] - 1.0f;
    return 0.5;
  }
  absl::StatusOr<std::vector<float>> DownloadFloats(const std::string&, uint64_t,
                                                    edge_client::SystemTime) override {
    return std::vector<float>(layout_.dim(), 1.0f);
  }
  PendingUpdate NewPending(uint64_t round, uint64_t model_version) override {
    PendingUpdate p;
    p.round = round;
    p.model_version = model_version;
    p.update_id = ++next_id_;
    return p;
  }
  absl::Status UploadPending(uint64_t, edge_client::SystemTime,
                             const std::optional<edge_client::ShareFields>&) override {
    uploads.push_back(*state_.pending);
    return absl::OkStatus();
  }
  void CountUploaded(uint64_t) override {}
  void ObserveEncode(uint64_t, std::chrono::steady_clock::time_point) override {}
  void AppendRoundLog(const ClientRoundRecord&) override {}

  int trained = 0, persists = 0;
  std::vector<float> trained_sum = std::vector<float>(1018, 0.0f);
  std::vector<PendingUpdate> uploads;

 private:
  const std::string id_ = "client-0", device_ = "cpu";
  codecs::ModelLayout layout_;
  monitoring::Metrics metrics_;
  edge_client::ClientState state_;
  uint64_t next_id_ = 0;
};

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
  EXPECT_EQ(env.state().pending->psgd_phase, 1u);

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
  EXPECT_EQ(env.state().pending->psgd_phase, 2u);
  EXPECT_EQ(env.state().pending->psgd_factor, f);
}

}  // namespace
}  // namespace fedlgc::modes
