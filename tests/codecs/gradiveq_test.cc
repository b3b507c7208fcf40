// GradiVeQ: which tensors are sliced; the PCA fit (orthonormal columns, exact
// reconstruction in span(U), mean reconstruction error = the discarded eigenvalues);
// linearity (codes add up, one decode of the sum); the fp32 rounds without a basis; the
// basis named by the spec and refused when another; frame budgets and byte counts; hostile
// frames and bases.
#include "codecs/gradiveq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codecs/error_feedback.h"
#include "codecs/input_error.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

// A small layout: a 40 x 21 matrix (840 = 105 slices of 8), a bias, a 3 x 4 matrix too
// small to slice, and a scalar.
ModelLayout Small() {
  return ModelLayout::Create({{"w", {40, 21}}, {"b", {40}}, {"m", {3, 4}}, {"s", {}}}).value();
}

std::vector<float> Gaussian(uint64_t n, uint64_t seed, double sd = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, sd);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(normal(rng));
  return x;
}

// A vector whose slices of the sliced tensors lie in a `k`-dimensional subspace (each
// slice a random combination of k fixed directions); other coordinates Gaussian.
std::vector<float> InSubspace(const ModelLayout& layout, uint32_t slice, uint32_t k,
                              uint64_t seed) {
  std::vector<float> x = Gaussian(layout.dim(), seed);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> normal(0, 1);
  for (const SlicedTensor& t : SlicedTensors(layout, slice, 1)) {
    std::vector<double> dirs(size_t{k} * slice);
    for (double& d : dirs) d = normal(rng);
    for (uint64_t s = 0; s < t.slices; ++s) {
      for (uint32_t i = 0; i < slice; ++i) x[t.offset + s * slice + i] = 0;
      for (uint32_t a = 0; a < k; ++a) {
        const double w = normal(rng);
        for (uint32_t i = 0; i < slice; ++i) x[t.offset + s * slice + i] += w * dirs[a * slice + i];
      }
    }
  }
  return x;
}

std::shared_ptr<const SliceBasis> FitTo(const ModelLayout& layout, uint32_t slice, uint32_t dims,
                                        std::span<const float> sample, uint64_t version = 1) {
  auto b = SliceBasis::Fit(layout, slice, dims, version, sample);
  EXPECT_TRUE(b.ok()) << b.status();
  return std::make_shared<const SliceBasis>(std::move(b).value());
}

std::unique_ptr<GradiVeQ> Make(const std::string& spec, const ModelLayout& layout,
                               std::shared_ptr<const SliceBasis> basis) {
  auto c = MakeCodec(spec, &layout, std::move(basis));
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  return std::unique_ptr<GradiVeQ>(dynamic_cast<GradiVeQ*>(c->release()));
}

std::vector<float> RoundTrip(GradiVeQ& codec, std::span<const float> x, uint64_t budget = 0) {
  std::vector<Frame> frames;
  EncodeOptions opts;
  opts.max_frame_bytes = budget;
  EXPECT_TRUE(codec.Encode(x, opts, &frames).ok());
  std::vector<float> out(x.size());
  EXPECT_TRUE(DecodeAll(codec, frames, out).ok());
  return out;
}

// The whole code of x, read back from its frames.
std::vector<float> CodeOf(GradiVeQ& codec, std::span<const float> x, uint64_t budget = 0) {
  std::vector<Frame> frames;
  EncodeOptions opts;
  opts.max_frame_bytes = budget;
  EXPECT_TRUE(codec.Encode(x, opts, &frames).ok());
  std::vector<float> code(codec.code_size(), std::numeric_limits<float>::quiet_NaN());
  for (const Frame& f : frames) {
    auto view = ParseFrame(f.bytes, FrameLimits{});
    EXPECT_TRUE(view.ok());
    std::vector<float> part;
    auto at = codec.ReadCode(*view, &part);
    EXPECT_TRUE(at.ok()) << at.status();
    if (!at.ok()) continue;
    std::copy(part.begin(), part.end(), code.begin() + *at);
  }
  return code;
}

