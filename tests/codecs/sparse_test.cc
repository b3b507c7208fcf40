// Top-k, sampled top-k, random-k and Elias-Fano index coding.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "codecs/elias_fano.h"
#include "codecs/frame.h"
#include "codecs/round_kind.h"
#include "codecs/sparse_codec.h"
#include "codecs/topk.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

class TopKContraction : public ::testing::TestWithParam<std::tuple<double, size_t, uint64_t>> {};

TEST_P(TopKContraction, ResidualShrinksByAtLeastKOverD) {
  const auto [ratio, d, seed] = GetParam();
  auto codec = testing::Make("topk(ratio=" + std::to_string(ratio) + ")");
  const auto x = testing::GradientLike(d, seed);
  const auto y = testing::RoundTrip(*codec, x, seed);
  const double k = static_cast<double>(dynamic_cast<SparseCodec&>(*codec).KeptCount(d));
  double resid = 0;
  size_t nnz = 0;
  for (size_t i = 0; i < d; ++i) {
    resid += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    nnz += y[i] != 0;
    if (y[i] != 0) {
      EXPECT_EQ(y[i], x[i]);  // fp32 values are exact
    }
  }
  EXPECT_EQ(nnz, static_cast<size_t>(k));
  EXPECT_LE(resid, (1.0 - k / d) * testing::SquaredNorm(x));
}

INSTANTIATE_TEST_SUITE_P(Ratios, TopKContraction,
                         ::testing::Combine(::testing::Values(0.001, 0.01, 0.1, 0.5),
                                            ::testing::Values(size_t{5000}, size_t{123457}),
                                            ::testing::Values(uint64_t{1}, uint64_t{2})));

TEST(TopK, KeepsTheLargestMagnitudes) {
  std::vector<float> x = {0.1f, -5, 3, 0, -0.2f, 4, 3};
  std::vector<uint32_t> idx;
  TopKExact(x, 3, &idx);
  EXPECT_EQ(idx, (std::vector<uint32_t>{1, 2, 5}));  // |3| tie: lower index wins
  TopKSampled(x, 3, 0.5, 1, &idx);
  EXPECT_EQ(idx, (std::vector<uint32_t>{1, 2, 5}));
}

TEST(TopK, SampledSelectsTheExactSetWithinTwoPercent) {
  for (uint64_t seed : {1, 2, 3}) {
    for (double ratio : {0.001, 0.01, 0.05}) {
      const auto x = testing::GradientLike(1 << 20, seed);
      const size_t k = static_cast<size_t>(ratio * x.size());
      std::vector<uint32_t> exact, sampled;
      TopKExact(x, k, &exact);
      int passes = 0;
      TopKSampled(x, k, 0.01, seed, &sampled, &passes);
      EXPECT_GE(sampled.size(), k * 0.98);
      EXPECT_LE(sampled.size(), k * 1.02);
      EXPECT_EQ(sampled, exact);
      EXPECT_EQ(passes, 1) << "the sampled threshold should need one pass";
    }
  }
}

TEST(TopK, SampledHandlesFlatAndSparseInputs) {
  std::vector<float> flat(10000, 1.0f);
  std::vector<uint32_t> a, b;
  TopKExact(flat, 100, &a);
  TopKSampled(flat, 100, 0.01, 1, &b);
  EXPECT_EQ(a, b);
  std::vector<float> sparse(100000, 0.0f);
  for (int i = 0; i < 50; ++i) sparse[i * 1999] = static_cast<float>(i + 1);
  TopKExact(sparse, 500, &a);
  TopKSampled(sparse, 500, 0.01, 1, &b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.size(), 500u);
}

TEST(RandomK, UniformDistinctSorted) {
  const size_t d = 200, k = 20;
  std::vector<int> hits(d, 0);
  constexpr int kTrials = 20000;
  std::vector<uint32_t> idx;
  for (int t = 0; t < kTrials; ++t) {
    RandomK(d, k, t, &idx);
    ASSERT_EQ(idx.size(), k);
    for (size_t j = 1; j < k; ++j) ASSERT_LT(idx[j - 1], idx[j]);
    for (uint32_t i : idx) ++hits[i];
  }
  // Each index is kept with probability k/d = 0.1: expected 2000 +- 42 (sd).
  for (int h : hits) EXPECT_NEAR(h, 2000, 6 * 42.4);
}

