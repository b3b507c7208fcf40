// DGC: the kept set and values against an oracle written from the definition (momentum
// correction, accumulation, top of |v|, momentum-factor masking), exact conservation of
// the momenta, the warm-up schedule, local clipping, chunking, lost frames, and the
// sender state across a restart (and refused when it belongs to another codec).
#include "codecs/dgc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

// Multiples of 2^-8 in [-1, 1]: with momentum 0.5 over at most 8 steps every product and
// sum the codec computes is exact in float, so the oracle must match bit for bit.
std::vector<float> Dyadic(size_t n, uint64_t seed) { return testing::Dyadic(n, seed, 8); }

Dgc& AsDgc(std::unique_ptr<Codec>& c) { return dynamic_cast<Dgc&>(*c); }

// The oracle: DGC from its definition, in double (exact here).
struct Oracle {
  double m;
  std::vector<double> u, v;
  // One encode keeping k coordinates of x; returns what the receiver must decode.
  std::vector<double> Step(const std::vector<float>& x, size_t k) {
    const size_t n = x.size();
    if (u.empty()) {
      u.assign(n, 0);
      v.assign(n, 0);
    }
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + x[i];
      v[i] += u[i];
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    std::vector<double> sent(n, 0);
    for (size_t j = 0; j < k; ++j) {
      const size_t i = order[j];
      sent[i] = v[i];
      v[i] = 0;
      u[i] = 0;
    }
    return sent;
  }
};

TEST(Dgc, SpecsAndWarmUpSchedule) {
  auto c = testing::Make("dgc");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->spec(), "dgc/1(ratio=0.001,momentum=0,clip=0,warmup=4,sample=0.01,values=fp32/1)");
  EXPECT_EQ(c->wire_spec(), "dgc/1(values=fp32/1)");
  EXPECT_TRUE(c->traits().stateful);
  EXPECT_FALSE(c->traits().unbiased);
  // The paper's exponential warm-up: 75%, 93.75%, 98.4375%, 99.6%, then 99.9% sparsity.
  const Dgc& d = AsDgc(c);
  const double want[] = {0.25119, 0.063096, 0.015849, 0.0039811, 0.001, 0.001};
  for (uint64_t t = 0; t < 6; ++t) EXPECT_NEAR(d.RatioAt(t), want[t], 1e-5) << t;
  EXPECT_EQ(d.KeptCount(100000, 0), 25119u);
  EXPECT_EQ(d.KeptCount(100000, 9), 100u);
  EXPECT_EQ(d.KeptCount(10, 9), 1u);  // at least one
  // The wire spec parses back into a codec that decodes these frames.
  auto w = testing::Make(c->wire_spec());
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->wire_spec(), c->wire_spec());
  // It keeps its own residual: error feedback around it is refused.
  EXPECT_TRUE(FailsWith(MakeCodec("ef(dgc(ratio=0.01))"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("dgc(values=topk(ratio=0.1))"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("dgc(momentum=1)"), StatusCode::kInvalidArgument));
}

TEST(Dgc, MatchesTheOracleAndConservesTheMomentaExactly) {
  const size_t n = 3000;
  auto c = testing::Make("dgc(ratio=0.01,momentum=0.5,warmup=3)");
  Dgc& d = AsDgc(c);
  Oracle oracle{0.5, {}, {}};
  std::vector<double> sent_sum(n, 0), momenta_sum(n, 0);
  for (uint64_t t = 0; t < 8; ++t) {
    const auto x = Dyadic(n, t);
    // The momentum the codec adds this step, before masking: 0.5 u + x.
    for (size_t i = 0; i < n; ++i) {
      momenta_sum[i] += 0.5 * (oracle.u.empty() ? 0.0 : oracle.u[i]) + x[i];
    }
    const auto want = oracle.Step(x, d.KeptCount(n, t));
    const auto got = testing::RoundTrip(*c, x, t);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << "step " << t << " coordinate " << i;
      kept += got[i] != 0;
      sent_sum[i] += got[i];
      ASSERT_EQ(d.momentum_buffer()[i], oracle.u[i]) << "momentum, step " << t << " " << i;
      ASSERT_EQ(d.residual()[i], oracle.v[i]) << "residual, step " << t << " " << i;
    }
    EXPECT_EQ(kept, d.KeptCount(n, t)) << t;
  }
  EXPECT_EQ(d.encodes(), 8u);
  // What was sent plus the residual is the sum of the momenta, bit for bit.
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sent_sum[i] + d.residual()[i], momenta_sum[i]) << i;
}

