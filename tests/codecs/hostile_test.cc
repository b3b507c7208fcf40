// Hostile input: every decoder rejects truncated, corrupted, wrong-version, out-of-range,
// non-finite and oversized payloads with the status code and input-error kind a receiver
// counts them by (DATA_LOSS: checksum, OUT_OF_RANGE: range, RESOURCE_EXHAUSTED: limits,
// UNIMPLEMENTED: format version, INVALID_ARGUMENT tagged malformed, non-finite or wrong
// codec), and never crashes or touches memory outside its buffers (the ASan+UBSan run of this test
// in .ci/run proves the latter). The mutation test is the seeded random-bytes fuzzer that runs in
// ctest; libFuzzer targets over the same decoders live in tests/codecs/fuzz/.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codecs/frame.h"
#include "codecs/input_error.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using testing::BodyOffset;
using testing::FixCrc;

// INVALID_ARGUMENT with the kind `kind`.
::testing::AssertionResult Invalid(const absl::Status& st, InputError kind) {
  if (absl::IsInvalidArgument(st) && InputErrorOf(st) == kind) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << st;
}
::testing::AssertionResult Malformed(const absl::Status& st) {
  return Invalid(st, InputError::kMalformed);
}

constexpr size_t kN = 700;

// Over the registry's examples that need no model layout (PowerSGD's and GradiVeQ's decoders
// have hostile tests of their own, over their layouts).
class Hostile : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    codec_ = testing::Make(GetParam());
    ASSERT_NE(codec_, nullptr);
    x_ = testing::GradientLike(kN, 17);
    std::vector<Frame> frames;
    testing::RoundTrip(*codec_, x_, 3, 0, &frames);
    ASSERT_EQ(frames.size(), 1u);
    frame_ = frames[0].bytes;
  }
  absl::Status Decode(const std::string& bytes, FrameLimits limits = {}) {
    out_.assign(kN, 0.0f);
    absl::Status st = DecodeFrameInto(*codec_, bytes, limits, out_);
    if (st.ok()) {
      for (float v : out_) EXPECT_TRUE(std::isfinite(v)) << "accepted frame decoded to " << v;
    }
    return st;
  }

  std::unique_ptr<Codec> codec_;
  std::vector<float> x_;
  std::string frame_;
  std::vector<float> out_;
};

TEST_P(Hostile, AcceptsTheUntouchedFrame) { EXPECT_TRUE(Decode(frame_).ok()); }

TEST_P(Hostile, RejectsEveryTruncationAndExtension) {
  for (size_t len = 0; len < frame_.size(); ++len) {
    EXPECT_TRUE(Malformed(Decode(frame_.substr(0, len)))) << "prefix " << len;
  }
  EXPECT_TRUE(Malformed(Decode(frame_ + '\0')));
}

TEST_P(Hostile, RejectsCorruptionThroughTheChecksum) {
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    std::string f = frame_;
    const size_t pos = rng() % f.size();
    f[pos] ^= static_cast<char>(1 + rng() % 255);
    const absl::Status st = Decode(f);
    // Past the header only the checksum can tell; in the header a field may disagree first.
    if (pos >= BodyOffset(frame_)) {
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << "byte " << pos << ": " << st;
    } else {
      EXPECT_TRUE(st.code() == absl::StatusCode::kDataLoss || Malformed(st) ||
                  st.code() == absl::StatusCode::kUnimplemented ||
                  st.code() == absl::StatusCode::kResourceExhausted ||
                  st.code() == absl::StatusCode::kOutOfRange)
          << "byte " << pos << ": " << st;
    }
  }
  std::string f = frame_;
  f[BodyOffset(f)] ^= 1;
  EXPECT_EQ(Decode(f).code(), absl::StatusCode::kDataLoss);
}

TEST_P(Hostile, RejectsOtherVersionsAndCodecs) {
  // Codec wire version 2 (header edited, checksum fixed): refused, not misread.
  std::string f = frame_;
  const size_t slash = f.find("/1");
  ASSERT_NE(slash, std::string::npos);
  f[slash + 1] = '2';
  FixCrc(&f);
  EXPECT_TRUE(Invalid(Decode(f), InputError::kWrongCodec));
  uint16_t spec_len;
  std::memcpy(&spec_len, f.data() + 6, 2);
  auto rebuilt = MakeCodec(std::string_view(f.data() + 8, spec_len));
  EXPECT_EQ(rebuilt.status().code(), absl::StatusCode::kUnimplemented);
  // Frame format version 2.
  f = frame_;
  f[4] = 2;
  FixCrc(&f);
  EXPECT_EQ(Decode(f).code(), absl::StatusCode::kUnimplemented);
  // Bad magic.
  f = frame_;
  f[0] = 'X';
  FixCrc(&f);
  EXPECT_TRUE(Malformed(Decode(f)));
}

