// Helpers shared by the codec tests: seeded vectors, frame surgery, decoding.
#ifndef FEDLGC_TESTS_CODECS_TEST_UTIL_H_
#define FEDLGC_TESTS_CODECS_TEST_UTIL_H_

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/crc32c.h"
#include "base/spec.h"
#include "codecs/codec.h"
#include "codecs/input_error.h"
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

// The layout that examples needing one (CodecEntry::needs_layout) are built with: a 40 x 21
// matrix that PowerSGD factors and GradiVeQ slices (840 = 105 slices of 8), a bias, a
// 3 x 4 matrix too small for either, and a scalar.
inline const ModelLayout& ExampleLayout() {
  static const ModelLayout* const kLayout = new ModelLayout(
      ModelLayout::Create({{"w", {40, 21}}, {"b", {40}}, {"m", {3, 4}}, {"s", {}}}).value());
  return *kLayout;
}

// One example spec of a registered codec (CodecEntry::examples).
struct Example {
  std::string codec;  // the entry that gives it
  std::string spec;
  bool needs_layout = false;  // it is or nests a codec that needs the model's layout
};

inline bool NestsLayoutCodec(const SpecNode& node) {
  for (const CodecEntry* e : DefaultRegistry().List()) {
    if (e->name == node.name && e->needs_layout) return true;
  }
  for (const SpecArg& a : node.args) {
    if (a.node != nullptr && NestsLayoutCodec(*a.node)) return true;
  }
  return false;
}

// Every example of every codec in DefaultRegistry(): the shared suites run these rather
// than lists of their own, so a new codec is covered once it brings examples.
inline std::vector<Example> RegistryExamples() {
  std::vector<Example> out;
  for (const CodecEntry* e : DefaultRegistry().List()) {
    for (const std::string& spec : e->examples) {
      auto node = ParseSpec(spec);
      out.push_back({e->name, spec, node.ok() && NestsLayoutCodec(*node)});
    }
  }
  return out;
}

// Builds an example, with ExampleLayout() when it needs one.
inline absl::StatusOr<std::unique_ptr<Codec>> MakeExample(const Example& example) {
  return MakeCodec(example.spec, example.needs_layout ? &ExampleLayout() : nullptr);
}

// The specs of the examples that work on vectors of any size (no layout) and whose codec
// passes `keep` (all when null). One that does not build is kept, so the suite fails on it.
inline std::vector<std::string> RegistryExampleSpecs(
    const std::function<bool(const Codec&)>& keep = nullptr) {
  std::vector<std::string> out;
  for (const Example& e : RegistryExamples()) {
    if (e.needs_layout) continue;
    auto codec = MakeExample(e);
    if (!codec.ok() || keep == nullptr || keep(**codec)) out.push_back(e.spec);
  }
  return out;
}

// A gtest parameter name for a spec: its letters and digits, '_' for the rest.
inline std::string SpecTestName(std::string spec) {
  for (char& ch : spec) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return spec;
}

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

inline const char* InputErrorName(InputError kind) {
  switch (kind) {
    case InputError::kMalformed:
      return "malformed";
    case InputError::kNonFinite:
      return "non-finite";
    case InputError::kWrongCodec:
      return "wrong codec";
  }
  return "?";
}

// Passes when `s` (a Status or StatusOr) failed with `code`:
// EXPECT_TRUE(FailsWith(ParseDelta(bytes), absl::StatusCode::kDataLoss)).
template <typename S>
::testing::AssertionResult FailsWith(const S& s, absl::StatusCode code) {
  const absl::Status& st = StatusOf(s);
  if (st.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "want " << absl::StatusCodeToString(code) << ", got " << st;
}

// Passes when `s` failed with INVALID_ARGUMENT tagged `kind` (input_error.h), the way a
// receiver counts a refused frame.
template <typename S>
::testing::AssertionResult FailsWith(const S& s, InputError kind) {
  const absl::Status& st = StatusOf(s);
  if (absl::IsInvalidArgument(st) && InputErrorOf(st) == kind) {
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  failure << "want INVALID_ARGUMENT (" << InputErrorName(kind) << "), got " << st;
  if (absl::IsInvalidArgument(st)) failure << " (" << InputErrorName(InputErrorOf(st)) << ")";
  return failure;
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