TEST(Dgc, ConservesWithQuantizedValuesUpToRounding) {
  const size_t n = 5000;
  auto c = testing::Make("dgc(ratio=0.01,momentum=0.9,values=qsgd(bits=8))");
  Dgc& d = AsDgc(c);
  std::vector<double> sent_sum(n, 0), momenta_sum(n, 0);
  for (uint64_t t = 0; t < 12; ++t) {
    const auto x = testing::GradientLike(n, t);
    std::vector<float> before(d.momentum_buffer().begin(), d.momentum_buffer().end());
    before.resize(n, 0.0f);
    for (size_t i = 0; i < n; ++i) momenta_sum[i] += 0.9f * before[i] + x[i];
    const auto y = testing::RoundTrip(*c, x, t);
    for (size_t i = 0; i < n; ++i) sent_sum[i] += y[i];
    // Momentum-factor masking: zero where something was sent.
    for (size_t i = 0; i < n; ++i) {
      if (y[i] != 0) {
        ASSERT_EQ(d.momentum_buffer()[i], 0.0f) << t << " " << i;
      }
    }
  }
  double scale = 0;
  for (double s : momenta_sum) scale = std::max(scale, std::fabs(s));
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sent_sum[i] + d.residual()[i], momenta_sum[i], 1e-5 * scale) << i;
  }
}

TEST(Dgc, ClipsTheUpdateToItsNorm) {
  const size_t n = 1000;
  auto c = testing::Make("dgc(ratio=1,momentum=0,warmup=0,clip=0.5)");
  auto x = testing::GradientLike(n, 4);
  const double norm = std::sqrt(testing::SquaredNorm(x));
  ASSERT_GT(norm, 0.5);
  auto y = testing::RoundTrip(*c, x, 1);  // ratio 1: everything goes out
  EXPECT_NEAR(std::sqrt(testing::SquaredNorm(y)), 0.5, 1e-5);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i] * 0.5 / norm, 1e-6) << i;
  // A shorter update passes unchanged.
  for (float& v : x) v = static_cast<float>(v * 0.25 / norm);
  y = testing::RoundTrip(*c, x, 2);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i]) << i;
}

TEST(Dgc, ChunkedFramesDecodeLikeTheWholeAndLostOnesGoBack) {
  const size_t n = 20000;
  auto whole = testing::Make("dgc(ratio=0.05,warmup=0)");
  auto chunked = testing::Make("dgc(ratio=0.05,warmup=0)");
  const auto x = testing::GradientLike(n, 9);
  const auto y = testing::RoundTrip(*whole, x, 3);
  std::vector<Frame> frames;
  EncodeOptions opts;
  opts.seed = 3;
  opts.max_frame_bytes = 700;
  ASSERT_TRUE(chunked->Encode(x, opts, &frames).ok());
  ASSERT_GT(frames.size(), 4u);
  std::vector<float> joined(n, 0.0f);
  uint64_t next = 0;
  for (const Frame& f : frames) {
    EXPECT_LE(f.bytes.size(), 700u);
    EXPECT_EQ(f.begin, next);
    next = f.begin + f.length;
    ASSERT_TRUE(DecodeFrameInto(*chunked, f.bytes, FrameLimits{}, joined).ok());
  }
  EXPECT_EQ(next, n);
  EXPECT_EQ(joined, y);
  // Frames the receiver did not count go back into the residual: v returns to what it
  // was before masking for those coordinates.
  Dgc& d = AsDgc(chunked);
  std::vector<float> before(d.residual().begin(), d.residual().end());
  ASSERT_TRUE(d.Restore(frames[1].bytes).ok());
  for (uint64_t i = frames[1].begin; i < frames[1].begin + frames[1].length; ++i) {
    ASSERT_EQ(d.residual()[i], before[i] + joined[i]) << i;
  }
  // A frame of another codec comes back through RestoreAny, not Restore.
  auto other = testing::Make("topk(ratio=0.1)");
  std::vector<Frame> of;
  testing::RoundTrip(*other, x, 1, 0, &of);
  EXPECT_TRUE(FailsWith(d.Restore(of[0].bytes), InputError::kMalformed));
  EXPECT_TRUE(d.RestoreAny(of[0].bytes).ok());
}

