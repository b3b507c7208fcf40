// Properties every codec must have, parameterized over the registry's examples (those that
// need no model layout) x size x seed: determinism, exact (or bounded) frame sizes, chunks
// that partition the vector, stay within their byte budget, decode alone, and together
// decode exactly like the whole encoding. Every example, layout-bound ones included, also
// round-trips on the example layout.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "codecs/codec.h"
#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using testing::GradientLike;
using testing::Make;
using testing::RoundTrip;

using Param = std::tuple<std::string, size_t, uint64_t>;

class CodecProperty : public ::testing::TestWithParam<Param> {
 protected:
  std::string spec() const { return std::get<0>(GetParam()); }
  size_t n() const { return std::get<1>(GetParam()); }
  uint64_t seed() const { return std::get<2>(GetParam()); }
};

TEST_P(CodecProperty, DeterministicForASeed) {
  auto a = Make(spec());
  auto b = Make(spec());
  const auto x = GradientLike(n(), seed());
  std::vector<Frame> fa, fb;
  RoundTrip(*a, x, seed(), 0, &fa);
  RoundTrip(*b, x, seed(), 0, &fb);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_EQ(fa[i].bytes, fb[i].bytes);
}

TEST_P(CodecProperty, FrameSizeIsExactOrBounded) {
  auto c = Make(spec());
  const auto x = GradientLike(n(), seed());
  std::vector<Frame> frames;
  RoundTrip(*c, x, seed(), 0, &frames);
  ASSERT_EQ(frames.size(), 1u);
  if (c->traits().fixed_size) {
    EXPECT_EQ(frames[0].bytes.size(), c->MaxFrameBytes(n()));
  } else {
    EXPECT_LE(frames[0].bytes.size(), c->MaxFrameBytes(n()));
  }
}

TEST_P(CodecProperty, ChunksPartitionFitAndDecodeLikeTheWhole) {
  auto c = Make(spec());
  const auto x = GradientLike(n(), seed());
  const auto whole = RoundTrip(*c, x, seed());
  const uint64_t full = c->MaxFrameBytes(n());
  for (uint64_t budget : {full / 2 + 1, full / 7 + 200, uint64_t{4096}}) {
    // A stateful codec (error feedback, DGC) encodes differently once it holds a residual:
    // compare each chunked encoding with the whole one from the same (fresh) state.
    if (c->traits().stateful) c = Make(spec());
    std::vector<Frame> frames;
    EncodeOptions opts;
    opts.seed = seed();
    opts.max_frame_bytes = budget;
    absl::Status st = c->Encode(x, opts, &frames);
    if (!st.ok()) {
      // Only acceptable reason: one block does not fit this budget.
      EXPECT_NE(std::string(st.message()).find("too small"), std::string::npos) << st;
      continue;
    }
    uint64_t next = 0;
    std::vector<float> joined(n(), 0.0f);
    for (const Frame& f : frames) {
      EXPECT_LE(f.bytes.size(), budget) << spec();
      EXPECT_EQ(f.begin, next) << "ranges must tile [0, n)";
      next = f.begin + f.length;
      // Each frame decodes alone, into its range only.
      std::vector<float> alone(n(), 123.0f);
      ASSERT_TRUE(DecodeFrameInto(*c, f.bytes, FrameLimits{}, alone).ok());
      for (size_t i = 0; i < n(); ++i) {
        if (i < f.begin || i >= f.begin + f.length) {
          ASSERT_EQ(alone[i], 123.0f);
        }
      }
      ASSERT_TRUE(DecodeFrameInto(*c, f.bytes, FrameLimits{}, joined).ok());
    }
    EXPECT_EQ(next, n());
    for (size_t i = 0; i < n(); ++i) {
      ASSERT_EQ(joined[i], whole[i]) << spec() << " budget " << budget << " coordinate " << i;
    }
  }
}

TEST_P(CodecProperty, DecodedValuesAreFiniteAndCloseForDenseCodecs) {
  auto c = Make(spec());
  const auto x = GradientLike(n(), seed());
  const auto y = RoundTrip(*c, x, seed());
  double err = 0;
  for (size_t i = 0; i < n(); ++i) {
    ASSERT_TRUE(std::isfinite(y[i]));
    err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
  }
  if (spec() == "fp32") {
    EXPECT_EQ(err, 0.0);
  }
  // Codecs with fine levels must not blow a vector up (TernGrad, sign, 2-bit QSGD and
  // scaled random-k have variance far above |x|^2 by design and are bounded elsewhere).
  for (const char* fine : {"fp", "bf16", "natural", "topk", "qsgd(bits=4", "qsgd(bits=8", "nuqsgd",
                           "natdither", "alq", "amq"}) {
    if (spec().rfind(fine, 0) == 0) {
      EXPECT_LT(err, 8 * testing::SquaredNorm(x)) << spec();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecProperty,
                         ::testing::Combine(::testing::ValuesIn(testing::RegistryExampleSpecs()),
                                            ::testing::Values(size_t{1}, size_t{1000},
                                                              size_t{70001}),
                                            ::testing::Values(uint64_t{1}, uint64_t{99})),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return testing::SpecTestName(std::get<0>(info.param)) + "_n" +
                                  std::to_string(std::get<1>(info.param)) + "_s" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Layout-bound examples (PowerSGD, GradiVeQ) see only vectors of their layout's size, so
// they run here rather than above: every example encodes and decodes to finite values.
TEST(RegistryExamples, EveryExampleRoundTripsOnTheExampleLayout) {
  const uint64_t n = testing::ExampleLayout().dim();
  const auto x = GradientLike(n, 5);
  for (const testing::Example& e : testing::RegistryExamples()) {
    auto c = testing::MakeExample(e);
    ASSERT_TRUE(c.ok()) << e.spec << ": " << c.status();
    std::vector<Frame> frames;
    const auto y = RoundTrip(**c, x, 7, 0, &frames);
    ASSERT_FALSE(frames.empty()) << e.spec;
    for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(y[i])) << e.spec << " at " << i;
  }
}

TEST(CodecSizes, ExactBytesForKnownLayouts) {
  // Frame = 40 bytes + spec + body.
  auto q = Make("qsgd(bits=4,bucket=512)");
  const uint64_t spec = q->wire_spec().size();
  EXPECT_EQ(q->MaxFrameBytes(1024), 40 + spec + 2 * 4 + 1024 / 2);
  EXPECT_EQ(q->MaxFrameBytes(1000), 40 + spec + 2 * 4 + 500);
  auto h = Make("fp16");
  EXPECT_EQ(h->MaxFrameBytes(1000), 40 + h->wire_spec().size() + 2000);
  auto nat = Make("natural");
  EXPECT_EQ(nat->MaxFrameBytes(1000), 40 + nat->wire_spec().size() + 1000 + 125);
  auto t = Make("terngrad(bucket=256)");
  EXPECT_EQ(t->MaxFrameBytes(1000), 40 + t->wire_spec().size() + 4 * 4 + 250);
  auto s = Make("sign(bucket=512)");
  EXPECT_EQ(s->MaxFrameBytes(1024), 40 + s->wire_spec().size() + 2 * 4 + 128);
  // top-k of 1% of 100000 with fp32 values: 1000 values, Elias-Fano with l = 6 low bits:
  // 1000*6 + 1000 + (99999 >> 6) = 8562 bits = 1071 bytes.
  auto k = Make("topk(ratio=0.01)");
  EXPECT_EQ(k->MaxFrameBytes(100000), 40 + k->wire_spec().size() + 4 + 1071 + 4000);
}

}  // namespace
}  // namespace fedlgc::codecs
