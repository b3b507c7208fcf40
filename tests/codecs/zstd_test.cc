// zstd(...): decodes exactly what its inner codec decodes, saves bytes where the codes are
// skewed, stores what does not compress, and refuses bodies that would inflate past what
// the inner codec could have produced.
#include <zstd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "codecs/zstd_codec.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::BodyOffset;
using testing::FailsWith;
using testing::FixCrc;
using testing::GradientLike;
using testing::Make;

// Replaces a frame's body (header patched, CRC fixed).
std::string WithBody(const std::string& frame, const std::string& body) {
  const size_t off = BodyOffset(frame);
  std::string f = frame.substr(0, off) + body + "0000";
  const uint32_t len = static_cast<uint32_t>(body.size());
  std::memcpy(f.data() + off - 4, &len, 4);
  FixCrc(&f);
  return f;
}

// A body: the mode byte, then `rest`.
std::string Body(char mode, std::string rest) {
  rest.insert(rest.begin(), mode);
  return rest;
}

std::string Compress(const std::string& raw, bool with_size = true) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, with_size ? 1 : 0);
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  ZSTD_inBuffer ib{raw.data(), raw.size(), 0};
  // The streaming API leaves the content size out when asked to.
  const size_t left = ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end);
  EXPECT_EQ(left, 0u);
  ZSTD_freeCCtx(c);
  out.resize(ob.pos);
  return out;
}

TEST(Zstd, DecodesExactlyWhatTheInnerCodecDecodes) {
  for (const char* inner : {"qsgd(bits=4,norm=linf)", "qsgd(bits=8)",
                            "topk(ratio=0.05,values=qsgd(bits=8,bucket=64))", "fp32"}) {
    auto plain = Make(inner);
    auto packed = Make(std::string("zstd(") + inner + ")");
    const auto x = GradientLike(50000, 3);
    std::vector<Frame> fp, fz;
    const auto want = testing::RoundTrip(*plain, x, 9, 0, &fp);
    const auto got = testing::RoundTrip(*packed, x, 9, 0, &fz);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << inner;
    ASSERT_EQ(fp.size(), 1u);
    ASSERT_EQ(fz.size(), 1u);
    EXPECT_LE(fz[0].bytes.size(), packed->MaxFrameBytes(x.size())) << inner;
  }
}

TEST(Zstd, SkewedCodesShrinkAndIncompressibleBodiesAreStored) {
  const auto x = GradientLike(50000, 4);
  auto size_of = [&](const std::string& spec) {
    auto c = Make(spec);
    std::vector<Frame> f;
    testing::RoundTrip(*c, x, 1, 0, &f);
    return f[0].bytes.size();
  };
  // Levels of each bucket's largest magnitude: most codes are small.
  const size_t q4 = size_of("qsgd(bits=4,norm=linf)");
  const size_t z4 = size_of("zstd(qsgd(bits=4,norm=linf))");
  EXPECT_LT(z4, q4 * 9 / 10) << q4 << " -> " << z4;
  // Random bit patterns do not compress: the body goes as it is, plus the mode byte.
  std::mt19937 rng(5);
  std::vector<float> noise(50000);
  for (float& v : noise) {
    uint32_t bits = rng();
    if ((bits & 0x7F800000u) == 0x7F800000u) bits ^= 0x40000000u;  // no Inf or NaN
    std::memcpy(&v, &bits, 4);
  }
  auto fp32 = Make("fp32");
  auto zfp32 = Make("zstd(fp32)");
  const size_t extra = zfp32->wire_spec().size() - fp32->wire_spec().size() + 1;
  std::vector<Frame> f, plain;
  testing::RoundTrip(*zfp32, noise, 1, 0, &f);
  testing::RoundTrip(*fp32, noise, 1, 0, &plain);
  EXPECT_EQ(f[0].bytes.size(), plain[0].bytes.size() + extra);
  EXPECT_EQ(static_cast<uint8_t>(f[0].bytes[BodyOffset(f[0].bytes)]), 0);  // stored
}