TEST(Dgc, SenderStateSurvivesARestartAndIsRefusedElsewhere) {
  const size_t n = 4000;
  const std::string spec = "dgc(ratio=0.01,momentum=0.9,warmup=3)";
  auto a = testing::Make(spec);
  for (uint64_t t = 0; t < 2; ++t) testing::RoundTrip(*a, testing::GradientLike(n, t), t);
  const std::string state = AsDgc(a).SaveState();
  const std::vector<float> residual(AsDgc(a).residual().begin(), AsDgc(a).residual().end());
  // A restarted sender: same spec, residual and state; it encodes the same bytes.
  auto b = testing::Make(spec);
  AsDgc(b).SetResidual(residual);
  ASSERT_TRUE(AsDgc(b).LoadState(state).ok());
  EXPECT_EQ(AsDgc(b).encodes(), 2u);
  for (uint64_t t = 2; t < 5; ++t) {
    const auto x = testing::GradientLike(n, t);
    std::vector<Frame> fa, fb;
    testing::RoundTrip(*a, x, t, 0, &fa);
    testing::RoundTrip(*b, x, t, 0, &fb);
    ASSERT_EQ(fa.size(), fb.size());
    for (size_t i = 0; i < fa.size(); ++i) ASSERT_EQ(fa[i].bytes, fb[i].bytes) << t;
  }
  // The same state with the momentum zeroed: the next encode differs (so the state is what
  // carries the momentum; the warm-up position is the same).
  std::string zeroed = AsDgc(a).SaveState();
  std::fill(zeroed.end() - static_cast<ptrdiff_t>(n * 4), zeroed.end(), '\0');
  auto fresh = testing::Make(spec);
  AsDgc(fresh).SetResidual(AsDgc(a).residual());
  ASSERT_TRUE(AsDgc(fresh).LoadState(zeroed).ok());
  EXPECT_EQ(AsDgc(fresh).encodes(), AsDgc(a).encodes());
  std::vector<Frame> fa, ff;
  const auto x = testing::GradientLike(n, 5);
  testing::RoundTrip(*a, x, 5, 0, &fa);
  testing::RoundTrip(*fresh, x, 5, 0, &ff);
  EXPECT_NE(fa[0].bytes, ff[0].bytes);
  // Refused: another spec, another version, a cut or padded state, non-finite momentum.
  auto c = testing::Make("dgc(ratio=0.01,momentum=0.8,warmup=3)");
  EXPECT_TRUE(FailsWith(AsDgc(c).LoadState(state), InputError::kMalformed));
  std::string bad = state;
  bad[4] = 2;  // version
  EXPECT_TRUE(FailsWith(AsDgc(b).LoadState(bad), InputError::kMalformed));
  EXPECT_TRUE(
      FailsWith(AsDgc(b).LoadState(state.substr(0, state.size() - 1)), InputError::kMalformed));
  EXPECT_TRUE(FailsWith(AsDgc(b).LoadState(state + "x"), InputError::kMalformed));
  bad = state;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + bad.size() - 4, &nan, 4);
  EXPECT_TRUE(FailsWith(AsDgc(b).LoadState(bad), InputError::kMalformed));
  // A refused state leaves the codec as it was: b still matches a.
  std::vector<Frame> fb;
  const auto x6 = testing::GradientLike(n, 6);
  testing::RoundTrip(*a, x6, 6, 0, &fa);
  testing::RoundTrip(*b, testing::GradientLike(n, 5), 5, 0, &fb);
  fb.clear();
  testing::RoundTrip(*b, x6, 6, 0, &fb);
  EXPECT_EQ(fa[0].bytes, fb[0].bytes);
  // A state for another dimension than the residual is refused; an empty one resets.
  auto small = testing::Make(spec);
  AsDgc(small).SetResidual(std::vector<float>(10, 0.0f));
  EXPECT_TRUE(FailsWith(AsDgc(small).LoadState(state), InputError::kMalformed));
  ASSERT_TRUE(AsDgc(b).LoadState("").ok());
  EXPECT_EQ(AsDgc(b).encodes(), 0u);
  EXPECT_TRUE(AsDgc(b).momentum_buffer().empty());
  // Codecs without sender state accept only an empty one.
  auto ef = testing::Make("ef(topk(ratio=0.1))");
  EXPECT_TRUE(dynamic_cast<ResidualCodec&>(*ef).LoadState("").ok());
  EXPECT_TRUE(
      FailsWith(dynamic_cast<ResidualCodec&>(*ef).LoadState(state), InputError::kMalformed));
}