TEST(GradiVeQ, SlicesTheMatricesWithEnoughSlicesToFitAndLeavesTheRestFp32) {
  const ModelLayout cnn = testing::CnnLayout();
  const auto sliced = SlicedTensors(cnn, 64, 8);
  ASSERT_EQ(sliced.size(), 2u);
  EXPECT_EQ(cnn.tensors()[sliced[0].tensor].name, "conv2.weight");
  EXPECT_EQ(sliced[0].slices, 12800u / 64);
  EXPECT_EQ(cnn.tensors()[sliced[1].tensor].name, "fc1.weight");
  EXPECT_EQ(sliced[1].slices, 200704u / 64);
  // conv1 (400 = 6 slices) and fc2 (20 slices) have too few slices to fit 64 dimensions.
  auto sample = Gaussian(cnn.dim(), 3);
  auto codec = Make("gradiveq(dims=8,slice=64)", cnn, FitTo(cnn, 64, 8, sample));
  ASSERT_NE(codec, nullptr);
  const uint64_t sliced_coords = 12800 + 200704;
  EXPECT_EQ(codec->code_size(), cnn.dim() - sliced_coords + sliced_coords / 64 * 8);
  // One frame for the whole model: the frame's fixed bytes, the spec and the code.
  std::vector<Frame> frames;
  ASSERT_TRUE(codec->Encode(sample, {}, &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].bytes.size(), FrameOverhead(codec->spec().size()) + 4 * codec->code_size());
  EXPECT_EQ(frames[0].bytes.size(), codec->MaxFrameBytes(cnn.dim()));
  EXPECT_GT(4.0 * cnn.dim() / frames[0].bytes.size(), 6.5);
}

TEST(GradiVeQ, TheFittedBasesHaveOrthonormalColumnsAndKeepTheTopEigenvalues) {
  const ModelLayout layout = Small();
  const auto sample = Gaussian(layout.dim(), 5);
  const auto basis = FitTo(layout, 8, 3, sample);
  ASSERT_EQ(basis->tensors().size(), 1u);
  const auto u = basis->u(0);
  for (int a = 0; a < 3; ++a) {
    for (int c = 0; c < 3; ++c) {
      double dot = 0;
      for (int i = 0; i < 8; ++i) dot += double(u[i * 3 + a]) * u[i * 3 + c];
      EXPECT_NEAR(dot, a == c ? 1.0 : 0.0, 1e-6) << a << "," << c;
    }
  }
  // Mean reconstruction error over the slices = the eigenvalues left out: the share of the
  // energy it loses is 1 - kept.
  auto codec = Make("gradiveq(dims=3,slice=8)", layout, basis);
  ASSERT_NE(codec, nullptr);
  const auto back = RoundTrip(*codec, sample);
  const SlicedTensor& t = basis->tensors()[0];
  double err = 0, energy = 0;
  for (uint64_t i = t.offset; i < t.offset + t.slices * 8; ++i) {
    err += std::pow(double(back[i]) - sample[i], 2);
    energy += double(sample[i]) * sample[i];
  }
  EXPECT_NEAR(err / energy, 1.0 - basis->kept()[0], 1e-5);
  // A Gaussian sample has no preferred directions: 3 of 8 keep about 3/8 and no less.
  EXPECT_GE(basis->kept()[0], 3.0 / 8);
  EXPECT_LT(basis->kept()[0], 0.6);
  // Coordinates outside the sliced part come back bit for bit.
  for (uint64_t i = t.offset + t.slices * 8; i < layout.dim(); ++i) EXPECT_EQ(back[i], sample[i]);
  for (uint64_t i = 0; i < t.offset; ++i) EXPECT_EQ(back[i], sample[i]);
}

TEST(GradiVeQ, SlicesInTheSpanOfTheBasisComeBackExactly) {
  const ModelLayout cnn = testing::CnnLayout();
  const auto train = InSubspace(cnn, 32, 4, 11);
  const auto basis = FitTo(cnn, 32, 4, train);
  for (double kept : basis->kept()) EXPECT_GT(kept, 1 - 1e-6);
  auto codec = Make("gradiveq(dims=4,slice=32)", cnn, basis);
  ASSERT_NE(codec, nullptr);
  // Another vector of the same subspaces: new weights, same directions.
  const auto x = InSubspace(cnn, 32, 4, 11);
  const auto back = RoundTrip(*codec, x, 64 * 1024);
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(double(back[i]) - x[i]));
    norm = std::max(norm, std::abs(double(x[i])));
  }
  EXPECT_LT(err, 1e-4 * norm);
}