TEST_P(Hostile, RejectsRangesOutsideTheVectorAndOversizedFrames) {
  const size_t spec_len = frame_.size() - 40 - (frame_.size() - BodyOffset(frame_) - 4);
  const size_t dim_at = 8 + spec_len;
  auto with_u64 = [&](size_t at, uint64_t v) {
    std::string f = frame_;
    std::memcpy(f.data() + at, &v, 8);
    FixCrc(&f);
    return f;
  };
  using C = absl::StatusCode;
  EXPECT_EQ(Decode(with_u64(dim_at, kN + 1)).code(), C::kOutOfRange);  // another vector size
  EXPECT_EQ(Decode(with_u64(dim_at + 8, 5)).code(), C::kOutOfRange);   // begin: range overflows
  EXPECT_EQ(Decode(with_u64(dim_at + 16, kN + 1)).code(), C::kOutOfRange);  // length past the end
  EXPECT_TRUE(Malformed(Decode(with_u64(dim_at + 16, kN / 2))));  // length disagrees with body
  EXPECT_EQ(Decode(with_u64(dim_at + 8, ~uint64_t{0})).code(), C::kOutOfRange);  // begin wraps
  EXPECT_EQ(Decode(with_u64(dim_at, uint64_t{1} << 40)).code(),
            C::kResourceExhausted);  // > max_dim
  FrameLimits tight;
  tight.max_frame_bytes = frame_.size() - 1;
  EXPECT_EQ(Decode(frame_, tight).code(), absl::StatusCode::kResourceExhausted);
  tight = FrameLimits{};
  tight.max_dim = kN - 1;
  EXPECT_EQ(Decode(frame_, tight).code(), absl::StatusCode::kResourceExhausted);
  // A body length field that promises more than the frame holds.
  std::string f = frame_;
  uint32_t body_len;
  std::memcpy(&body_len, f.data() + BodyOffset(f) - 4, 4);
  body_len += 1000;
  std::memcpy(f.data() + BodyOffset(f) - 4, &body_len, 4);
  FixCrc(&f);
  EXPECT_TRUE(Malformed(Decode(f)));
}

TEST_P(Hostile, SurvivesRandomMutationsBehindAValidChecksum) {
  // Seeded random-bytes fuzzing that reaches past the CRC: decode must fail cleanly or
  // yield finite values, never crash.
  std::mt19937 rng(2024);
  const size_t body = BodyOffset(frame_);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string f = frame_;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = body + rng() % (f.size() - body - 4);
      switch (rng() % 3) {
        case 0:
          f[pos] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          f[pos] = static_cast<char>(rng());
          break;
        default:
          f[pos] = static_cast<char>((rng() & 1) ? 0xFF : 0x00);
          break;
      }
    }
    FixCrc(&f);
    accepted += Decode(f).ok();
  }
  SUCCEED() << accepted << " mutated frames decoded to finite values";
}

INSTANTIATE_TEST_SUITE_P(Decoders, Hostile, ::testing::ValuesIn(testing::RegistryExampleSpecs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::SpecTestName(info.param);
                         });

// Non-finite values planted in each codec's body (checksum fixed) are refused.
TEST(HostileNonFinite, EveryFormatRefusesNaNAndInfinity) {
  const auto x = testing::GradientLike(64, 1);
  struct Case {
    const char* spec;
    size_t offset;  // into the body
    std::string bytes;
  };
  auto f32 = [](float v) {
    std::string s(4, '\0');
    std::memcpy(s.data(), &v, 4);
    return s;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {"fp32", 8, f32(nan)},
      {"fp32", 0, f32(-inf)},
      {"fp16", 2, std::string("\x00\x7C", 2)},
      {"bf16", 4, std::string("\x80\x7F", 2)},
      {"qsgd(bits=4,bucket=64)", 0, f32(nan)},  // the bucket norm
      {"qsgd(bits=4,bucket=64,elias=1)", 0, f32(inf)},
      {"terngrad(bucket=64)", 0, f32(inf)},
      {"sign(bucket=64)", 0, f32(nan)},
      {"natural", 5, std::string("\xFF", 1)},     // exponent 255
      {"qsgd(bits=4,bucket=64)", 0, f32(-1.0f)},  // negative norm
  };
  for (const Case& c : cases) {
    auto codec = testing::Make(c.spec);
    std::vector<Frame> frames;
    testing::RoundTrip(*codec, x, 1, 0, &frames);
    std::string f = frames[0].bytes;
    std::memcpy(f.data() + BodyOffset(f) + c.offset, c.bytes.data(), c.bytes.size());
    FixCrc(&f);
    std::vector<float> out(64);
    EXPECT_TRUE(Invalid(DecodeFrameInto(*codec, f, FrameLimits{}, out), InputError::kNonFinite))
        << c.spec;
  }
}