TEST(Dgc, NonFiniteInputChangesNothing) {
  const size_t n = 500;
  auto a = testing::Make("dgc(ratio=0.02,momentum=0.9)");
  auto b = testing::Make("dgc(ratio=0.02,momentum=0.9)");
  auto x = testing::GradientLike(n, 1);
  testing::RoundTrip(*a, x, 1);
  testing::RoundTrip(*b, x, 1);
  auto bad = x;
  bad[17] = std::nanf("");
  std::vector<Frame> frames;
  EXPECT_TRUE(FailsWith(a->Encode(bad, EncodeOptions{}, &frames), InputError::kNonFinite));
  EXPECT_TRUE(frames.empty());
  // A failed first encode leaves a fresh codec fresh (no dimension fixed).
  auto c = testing::Make("dgc(ratio=0.02,momentum=0.9)");
  EXPECT_TRUE(FailsWith(c->Encode(bad, EncodeOptions{}, &frames), InputError::kNonFinite));
  EXPECT_TRUE(AsDgc(c).residual().empty());
  EXPECT_TRUE(AsDgc(c).momentum_buffer().empty());
  // An accumulation that overflows float is refused, and changes nothing either.
  std::vector<float> huge(n, 3e38f);
  EXPECT_TRUE(c->Encode(huge, EncodeOptions{}, &frames).ok());  // v, u = 3e38 where not kept
  frames.clear();
  const std::vector<float> kept_v(AsDgc(c).residual().begin(), AsDgc(c).residual().end());
  const absl::Status overflow = c->Encode(huge, EncodeOptions{}, &frames);
  EXPECT_NE(std::string(overflow.message()).find("overflowed"), std::string::npos) << overflow;
  EXPECT_EQ(std::vector<float>(AsDgc(c).residual().begin(), AsDgc(c).residual().end()), kept_v);
  EXPECT_EQ(AsDgc(a).encodes(), 1u);
  std::vector<Frame> fa, fb;
  testing::RoundTrip(*a, x, 2, 0, &fa);
  testing::RoundTrip(*b, x, 2, 0, &fb);
  EXPECT_EQ(fa[0].bytes, fb[0].bytes);
}

}  // namespace
}  // namespace fedlgc::codecs