TEST(GradiVeQ, CodesAddUpAndTheSumDecodesOnceToTheSumOfTheDecodes) {
  const ModelLayout cnn = testing::CnnLayout();
  const auto basis = FitTo(cnn, 64, 8, Gaussian(cnn.dim(), 1));
  auto codec = Make("gradiveq(dims=8,slice=64)", cnn, basis);
  ASSERT_NE(codec, nullptr);
  const auto x = Gaussian(cnn.dim(), 2), y = Gaussian(cnn.dim(), 3, 0.5);
  std::vector<float> sum(cnn.dim());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = x[i] + 3 * y[i];
  // C(x + 3y) = C(x) + 3 C(y), with codes read from chunked frames.
  const auto cx = CodeOf(*codec, x, 16 * 1024), cy = CodeOf(*codec, y, 40 * 1024);
  const auto cs = CodeOf(*codec, sum);
  ASSERT_EQ(cx.size(), codec->code_size());
  std::vector<float> added(cx.size());
  for (size_t i = 0; i < cx.size(); ++i) {
    added[i] = cx[i] + 3 * cy[i];
    ASSERT_NEAR(added[i], cs[i], 1e-4 * (1 + std::abs(cs[i]))) << i;
  }
  // One decode of the summed code = the sum of the two decodes.
  std::vector<float> once(cnn.dim());
  ASSERT_TRUE(codec->DecodeCode(added, once).ok());
  const auto dx = RoundTrip(*codec, x), dy = RoundTrip(*codec, y);
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(once[i], dx[i] + 3 * dy[i], 1e-4 * (1 + std::abs(once[i]))) << i;
  }
  // Codes keep norms (orthonormal U): ||code|| = ||decode||.
  double code_sq = 0, dec_sq = 0;
  for (float c : cx) code_sq += double(c) * c;
  for (float d : dx) dec_sq += double(d) * d;
  EXPECT_NEAR(std::sqrt(code_sq), std::sqrt(dec_sq), 1e-4 * std::sqrt(dec_sq));
  EXPECT_TRUE(codec->traits().summable);
  EXPECT_TRUE(codec->traits().no_error_feedback);
  auto ef = MakeCodec("ef(gradiveq(dims=8,slice=64))", &cnn, basis);
  ASSERT_TRUE(ef.ok());
  EXPECT_FALSE((*ef)->traits().summable) << "ef(...) is no LinearCode";
}

TEST(GradiVeQ, WithoutABasisEverythingGoesFp32AndTheSpecNamesNone) {
  const ModelLayout layout = Small();
  auto codec = Make("gradiveq(dims=3,slice=8,refit=4)", layout, nullptr);
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->spec(), "gradiveq/1(dims=3,slice=8,refit=4,layout=" + layout.HashWord() + ")");
  EXPECT_EQ(codec->code_size(), layout.dim());
  const auto x = Gaussian(layout.dim(), 9);
  EXPECT_EQ(RoundTrip(*codec, x, 200), x);
  EXPECT_FALSE(GradiveqBasisOf(codec->spec()).has_value());
}

TEST(GradiVeQ, ASpecThatNamesABasisBuildsOnlyWithThatBasis) {
  const ModelLayout layout = Small();
  const auto a = FitTo(layout, 8, 3, Gaussian(layout.dim(), 1), 4);
  const auto b = FitTo(layout, 8, 3, Gaussian(layout.dim(), 2), 4);
  ASSERT_NE(a->word(), b->word());  // same version, other values: other hashes
  auto with_a = Make("gradiveq(dims=3,slice=8)", layout, a);
  ASSERT_NE(with_a, nullptr);
  const std::string spec = with_a->spec();
  EXPECT_NE(spec.find(",basis=" + a->word() + ")"), std::string::npos) << spec;
  const auto named = GradiveqBasisOf("ef(" + spec + ")");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->first, 4u);
  EXPECT_EQ(named->second, a->word());
  EXPECT_TRUE(absl::IsFailedPrecondition(MakeCodec(spec, &layout).status()));
  EXPECT_EQ(InputErrorOf(MakeCodec(spec, &layout, b).status()), InputError::kWrongCodec);
  EXPECT_EQ(InputErrorOf(MakeCodec("gradiveq(dims=2,slice=8)", &layout, a).status()),
            InputError::kWrongCodec);
  // A frame made against basis a is refused by a decoder holding basis b.
  auto with_b = Make("gradiveq(dims=3,slice=8)", layout, b);
  ASSERT_NE(with_b, nullptr);
  std::vector<Frame> frames;
  ASSERT_TRUE(with_a->Encode(Gaussian(layout.dim(), 3), {}, &frames).ok());
  std::vector<float> out(layout.dim());
  EXPECT_EQ(InputErrorOf(DecodeFrameInto(*with_b, frames[0].bytes, FrameLimits{}, out)),
            InputError::kWrongCodec);
  EXPECT_TRUE(DecodeFrameInto(*with_a, frames[0].bytes, FrameLimits{}, out).ok());
}

