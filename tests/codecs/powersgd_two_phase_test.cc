// Two-phase PowerSGD's arithmetic (codecs/powersgd_two_phase.h): the paper's oracles for
// the federated form (updates that share a rank-r column space come back exactly, P^T P = I
// per matrix), linearity (the rebuilt mean is the mean of the rebuilds), a message's norm
// equal to its update's, the residual keeping exactly what was not sent, the spec and its
// refusals, and hostile payload bodies.
#include "codecs/powersgd_two_phase.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

// Two matrices (12 x 30 and 20 x 16: compressed at rank 2), a bias and a small 3 x 3
// matrix that goes dense (9 < 2 x 2 x 6).
ModelLayout Layout() {
  return ModelLayout::Create({{"w", {12, 30}}, {"b", {12}}, {"v", {20, 4, 4}}, {"t", {3, 3}}})
      .value();
}

PowerSgdTwoPhase Make(const std::string& spec = "powersgd(rank=2,phases=2)") {
  auto t = PowerSgdTwoPhase::Create(spec, Layout());
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

std::vector<float> Gaussian(size_t n, uint64_t seed, double scale = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

double Norm(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// Client updates whose compressed matrices all lie in one rank-2 column space (U V_i^T with
// U shared), with their own dense values.
std::vector<std::vector<float>> SharedColumnSpace(const PowerSgdTwoPhase& t, int clients) {
  std::vector<std::vector<float>> out(clients, std::vector<float>(t.dim()));
  for (const PowerSgd::Block& b : t.blocks()) {
    const std::vector<float> u = Gaussian(b.rows * 2, 7 + b.offset);
    for (int c = 0; c < clients; ++c) {
      if (b.rank == 0) {
        const std::vector<float> d = Gaussian(b.size, 100 + c + b.offset, 0.1);
        std::copy(d.begin(), d.end(), out[c].begin() + b.offset);
        continue;
      }
      const std::vector<float> v = Gaussian(b.cols * 2, 1000 * (c + 1) + b.offset, 0.01);
      for (uint64_t i = 0; i < b.rows; ++i) {
        for (uint64_t j = 0; j < b.cols; ++j) {
          out[c][b.offset + i * b.cols + j] = u[i * 2] * v[j * 2] + u[i * 2 + 1] * v[j * 2 + 1];
        }
      }
    }
  }
  return out;
}

TEST(PowerSgdTwoPhase, SpecSizesAndRefusals) {
  const PowerSgdTwoPhase t = Make();
  EXPECT_EQ(t.spec(), StrCat("powersgd/1(rank=2,min_ratio=2,warm=1,iters=1,phases=2,layout=",
                             Layout().HashWord(), ")"));
  EXPECT_TRUE(t.warm());
  EXPECT_EQ(t.projection_floats(), 12u * 2 + 20 * 2);
  EXPECT_EQ(t.query_floats(), 30u * 2 + 16 * 2);
  EXPECT_EQ(t.message_floats(), 30u * 2 + 16 * 2 + 12 + 9);
  EXPECT_EQ(t.FrameBytes(kPowerSgdMessageSpec, 10),
            FrameOverhead(kPowerSgdMessageSpec.size()) + 4 + 40);
  const ModelLayout layout = Layout();
  // One power iteration per round, phases of 1 or 2, and no frames of its own.
  EXPECT_TRUE(
      FailsWith(MakeCodec("powersgd(phases=2,iters=2)", &layout), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("powersgd(phases=3)", &layout), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(PowerSgdTwoPhase::Create("powersgd(rank=2)", layout),
                        StatusCode::kInvalidArgument));
  auto codec = MakeCodec("powersgd(phases=2)", &layout).value();
  std::vector<Frame> frames;
  const absl::Status st =
      codec->Encode(std::vector<float>(layout.dim(), 1.0f), EncodeOptions(), &frames);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(frames.empty());
  // The one-phase spec is as before (phases=1 is not written).
  EXPECT_EQ(MakeCodec("powersgd(rank=2,phases=1)", &layout).value()->spec(),
            MakeCodec("powersgd(rank=2)", &layout).value()->spec());
}

TEST(PowerSgdTwoPhase, SharedRankRUpdatesComeBackExactlyAndPHatIsOrthonormal) {
  const PowerSgdTwoPhase t = Make();
  const auto m = SharedColumnSpace(t, 3);
  const std::vector<double> w = {1, 2, 5};
  const std::vector<float> query = t.DrawQuery(42);
  ASSERT_EQ(query.size(), t.query_floats());
  // Phase 1: the weighted mean of the clients' P, orthonormalized.
  std::vector<float> p_mean(t.projection_floats(), 0.0f);
  for (int c = 0; c < 3; ++c) {
    const std::vector<float> p = t.Project(m[c], query);
    for (size_t i = 0; i < p.size(); ++i) p_mean[i] += static_cast<float>(w[c] / 8 * p[i]);
  }
  const std::vector<float> p_hat = t.Orthonormalize(p_mean);
  uint64_t at = 0;
  for (const PowerSgd::Block& b : t.blocks()) {
    if (b.rank == 0) continue;
    for (uint32_t k = 0; k < b.rank; ++k) {
      for (uint32_t l = 0; l < b.rank; ++l) {
        double dot = 0;
        for (uint64_t i = 0; i < b.rows; ++i) {
          dot += double(p_hat[at + i * b.rank + k]) * p_hat[at + i * b.rank + l];
        }
        EXPECT_NEAR(dot, k == l ? 1.0 : 0.0, 1e-5) << b.name << " " << k << "," << l;
      }
    }
    at += b.rows * b.rank;
  }
  // Phase 2: each client's own update comes back exactly, and so does the mean.
  std::vector<float> mean_msg(t.message_floats(), 0.0f), rebuilt_mean(t.dim(), 0.0f);
  std::vector<float> expected_mean(t.dim(), 0.0f);
  for (int c = 0; c < 3; ++c) {
    const std::vector<float> msg = t.Message(m[c], p_hat);
    ASSERT_EQ(msg.size(), t.message_floats());
    std::vector<float> back(t.dim(), 0.0f);
    t.AddRebuilt(p_hat, msg, 1.0, back);
    double worst = 0;
    for (size_t i = 0; i < back.size(); ++i)
      worst = std::max(worst, double(std::fabs(back[i] - m[c][i])));
    EXPECT_LT(worst, 1e-5 * (Norm(m[c]) + 1)) << "client " << c;
    // The message's norm is the norm of what it rebuilds (P^ orthonormal).
    EXPECT_NEAR(Norm(msg), Norm(back), 1e-5 * Norm(back));
    for (size_t i = 0; i < msg.size(); ++i) mean_msg[i] += static_cast<float>(w[c] / 8 * msg[i]);
    t.AddRebuilt(p_hat, msg, w[c] / 8, rebuilt_mean);
    for (size_t i = 0; i < t.dim(); ++i) expected_mean[i] += static_cast<float>(w[c] / 8 * m[c][i]);
  }
  // Linear: one rebuild of the summed messages is the sum of the rebuilds.
  std::vector<float> once(t.dim(), 0.0f);
  t.AddRebuilt(p_hat, mean_msg, 1.0, once);
  for (size_t i = 0; i < t.dim(); ++i) {
    EXPECT_NEAR(once[i], rebuilt_mean[i], 1e-6) << i;
    EXPECT_NEAR(once[i], expected_mean[i], 1e-5) << i;
  }
}

TEST(PowerSgdTwoPhase, TheResidualKeepsExactlyWhatWasNotSentAndTheQueryWarmStarts) {
  const PowerSgdTwoPhase t = Make();
  // A full-rank update: rank 2 keeps part of each matrix; M - sent is the residual.
  const std::vector<float> m = Gaussian(t.dim(), 9, 0.01);
  const std::vector<float> p_hat = t.Orthonormalize(t.Project(m, t.DrawQuery(1)));
  const std::vector<float> msg = t.Message(m, p_hat);
  std::vector<float> sent(t.dim(), 0.0f);
  t.AddRebuilt(p_hat, msg, 1.0, sent);
  double residual2 = 0, sent2 = 0, total2 = 0;
  for (size_t i = 0; i < t.dim(); ++i) {
    const double e = double(m[i]) - sent[i];
    residual2 += e * e;
    sent2 += double(sent[i]) * sent[i];
    total2 += double(m[i]) * m[i];
  }
  // An orthogonal projection: |M|^2 = |sent|^2 + |residual|^2, and part is left behind.
  EXPECT_NEAR(sent2 + residual2, total2, 1e-6 * total2);
  EXPECT_GT(residual2, 0.1 * total2);
  // Dense tensors go whole: nothing of them is left.
  for (const PowerSgd::Block& b : t.blocks()) {
    if (b.rank != 0) continue;
    for (uint64_t i = b.offset; i < b.offset + b.size; ++i) EXPECT_EQ(sent[i], m[i]);
  }
  // The next query is the message's Q part; a zero column is drawn afresh.
  std::vector<float> next = t.NextQuery(msg, 5);
  EXPECT_TRUE(std::equal(next.begin(), next.end(), msg.begin()));
  std::vector<float> zero_column = msg;
  for (uint64_t j = 0; j < 30; ++j) zero_column[j * 2 + 1] = 0;  // w's second column
  next = t.NextQuery(zero_column, 5);
  double col = 0;
  for (uint64_t j = 0; j < 30; ++j) col += std::fabs(next[j * 2 + 1]);
  EXPECT_GT(col, 1.0);
  for (uint64_t j = 0; j < 30; ++j) EXPECT_EQ(next[j * 2], msg[j * 2]);
  // Gaussian queries are the seed's.
  EXPECT_EQ(t.DrawQuery(3), t.DrawQuery(3));
  EXPECT_NE(t.DrawQuery(3), t.DrawQuery(4));
}

// A P^ column that Gram-Schmidt zeroed rebuilds nothing from its Q column: a message that
// puts mass there (a lying client inflating its norm, and so the clip bound) loses it.
TEST(PowerSgdTwoPhase, DeadColumnsAreDroppedSoAMessagesNormIsItsUpdates) {
  const PowerSgdTwoPhase t = Make();
  // Updates whose matrices are rank 1: the second column of P^ is zero.
  std::vector<float> m(t.dim(), 0.0f);
  for (const PowerSgd::Block& b : t.blocks()) {
    for (uint64_t i = 0; i < b.size; ++i) {
      m[b.offset + i] = b.rank ? 0.01f * float(i / b.cols + 1) * float(i % b.cols + 1) : 0.5f;
    }
  }
  const std::vector<float> p_hat = t.Orthonormalize(t.Project(m, t.DrawQuery(8)));
  std::vector<float> msg = t.Message(m, p_hat);
  std::vector<float> lie = msg;
  for (size_t i = 1; i < 60; i += 2) lie[i] = 1e3f;  // w's second Q column
  std::vector<float> honest(t.dim(), 0.0f), lied(t.dim(), 0.0f);
  t.AddRebuilt(p_hat, msg, 1.0, honest);
  t.AddRebuilt(p_hat, lie, 1.0, lied);
  EXPECT_EQ(honest, lied);  // the column rebuilds to nothing
  EXPECT_GT(Norm(lie), 100 * Norm(honest));
  t.DropDeadColumns(p_hat, lie);
  EXPECT_NEAR(Norm(lie), Norm(honest), 1e-5 * Norm(honest));
  t.DropDeadColumns(p_hat, msg);  // an honest message keeps everything
  EXPECT_NEAR(Norm(msg), Norm(honest), 1e-5 * Norm(honest));
}

TEST(PowerSgdTwoPhase, HostilePayloadBodiesAreRefused) {
  const PowerSgdTwoPhase t = Make();
  const std::vector<float> v = Gaussian(t.message_floats(), 3);
  const uint32_t tag = PowerSgdTwoPhase::Tag(v);
  const std::string frame = t.Frame(kPowerSgdMessageSpec, tag, v);
  auto view = ParseFrame(frame, FrameLimits()).value();
  EXPECT_EQ(view.spec, kPowerSgdMessageSpec);
  EXPECT_EQ(view.dim, t.dim());
  auto back = PowerSgdTwoPhase::ReadBody(view.body, tag, t.message_floats());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, v);
  // Made against another factor.
  EXPECT_EQ(
      InputErrorOf(PowerSgdTwoPhase::ReadBody(view.body, tag + 1, t.message_floats()).status()),
      InputError::kWrongCodec);
  // Short, long and empty bodies.
  std::vector<uint8_t> body(view.body.begin(), view.body.end());
  EXPECT_EQ(
      InputErrorOf(PowerSgdTwoPhase::ReadBody(std::span<const uint8_t>(body).first(body.size() - 4),
                                              tag, t.message_floats())
                       .status()),
      InputError::kMalformed);
  body.push_back(0);
  EXPECT_TRUE(
      FailsWith(PowerSgdTwoPhase::ReadBody(body, tag, t.message_floats()), InputError::kMalformed));
  EXPECT_TRUE(
      FailsWith(PowerSgdTwoPhase::ReadBody({}, tag, t.message_floats()), InputError::kMalformed));
  body.pop_back();
  // NaN, infinity and a finite value too large to sum safely.
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 1e31f}) {
    std::vector<uint8_t> b = body;
    std::memcpy(b.data() + 4 + 4 * 7, &bad, 4);
    const absl::Status st = PowerSgdTwoPhase::ReadBody(b, tag, t.message_floats()).status();
    EXPECT_EQ(InputErrorOf(st), InputError::kNonFinite) << bad << ": " << st;
  }
}

}  // namespace
}  // namespace fedlgc::codecs
