// Helpers shared by the codec tests: seeded vectors, frame surgery, decoding.
#ifndef FEDLGC_TESTS_CODECS_TEST_UTIL_H_
#define FEDLGC_TESTS_CODECS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/registry.h"
#include "gtest/gtest.h"

namespace fedlgc::codecs::testing {

// The layout of the CNN of core/model.cc (215,370 parameters).
inline ModelLayout CnnLayout() {
  return ModelLayout::Create({{"conv1.weight", {16, 1, 5, 5}},
                              {"conv1.bias", {16}},
                              {"conv2.weight", {32, 16, 5, 5}},
                              {"conv2.bias", {32}},
                              {"fc1.weight", {128, 1568}},
                              {"fc1.bias", {128}},
                              {"fc2.weight", {10, 128}},
                              {"fc2.bias", {10}}})
      .value();
}

// Gaussian vector with a few large outliers, like a gradient.
inline std::vector<float> GradientLike(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng) * 0.01f;
  for (size_t i = 0; i < n / 100; ++i) v[rng() % n] *= 30.0f;
  return v;
}

// Multiples of 2^-bits in [-1, 1]: sums and differences of a few of them are exact in float,
// so conservation laws can be checked bit for bit.
inline std::vector<float> Dyadic(size_t n, uint64_t seed, int bits) {
  std::mt19937_64 rng(seed);
  const uint64_t half = uint64_t{1} << bits;
  std::vector<float> v(n);
  for (float& x : v) {
    x = std::ldexp(static_cast<float>(static_cast<int64_t>(rng() % (2 * half + 1)) -
                                      static_cast<int64_t>(half)),
                   -bits);
  }
  return v;
}

inline std::unique_ptr<Codec> Make(const std::string& spec) {
  auto c = MakeCodec(spec);
  EXPECT_TRUE(c.ok()) << spec << ": " << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

inline std::vector<float> RoundTrip(Codec& codec, const std::vector<float>& x, uint64_t seed,
                                    uint64_t max_frame_bytes = 0,
                                    std::vector<Frame>* frames_out = nullptr) {
  std::vector<Frame> frames;
  EncodeOptions opts;
  opts.seed = seed;
  opts.max_frame_bytes = max_frame_bytes;
  absl::Status st = codec.Encode(x, opts, &frames);
  EXPECT_TRUE(st.ok()) << codec.spec() << ": " << st;
  std::vector<float> out(x.size(), -7.0f);
  st = DecodeAll(codec, frames, out);
  EXPECT_TRUE(st.ok()) << codec.spec() << ": " << st;
  if (frames_out) *frames_out = std::move(frames);
  return out;
}

// Recomputes the trailing CRC32C after a deliberate edit, so a test reaches the body checks.
inline void FixCrc(std::string* frame) {
  const uint32_t crc = Crc32c(frame->data(), frame->size() - 4);
  std::memcpy(frame->data() + frame->size() - 4, &crc, 4);
}

// Offset of the body inside a frame.
inline size_t BodyOffset(const std::string& frame) {
  uint16_t spec_len;
  std::memcpy(&spec_len, frame.data() + 6, 2);
  return FrameOverhead(spec_len) - 4;
}

inline double SquaredNorm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

}  // namespace fedlgc::codecs::testing

#endif  // FEDLGC_TESTS_CODECS_TEST_UTIL_H_