TEST(GradiVeQ, FramesCutOnSliceBoundariesWithinTheBudget) {
  const ModelLayout cnn = testing::CnnLayout();
  auto codec = Make("gradiveq(dims=8,slice=64)", cnn, FitTo(cnn, 64, 8, Gaussian(cnn.dim(), 4)));
  ASSERT_NE(codec, nullptr);
  const auto x = Gaussian(cnn.dim(), 6);
  for (uint64_t budget : {300u, 4096u, 65536u}) {
    std::vector<Frame> frames;
    EncodeOptions opts;
    opts.max_frame_bytes = budget;
    ASSERT_TRUE(codec->Encode(x, opts, &frames).ok()) << budget;
    uint64_t at = 0;
    for (const Frame& f : frames) {
      EXPECT_LE(f.bytes.size(), budget);
      EXPECT_EQ(f.begin, at);
      at += f.length;
    }
    EXPECT_EQ(at, cnn.dim());
    std::vector<float> out(cnn.dim());
    ASSERT_TRUE(DecodeAll(*codec, frames, out).ok());
    EXPECT_EQ(out, RoundTrip(*codec, x)) << budget;
  }
  std::vector<Frame> frames;
  EncodeOptions tiny;
  tiny.max_frame_bytes = FrameOverhead(codec->spec().size()) + 31;  // less than a slice's code
  EXPECT_TRUE(FailsWith(codec->Encode(x, tiny, &frames), StatusCode::kInvalidArgument));
  // P3's tensor cuts: frames end at every tensor, and decode as without cuts; a cut inside
  // a slice is the caller's error, and no frame is written.
  const std::vector<uint64_t> cuts = cnn.TensorCuts();
  EncodeOptions by_tensor;
  by_tensor.max_frame_bytes = 65536;
  by_tensor.cuts = cuts;
  ASSERT_TRUE(codec->Encode(x, by_tensor, &frames).ok());
  size_t at_cut = 0;
  for (const Frame& f : frames) {
    at_cut += std::count(cuts.begin(), cuts.end(), f.begin);
    for (uint64_t c : cuts) {
      EXPECT_FALSE(c > f.begin && c < f.begin + f.length) << "frame at " << f.begin;
    }
  }
  EXPECT_EQ(at_cut, cuts.size());
  std::vector<float> out(cnn.dim());
  ASSERT_TRUE(DecodeAll(*codec, frames, out).ok());
  EXPECT_EQ(out, RoundTrip(*codec, x));
  frames.clear();
  const std::vector<uint64_t> inside{cnn.tensors()[2].offset + 10};  // conv2.weight's slice 0
  by_tensor.cuts = inside;
  const absl::Status st = codec->Encode(x, by_tensor, &frames);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(frames.empty());
}

TEST(GradiVeQ, WithErrorFeedbackWhatTheProjectionDropsWaitsInTheResidual) {
  const ModelLayout layout = Small();
  const auto basis = FitTo(layout, 8, 2, Gaussian(layout.dim(), 1));
  auto made = MakeCodec("ef(gradiveq(dims=2,slice=8))", &layout, basis);
  ASSERT_TRUE(made.ok()) << made.status();
  auto* ef = dynamic_cast<ResidualCodec*>(made->get());
  ASSERT_NE(ef, nullptr);
  auto plain = Make("gradiveq(dims=2,slice=8)", layout, basis);
  std::vector<double> sent(layout.dim(), 0), given(layout.dim(), 0);
  for (int round = 0; round < 5; ++round) {
    const auto x = Gaussian(layout.dim(), 20 + round);
    std::vector<Frame> frames;
    ASSERT_TRUE(ef->Encode(x, {}, &frames).ok());
    std::vector<float> out(layout.dim());
    ASSERT_TRUE(DecodeAll(*plain, frames, out).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      sent[i] += out[i];
      given[i] += x[i];
    }
  }
  // Conservation: all that was given = all that was sent + what waits.
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_NEAR(sent[i] + ef->residual()[i], given[i], 1e-4) << i;
  }
}