TEST(Zstd, SpecIsCanonicalAndRefusesStatefulOrNestedInners) {
  auto c = Make("zstd(qsgd(bits=4))");
  EXPECT_EQ(c->spec(), "zstd/1(qsgd/1(bits=4,bucket=512,norm=l2,elias=0),level=3)");
  EXPECT_EQ(c->wire_spec(), c->spec());
  EXPECT_TRUE(c->traits().unbiased);
  EXPECT_FALSE(c->traits().fixed_size);
  EXPECT_EQ(c->traits().block, 512u);
  // Error feedback goes around: its frames carry the zstd spec.
  auto ef = Make("ef(zstd(topk(ratio=0.01),level=1))");
  EXPECT_EQ(ef->wire_spec(), "zstd/1(topk/1(ratio=0.01,values=fp32/1,sampled=0),level=1)");
  for (const char* bad :
       {"zstd(ef(topk(ratio=0.01)))", "zstd(zstd(fp32))", "zstd", "zstd(fp32,level=0)",
        "zstd(fp32,level=20)", "zstd(fp32,fast=1)"}) {
    EXPECT_TRUE(FailsWith(MakeCodec(bad), StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(Zstd, ChunksStayWithinTheirBudget) {
  auto c = Make("zstd(qsgd(bits=4,norm=linf,bucket=64))");
  const auto x = GradientLike(20000, 5);
  EncodeOptions opts;
  opts.seed = 2;
  opts.max_frame_bytes = 2000;
  std::vector<Frame> frames;
  ASSERT_TRUE(c->Encode(x, opts, &frames).ok());
  ASSERT_GT(frames.size(), 5u);
  for (const Frame& f : frames) EXPECT_LE(f.bytes.size(), 2000u);
  std::vector<float> out(x.size());
  ASSERT_TRUE(DecodeAll(*c, frames, out).ok());
  opts.max_frame_bytes = c->wire_spec().size() - 5;  // not even the extra bytes fit
  frames.clear();
  EXPECT_EQ(c->Encode(x, opts, &frames).code(), absl::StatusCode::kInvalidArgument);
}

class ZstdHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    codec_ = Make("zstd(qsgd(bits=4,bucket=64))");
    testing::RoundTrip(*codec_, GradientLike(1024, 1), 1, 0, &frames_);
    ASSERT_EQ(frames_.size(), 1u);
  }
  absl::Status DecodeBody(const std::string& body) {
    std::vector<float> out(1024);
    return DecodeFrameInto(*codec_, WithBody(frames_[0].bytes, body), FrameLimits{}, out);
  }
  static bool Malformed(const absl::Status& st) {
    return st.code() == absl::StatusCode::kInvalidArgument &&
           InputErrorOf(st) == InputError::kMalformed;
  }

  std::unique_ptr<Codec> codec_;
  std::vector<Frame> frames_;
};

TEST_F(ZstdHostile, RefusesAnInflationPastTheInnerCodecsLargestBody) {
  // 64 MiB of zeros compress to a few KiB; a 1024-coordinate 4-bit body is under 1 KiB.
  const std::string bomb = Compress(std::string(64 << 20, '\0'));
  ASSERT_LT(bomb.size(), 8192u);
  const absl::Status st = DecodeBody(Body(1, bomb));
  EXPECT_TRUE(Malformed(st)) << st;
  EXPECT_NE(std::string(st.message()).find("inflates to 67108864 bytes"), std::string::npos) << st;
}

TEST_F(ZstdHostile, RefusesUnknownModesMissingSizesTrailingBytesAndGarbage) {
  const size_t off = BodyOffset(frames_[0].bytes);
  const std::string body = frames_[0].bytes.substr(off, frames_[0].bytes.size() - off - 4);
  ASSERT_EQ(body[0], '\1');  // this one compressed
  ASSERT_TRUE(DecodeBody(body).ok());
  EXPECT_TRUE(Malformed(DecodeBody("")));
  EXPECT_TRUE(Malformed(DecodeBody(Body(2, body.substr(1)))));
  EXPECT_TRUE(Malformed(DecodeBody(Body(body[0], body.substr(1) + "x"))));
  EXPECT_TRUE(Malformed(DecodeBody(body + body.substr(1))));  // two zstd frames
  EXPECT_TRUE(Malformed(DecodeBody(body.substr(0, body.size() - 3))));
  EXPECT_TRUE(Malformed(DecodeBody(std::string("\1garbage garbage", 16))));
  // A skippable frame (magic 0x184D2A50, 4-byte length, then nothing) declares no content.
  EXPECT_TRUE(Malformed(DecodeBody(Body(1, std::string("\x50\x2a\x4d\x18\0\0\0\0", 8)))));
  // A zstd frame without its content size could not be bounded before inflating it.
  std::vector<float> out(1024);
  std::string inner_body;
  {
    auto plain = Make("qsgd(bits=4,bucket=64)");
    std::vector<Frame> f;
    testing::RoundTrip(*plain, GradientLike(1024, 1), 1, 0, &f);
    const size_t o = BodyOffset(f[0].bytes);
    inner_body = f[0].bytes.substr(o, f[0].bytes.size() - o - 4);
  }
  EXPECT_TRUE(DecodeBody(Body(1, Compress(inner_body, true))).ok());
  EXPECT_TRUE(Malformed(DecodeBody(Body(1, Compress(inner_body, false)))));
  // A stored body goes to the inner codec, which refuses a short one.
  EXPECT_TRUE(FailsWith(DecodeBody(Body(0, inner_body.substr(0, 10))), InputError::kMalformed));
  EXPECT_TRUE(DecodeBody(Body(0, inner_body)).ok());
}

}  // namespace
}  // namespace fedlgc::codecs