TEST(HostileNonFinite, EncodersRefuseNonFiniteInput) {
  for (const std::string& spec : testing::RegistryExampleSpecs()) {
    auto codec = testing::Make(spec);
    ASSERT_NE(codec, nullptr) << spec;
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto x = testing::GradientLike(1000, 1);
      x[777] = bad;
      std::vector<Frame> frames;
      absl::Status st = codec->Encode(x, EncodeOptions{}, &frames);
      EXPECT_TRUE(testing::FailsWith(st, InputError::kNonFinite)) << spec;
      EXPECT_NE(std::string(st.message()).find("777"), std::string::npos) << st;
      EXPECT_TRUE(frames.empty());
    }
  }
}

TEST(HostileHeader, ReservedByteMustBeZero) {
  auto codec = testing::Make("fp32");
  std::vector<Frame> frames;
  testing::RoundTrip(*codec, std::vector<float>(4, 1.0f), 1, 0, &frames);
  std::string f = frames[0].bytes;
  f[5] = 1;
  FixCrc(&f);
  std::vector<float> out(4);
  EXPECT_TRUE(Malformed(DecodeFrameInto(*codec, f, FrameLimits{}, out)));
}

TEST(HostileQuantizer, PaddingBitsMustBeZero) {
  // 70 coordinates in buckets of 64: the second bucket's 6 codes of 3 bits fill 18 bits of
  // 3 bytes; the top 6 bits of the body's last byte are padding, and the encoder writes 0.
  auto codec = testing::Make("qsgd(bits=3,bucket=64)");
  std::vector<Frame> frames;
  testing::RoundTrip(*codec, testing::GradientLike(70, 3), 1, 0, &frames);
  std::vector<float> out(70);
  ASSERT_TRUE(DecodeFrameInto(*codec, frames[0].bytes, FrameLimits{}, out).ok());
  for (int bit = 2; bit < 8; ++bit) {
    std::string f = frames[0].bytes;
    f[f.size() - 5] = static_cast<char>(f[f.size() - 5] | (1 << bit));
    FixCrc(&f);
    const absl::Status st = DecodeFrameInto(*codec, f, FrameLimits{}, out);
    EXPECT_NE(std::string(st.message()).find("padding"), std::string::npos) << bit << ": " << st;
  }
}

TEST(HostileSparse, IndicesOutsideTheFrameRangeAreRefused) {
  // Shrink the frame's declared range below the indices it carries: the index code then
  // disagrees with the universe and the frame is refused.
  auto codec = testing::Make("topk(k=10)");
  std::vector<float> x(1000, 0.0f);
  for (int i = 0; i < 10; ++i) x[990 + i] = 1.0f + i;
  std::vector<Frame> frames;
  testing::RoundTrip(*codec, x, 1, 0, &frames);
  std::string f = frames[0].bytes;
  const size_t at = BodyOffset(f) - 4 - 8;  // the length field
  for (uint64_t len : {uint64_t{995}, uint64_t{500}, uint64_t{10}, uint64_t{9}}) {
    std::string g = f;
    std::memcpy(g.data() + at, &len, 8);
    FixCrc(&g);
    std::vector<float> out(1000);
    EXPECT_TRUE(Malformed(DecodeFrameInto(*codec, g, FrameLimits{}, out))) << len;
  }
  // A kept count larger than the range.
  std::string g = f;
  const uint32_t m = 5000;
  std::memcpy(g.data() + BodyOffset(g), &m, 4);
  FixCrc(&g);
  std::vector<float> out(1000);
  EXPECT_TRUE(Malformed(DecodeFrameInto(*codec, g, FrameLimits{}, out)));
}

}  // namespace
}  // namespace fedlgc::codecs