TEST(GradiVeQ, BasesSurviveTheirBytesAndHostileBasesAreRefused) {
  const ModelLayout layout = Small();
  const auto basis = FitTo(layout, 8, 3, Gaussian(layout.dim(), 1), 7);
  auto back = SliceBasis::Parse(basis->bytes(), layout);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->word(), basis->word());
  EXPECT_EQ(back->version(), 7u);
  EXPECT_EQ(back->bytes(), basis->bytes());
  // Another layout, truncations, trailing bytes, a non-finite value, a column scaled.
  EXPECT_EQ(InputErrorOf(SliceBasis::Parse(basis->bytes(), testing::CnnLayout()).status()),
            InputError::kWrongCodec);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{20}, basis->bytes().size() - 1}) {
    EXPECT_TRUE(
        FailsWith(SliceBasis::Parse(basis->bytes().substr(0, cut), layout), InputError::kMalformed))
        << cut;
  }
  EXPECT_TRUE(FailsWith(SliceBasis::Parse(basis->bytes() + "x", layout), InputError::kMalformed));
  const size_t first = 4 + 4 + 8 + 8 + 4 + 4 + 4 + 4;  // header and the tensor index
  std::string nan = basis->bytes();
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + first, &q, 4);
  // Only the code: a non-finite basis value comes back tagged malformed, not kNonFinite.
  EXPECT_TRUE(FailsWith(SliceBasis::Parse(nan, layout), StatusCode::kInvalidArgument));
  std::string scaled = basis->bytes();
  for (int i = 0; i < 8; ++i) {
    float v;
    std::memcpy(&v, scaled.data() + first + 4 * (i * 3), 4);
    v *= 1.5f;
    std::memcpy(scaled.data() + first + 4 * (i * 3), &v, 4);
  }
  EXPECT_TRUE(FailsWith(SliceBasis::Parse(scaled, layout), InputError::kMalformed));
  EXPECT_TRUE(FailsWith(SliceBasis::Fit(layout, 8, 8, 1, Gaussian(layout.dim(), 1)),
                        StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("gradiveq(dims=3,slice=8,refit=1)", &layout),
                        StatusCode::kInvalidArgument));
  // A basis fitted for another layout is refused when the codec is built.
  const ModelLayout cnn = testing::CnnLayout();
  auto cnn_basis = FitTo(cnn, 8, 3, Gaussian(cnn.dim(), 1));
  EXPECT_EQ(InputErrorOf(MakeCodec("gradiveq(dims=3,slice=8)", &layout, cnn_basis).status()),
            InputError::kWrongCodec);
  EXPECT_TRUE(FailsWith(SliceBasis::Fit(layout, 8, 3, 1, Gaussian(layout.dim() - 1, 1)),
                        StatusCode::kInvalidArgument));
}

TEST(GradiVeQ, HostileFramesAreRefused) {
  const ModelLayout layout = Small();
  auto codec =
      Make("gradiveq(dims=3,slice=8)", layout, FitTo(layout, 8, 3, Gaussian(layout.dim(), 1)));
  ASSERT_NE(codec, nullptr);
  std::vector<float> out(layout.dim());
  // A frame of the codec's spec for [begin, begin + length) of `dim` coordinates whose body
  // is `count` copies of `value`.
  auto hand_made = [&](uint64_t dim, uint64_t begin, uint64_t length, float value, int count) {
    std::string bytes;
    const size_t body = BeginFrame(codec->spec(), dim, begin, length, &bytes);
    for (int i = 0; i < count; ++i) bytes.append(reinterpret_cast<const char*>(&value), 4);
    FinishFrame(body, &bytes);
    return bytes;
  };
  auto refusal = [&](const std::string& bytes) {
    return InputErrorOf(DecodeFrameInto(*codec, bytes, FrameLimits{}, out));
  };
  // A range that starts inside a slice.
  EXPECT_EQ(refusal(hand_made(layout.dim(), 4, 12, 0.0f, 12)), InputError::kMalformed);
  // The right range (two slices: 6 code values) with a body one value short, and a code
  // that is not finite.
  EXPECT_EQ(refusal(hand_made(layout.dim(), 0, 16, 0.0f, 5)), InputError::kMalformed);
  EXPECT_EQ(refusal(hand_made(layout.dim(), 0, 16, std::numeric_limits<float>::infinity(), 6)),
            InputError::kNonFinite);
  // Finite codes so large that a sum of them, or their decode, could overflow.
  const std::string huge = hand_made(layout.dim(), 0, 16, 3e38f, 6);
  EXPECT_EQ(refusal(huge), InputError::kNonFinite);
  std::vector<float> code;
  auto view = ParseFrame(huge, FrameLimits{});
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(FailsWith(codec->ReadCode(*view, &code), InputError::kNonFinite));
  // A frame for another dimension.
  std::vector<float> more(layout.dim() + 8);
  EXPECT_TRUE(FailsWith(
      DecodeFrameInto(*codec, hand_made(layout.dim() + 8, 0, 16, 0.0f, 6), FrameLimits{}, more),
      InputError::kMalformed));
}

}  // namespace
}  // namespace fedlgc::codecs