// rand-k with a shared seed: senders with different seeds keep the same set, drawn from
// S; frames carry only the values (exactly the index bytes fewer than per-sender rand-k);
// chunks and cuts decode like the whole; the plan's seed=round encodes nothing.
TEST(RandomK, ASharedSeedKeepsOneSetAndSendsNoIndices) {
  const uint64_t n = 5000;
  const auto x = testing::GradientLike(n, 21);
  auto shared = testing::Make("randk(ratio=0.02,seed=777)");
  auto own = testing::Make("randk(ratio=0.02)");
  EXPECT_EQ(shared->spec(), "randk/1(ratio=0.02,values=fp32/1,scale=1,seed=777)");
  EXPECT_FALSE(shared->traits().summable) << "no layout: no dimension for the code";
  std::vector<Frame> a, b, c;
  const auto ya = testing::RoundTrip(*shared, x, 1, 0, &a);
  const auto yb = testing::RoundTrip(*shared, x, 2, 0, &b);
  const auto yc = testing::RoundTrip(*own, x, 1, 0, &c);
  EXPECT_EQ(ya, yb) << "the senders' own seeds do not matter";
  std::vector<uint32_t> set;
  RandomK(n, 100, 777, &set);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += ya[i] != 0;
  ASSERT_EQ(nonzero, 100u);
  for (uint32_t i : set) EXPECT_EQ(ya[i], x[i] * 50.0f);  // scale=1: n/k
  // The same frame as per-sender rand-k less its count and Elias-Fano indices, and
  // another spec.
  const int64_t spec_delta =
      static_cast<int64_t>(shared->spec().size()) - static_cast<int64_t>(own->spec().size());
  EXPECT_EQ(static_cast<int64_t>(a[0].bytes.size()),
            static_cast<int64_t>(c[0].bytes.size()) - 4 -
                static_cast<int64_t>(EliasFanoBytes(100, n)) + spec_delta);
  EXPECT_EQ(a[0].bytes.size(), FrameOverhead(shared->spec().size()) + 400);
  // Chunked and cut, the same values.
  std::vector<Frame> chunks;
  EncodeOptions opts;
  opts.seed = 3;
  opts.max_frame_bytes = FrameOverhead(shared->spec().size()) + 64;
  const std::vector<uint64_t> cuts{1000, 1001, 4000};
  opts.cuts = cuts;
  ASSERT_TRUE(shared->Encode(x, opts, &chunks).ok());
  EXPECT_GT(chunks.size(), 6u);
  std::vector<float> y(n, -1.0f);
  ASSERT_TRUE(DecodeAll(*shared, chunks, y).ok());
  EXPECT_EQ(y, ya);
  // The plan's form names no seed: it encodes nothing.
  auto plan = testing::Make("randk(ratio=0.02,seed=round)");
  EXPECT_EQ(plan->spec(), "randk/1(ratio=0.02,values=fp32/1,scale=1,seed=round)");
  std::vector<Frame> none;
  EXPECT_TRUE(absl::IsFailedPrecondition(plan->Encode(x, {}, &none)));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(RoundKindOf(plan->spec()).round_seed, Placement::kTop);
  EXPECT_FALSE(Present(RoundKindOf(shared->spec()).round_seed));
  EXPECT_EQ(WithRoundSeed("ef/1(randk/1(k=5,values=fp32/1,scale=0,seed=round))", 42),
            "ef/1(randk/1(k=5,values=fp32/1,scale=0,seed=42))");
  for (const char* bad : {"randk(seed=0)", "randk(seed=-3)", "randk(seed=1.5)",
                          "randk(seed=4503599627370496)", "randk(seed=fixed)"}) {
    EXPECT_TRUE(FailsWith(MakeCodec(bad), StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_TRUE(MakeCodec("randk(seed=4503599627370495)").ok());
}

// With the model's layout it is a LinearCode: the code is the kept values in index order;
// a frame's code starts at the rank of its first kept index; codes of senders add up.
TEST(RandomK, SharedSeedCodesAddUp) {
  const ModelLayout layout = ModelLayout::Flat(4000);
  auto made = MakeCodec("randk(k=200,values=fp32,seed=5)", &layout).value();
  ASSERT_TRUE(made->traits().summable);
  const auto& code = dynamic_cast<const LinearCode&>(*made);
  ASSERT_EQ(code.code_size(), 200u);
  const auto x = testing::GradientLike(4000, 1), z = testing::GradientLike(4000, 2);
  std::vector<float> sum_code(200, 0.0f), want(4000, 0.0f);
  for (const auto* v : {&x, &z}) {
    std::vector<Frame> frames;
    const auto y =
        testing::RoundTrip(*made, *v, 9, FrameOverhead(made->spec().size()) + 100, &frames);
    ASSERT_GT(frames.size(), 5u);
    for (size_t i = 0; i < y.size(); ++i) want[i] += 3.0f * y[i];
    for (const Frame& f : frames) {
      auto view = ParseFrame(f.bytes, FrameLimits{}).value();
      std::vector<float> c;
      auto first = code.ReadCode(view, &c);
      ASSERT_TRUE(first.ok()) << first.status();
      ASSERT_LE(*first + c.size(), 200u);
      for (size_t j = 0; j < c.size(); ++j) sum_code[*first + j] += 3.0f * c[j];
    }
  }
  std::vector<float> got(4000, -1.0f);
  ASSERT_TRUE(code.DecodeCode(sum_code, got).ok());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(
      FailsWith(code.DecodeCode(std::vector<float>(199), got), StatusCode::kInvalidArgument));
  // A code value that could overflow a sum, and a frame for another dimension, are refused.
  std::vector<float> huge = x;
  std::vector<uint32_t> set;
  RandomK(4000, 200, 5, &set);
  huge[set[7]] = 3e37f;  // times n/k = 20: 6e38 overflows float; use the unscaled codec
  auto plain = MakeCodec("randk(k=200,values=fp32,scale=0,seed=5)", &layout).value();
  std::vector<Frame> frames;
  ASSERT_TRUE(plain->Encode(huge, {}, &frames).ok());
  std::vector<float> c;
  const auto view = ParseFrame(frames[0].bytes, FrameLimits{}).value();
  // Only the code: this bound comes back tagged malformed, where GradiVeQ's ReadCode tags the
  // same bound (1e30, where sums could overflow) kNonFinite.
  EXPECT_TRUE(FailsWith(dynamic_cast<const LinearCode&>(*plain).ReadCode(view, &c),
                        StatusCode::kInvalidArgument));
  auto other = MakeCodec("randk(k=200,values=fp32,scale=0,seed=5)").value();
  std::vector<Frame> small;
  ASSERT_TRUE(other->Encode(std::vector<float>(3000, 1.0f), {}, &small).ok());
  const auto small_view = ParseFrame(small[0].bytes, FrameLimits{}).value();
  EXPECT_TRUE(FailsWith(dynamic_cast<const LinearCode&>(*plain).ReadCode(small_view, &c),
                        InputError::kMalformed));
}

TEST(EliasFano, RoundTripAndSizeNearTheBound) {
  std::mt19937_64 rng(1);
  for (uint64_t u : {1ull, 7ull, 1000ull, 1ull << 20, 16000000ull}) {
    for (double frac : {0.0, 0.001, 0.01, 0.3, 1.0}) {
      const uint64_t k = std::min<uint64_t>(u, static_cast<uint64_t>(frac * u));
      std::vector<uint32_t> idx;
      RandomK(u, k, rng(), &idx);
      std::string code;
      EliasFanoEncode(idx, u, &code);
      ASSERT_EQ(code.size(), EliasFanoBytes(k, u)) << u << " " << k;
      std::vector<uint32_t> back;
      ASSERT_TRUE(
          EliasFanoDecode({reinterpret_cast<const uint8_t*>(code.data()), code.size()}, k, u, &back)
              .ok());
      EXPECT_EQ(back, idx);
      if (k >= 100 && k < u / 4) {
        // Within 2 bits per index (and 15%) of log2 C(u, k).
        const double bound = Log2Binomial(u, k);
        EXPECT_LE(code.size() * 8.0, bound + 2.0 * k + 8) << u << " " << k;
        EXPECT_LE(code.size() * 8.0, 1.15 * bound + 8) << u << " " << k;
      }
    }
  }
}

TEST(EliasFano, RejectsCorruptCodes) {
  std::vector<uint32_t> idx = {3, 9, 10, 500, 999};
  std::string code;
  EliasFanoEncode(idx, 1000, &code);
  auto as_span = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  std::vector<uint32_t> back;
  EXPECT_TRUE(FailsWith(EliasFanoDecode(as_span(code.substr(1)), 5, 1000, &back),
                        InputError::kMalformed));  // short
  // Every single-bit flip either fails or still yields valid, in-range, increasing indices.
  for (size_t bit = 0; bit < code.size() * 8; ++bit) {
    std::string c = code;
    c[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    if (EliasFanoDecode(as_span(c), 5, 1000, &back).ok()) {
      for (size_t j = 0; j < back.size(); ++j) {
        ASSERT_LT(back[j], 1000u);
        if (j) {
          ASSERT_LT(back[j - 1], back[j]);
        }
      }
    }
  }
  // Too many indices for the universe.
  EXPECT_TRUE(FailsWith(
      EliasFanoDecode(as_span(std::string(EliasFanoBytes(20, 10), '\xff')), 20, 10, &back),
      InputError::kMalformed));
}

TEST(SparseCodec, PayloadWithinFifteenPercentOfTheBound) {
  const size_t d = 1 << 20;
  const auto x = testing::GradientLike(d, 4);
  for (const char* spec :
       {"topk(ratio=0.01,values=qsgd(bits=8))", "topk(ratio=0.001)",
        "topk(ratio=0.01,values=qsgd(bits=4))", "randk(ratio=0.05,values=fp16)"}) {
    auto codec = testing::Make(spec);
    std::vector<Frame> frames;
    testing::RoundTrip(*codec, x, 1, 0, &frames);
    const auto& sc = dynamic_cast<const SparseCodec&>(*codec);
    const double body_bits =
        8.0 * (frames[0].bytes.size() - FrameOverhead(codec->wire_spec().size()));
    EXPECT_LE(body_bits, 1.15 * sc.BoundBits(d)) << spec;
  }
}

}  // namespace
}  // namespace fedlgc::codecs
