// Properties every codec must have, parameterized over codec x size x seed: determinism,
// exact (or bounded) frame sizes, chunks that partition the vector, stay within their
// byte budget, decode alone, and together decode exactly like the whole encoding.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "codecs/codec.h"
#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using testing::GradientLike;
using testing::Make;
using testing::RoundTrip;

const char* const kSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "qsgd(bits=4)",
    "qsgd(bits=8,bucket=128)",
    "qsgd(bits=2,norm=linf,bucket=64)",
    "qsgd(bits=4,elias=1)",
    "qsgd(s=3,elias=1,bucket=256)",
    "nuqsgd(bits=4)",
    "nuqsgd(s=6,p=0.3)",
    "natdither(s=8,norm=linf)",
    "terngrad(bucket=256)",
    "terngrad(bucket=64,clip=0)",
    "natural",
    "sign",
    "sign(scale=none,bucket=64)",
    "topk(ratio=0.01)",
    "topk(ratio=0.05,values=qsgd(bits=8,bucket=64))",
    "topk(k=300,values=natural,sampled=1)",
    "topk(ratio=0.2,values=fp16,sampled=1)",
    "topk(ratio=0.05,values=natdither(s=6,bucket=16))",
    "randk(ratio=0.02,values=qsgd(bits=4,bucket=32))",
    "randk(k=50)",
    "randk(ratio=0.05,values=qsgd(bits=4,bucket=16),seed=99)",
    "zstd(qsgd(bits=4,norm=linf))",
    "zstd(topk(ratio=0.05,values=qsgd(bits=8,bucket=64)),level=1)",
    "zstd(fp32)",
    "adacomp(bin=50)",
    "adacomp(bin=7)",
    "alq(bits=3)",
    "amq(bits=4,bucket=128,elias=1)",
    "topk(ratio=0.05,values=alq(bits=3,bucket=16))",
};

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

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, CodecProperty,
    ::testing::Combine(::testing::ValuesIn(std::vector<std::string>(std::begin(kSpecs),
                                                                    std::end(kSpecs))),
                       ::testing::Values(size_t{1}, size_t{1000}, size_t{70001}),
                       ::testing::Values(uint64_t{1}, uint64_t{99})),
    [](const ::testing::TestParamInfo<Param>& info) {
      std::string name = std::get<0>(info.param);
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name + "_n" + std::to_string(std::get<1>(info.param)) + "_s" +
             std::to_string(std::get<2>(info.param));
    });

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
