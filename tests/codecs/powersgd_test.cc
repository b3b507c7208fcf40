// PowerSGD and the model layout it needs: the layout's text, hash and refusals; the
// oracle of the paper (a matrix of rank <= r comes back exactly, P^T P = I, M^ + e = M);
// error feedback over rounds; warm start as a power iteration; the sender state across a
// restart; frame budgets; exact byte counts; and hostile frames and states.
#include "codecs/powersgd.h"

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

// A small layout: a 12 x 30 matrix, a bias, a 6 x 2 x 3 tensor (6 x 6) and a scalar.
ModelLayout Small() {
  return ModelLayout::Create({{"w", {12, 30}}, {"b", {12}}, {"k", {6, 2, 3}}, {"s", {}}}).value();
}

std::unique_ptr<PowerSgd> MakePsgd(const std::string& spec, const ModelLayout& layout) {
  auto c = MakeCodec(spec, &layout);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  return std::unique_ptr<PowerSgd>(dynamic_cast<PowerSgd*>(c->release()));
}

// A matrix rows x cols of rank `rank` (sum of outer products of Gaussian vectors).
std::vector<float> LowRank(uint64_t rows, uint64_t cols, int rank, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> m(rows * cols, 0.0);
  for (int k = 0; k < rank; ++k) {
    std::vector<double> a(rows), b(cols);
    for (double& v : a) v = normal(rng);
    for (double& v : b) v = normal(rng) * 0.01;
    for (uint64_t i = 0; i < rows; ++i)
      for (uint64_t j = 0; j < cols; ++j) m[i * cols + j] += a[i] * b[j];
  }
  return std::vector<float>(m.begin(), m.end());
}

std::vector<float> Floats(std::span<const uint8_t> bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST(ModelLayout, TextHashAndRefusals) {
  const ModelLayout l = Small();
  EXPECT_EQ(l.dim(), 12u * 30 + 12 + 36 + 1);
  EXPECT_EQ(l.Text(), "w:12x30;b:12;k:6x2x3;s:");
  EXPECT_EQ(l.tensors()[2].offset, 372u);
  EXPECT_EQ(l.tensors()[3].size, 1u);
  auto parsed = ModelLayout::Parse(l.Text());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(*parsed == l);
  EXPECT_EQ(parsed->hash(), l.hash());
  EXPECT_EQ(l.HashWord().size(), 17u);
  EXPECT_EQ(l.HashWord()[0], 'l');
  // Another shape of the same size, or another name, is another layout.
  EXPECT_NE(ModelLayout::Parse("w:30x12;b:12;k:6x2x3;s:")->hash(), l.hash());
  EXPECT_NE(ModelLayout::Parse("v:12x30;b:12;k:6x2x3;s:")->hash(), l.hash());
  EXPECT_EQ(testing::CnnLayout().dim(), 215370u);
  EXPECT_EQ(ModelLayout::Flat(5).Text(), "flat:5");
  for (const char* bad : {"w:0", "w:2x", "w", "w:2;w:3", "a b:2", "w:-1", "w:1x0", "w:x2",
                          "w:99999999999999", ";", "w:2;"}) {
    EXPECT_TRUE(FailsWith(ModelLayout::Parse(bad), StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(PowerSgd, NeedsTheLayoutAndNamesItInItsSpec) {
  auto none = MakeCodec("powersgd(rank=2)");
  ASSERT_TRUE(FailsWith(none, StatusCode::kInvalidArgument));
  EXPECT_NE(std::string(none.status().message()).find("layout"), std::string::npos);
  const ModelLayout empty;  // a client that has no model yet
  EXPECT_TRUE(FailsWith(MakeCodec("powersgd(rank=2)", &empty), StatusCode::kInvalidArgument));
  const ModelLayout l = Small();
  auto c = MakePsgd("powersgd(rank=2)", l);
  ASSERT_NE(c, nullptr);
  const std::string word = l.HashWord();
  EXPECT_EQ(c->spec(), "powersgd/1(rank=2,min_ratio=2,warm=1,iters=1,layout=" + word + ")");
  EXPECT_EQ(c->wire_spec(), "powersgd/1(rank=2,min_ratio=2,layout=" + word + ")");
  // Its own canonical spec builds it again; another layout's is refused as another codec.
  EXPECT_TRUE(MakeCodec(c->spec(), &l).ok());
  const ModelLayout other = ModelLayout::Parse("w:30x12;b:12;k:6x2x3;s:").value();
  auto wrong = MakeCodec(c->spec(), &other);
  ASSERT_TRUE(FailsWith(wrong, InputError::kWrongCodec));
  EXPECT_EQ(InputErrorOf(wrong.status()), InputError::kWrongCodec) << wrong.status();
  // It keeps its own residual: no ef(...) around it.
  EXPECT_TRUE(FailsWith(MakeCodec("ef(powersgd)", &l), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("powersgd(rank=0)", &l), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("powersgd(min_ratio=0.5)", &l), StatusCode::kInvalidArgument));
}

TEST(PowerSgd, WhichTensorsAreCompressedAndExactBytes) {
  auto c = MakePsgd("powersgd(rank=2)", testing::CnnLayout());
  ASSERT_NE(c, nullptr);
  const auto& b = c->blocks();
  ASSERT_EQ(b.size(), 8u);
  // Conv kernels as out x in*kh*kw; 1-D tensors dense.
  EXPECT_EQ(b[0].rows, 16u);
  EXPECT_EQ(b[0].cols, 25u);
  EXPECT_EQ(b[0].rank, 2u);
  EXPECT_EQ(b[2].cols, 400u);
  EXPECT_EQ(b[4].cols, 1568u);
  EXPECT_EQ(b[6].rank, 2u);  // 10 x 128: 1280 >= 2 * 2 * 138
  for (size_t i : {1, 3, 5, 7}) EXPECT_EQ(b[i].rank, 0u);
  // 2(16+25) + 2(32+400) + 2(128+1568) + 2(10+128) + 16 + 32 + 128 + 10 floats.
  EXPECT_EQ(c->FloatsPerUpdate(), 4800u);
  const auto x = testing::GradientLike(215370, 3);
  std::vector<Frame> frames;
  ASSERT_TRUE(c->Encode(x, EncodeOptions{}, &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].bytes.size(), FrameOverhead(c->wire_spec().size()) + 4 * 4800);
  EXPECT_EQ(frames[0].bytes.size(), c->MaxFrameBytes(215370));
  // A min_ratio the small matrices miss sends them dense; a rank above a side is capped.
  auto strict = MakePsgd("powersgd(rank=2,min_ratio=10)", testing::CnnLayout());
  EXPECT_EQ(strict->blocks()[0].rank, 0u);  // 400 < 10 * 82
  EXPECT_EQ(strict->blocks()[6].rank, 0u);
  EXPECT_EQ(strict->blocks()[4].rank, 2u);
  auto wide = MakePsgd("powersgd(rank=8,min_ratio=1)", Small());
  EXPECT_EQ(wide->blocks()[2].rank, 0u);  // 6 x 6 at rank 6: no saving
  EXPECT_EQ(wide->blocks()[0].rank, 8u);
}

// The oracle of the paper: rank(M) <= r gives M^ = M (to float rounding), the sent P^ has
// orthonormal columns, and the residual is exactly M - M^ as the receiver decodes it.
TEST(PowerSgd, RankRMatricesComeBackAndPHatIsOrthonormal) {
  const ModelLayout l = ModelLayout::Create({{"w", {40, 70}}, {"b", {40}}}).value();
  for (int rank : {1, 2, 4}) {
    auto c = MakePsgd("powersgd(rank=" + std::to_string(rank) + ")", l);
    std::vector<float> x = LowRank(40, 70, rank, 10 + rank);
    for (int i = 0; i < 40; ++i) x.push_back(0.1f * static_cast<float>(i));
    std::vector<Frame> frames;
    ASSERT_TRUE(c->Encode(x, EncodeOptions{}, &frames).ok());
    std::vector<float> out(x.size());
    ASSERT_TRUE(DecodeAll(*c, frames, out).ok());
    double err = 0, norm = 0;
    for (size_t i = 0; i < 2800; ++i) {
      err = std::max(err, std::fabs(static_cast<double>(out[i]) - x[i]));
      norm = std::max(norm, std::fabs(static_cast<double>(x[i])));
    }
    EXPECT_LT(err, 1e-5 * norm) << "rank " << rank;
    for (size_t i = 2800; i < x.size(); ++i) EXPECT_EQ(out[i], x[i]);  // dense, exact
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(c->residual()[i], x[i] - out[i]) << i;  // M - M^, bit for bit
    }
    // P^ is the first 40 * rank floats of the body: P^T P^ = I.
    auto view = ParseFrame(frames[0].bytes, FrameLimits{}).value();
    const std::vector<float> p = Floats(view.body.subspan(0, 4 * 40 * rank));
    for (int a = 0; a < rank; ++a) {
      for (int b = 0; b < rank; ++b) {
        double dot = 0;
        for (int i = 0; i < 40; ++i) dot += static_cast<double>(p[i * rank + a]) * p[i * rank + b];
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6) << a << "," << b;
      }
    }
    // The warm-start Q kept is the one sent (after P^).
    const std::vector<float> q = Floats(view.body.subspan(4 * 40 * rank, 4 * 70 * rank));
    EXPECT_EQ(std::vector<float>(c->query(0).begin(), c->query(0).end()), q);
  }
}

// Error feedback: over rounds, what was sent plus the residual is the sum of the updates;
// and with warm start a fixed full-rank update is tracked better round after round.
TEST(PowerSgd, ErrorFeedbackConservesTheSumAndWarmStartIterates) {
  const ModelLayout l = ModelLayout::Create({{"w", {64, 96}}}).value();
  std::vector<double> sent(64 * 96, 0.0), total(64 * 96, 0.0);
  auto c = MakePsgd("powersgd(rank=2)", l);
  for (int t = 0; t < 12; ++t) {
    const auto x = testing::GradientLike(64 * 96, 100 + t);
    std::vector<Frame> frames;
    ASSERT_TRUE(c->Encode(x, EncodeOptions{}, &frames).ok());
    std::vector<float> out(x.size());
    ASSERT_TRUE(DecodeAll(*c, frames, out).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      sent[i] += out[i];
      total[i] += x[i];
    }
  }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    worst = std::max(worst, std::fabs(sent[i] + c->residual()[i] - total[i]));
    scale = std::max({scale, std::fabs(total[i]), std::fabs(double{c->residual()[i]})});
  }
  // Two float roundings per round (M = x + e, e = M - M^), each within half an ulp.
  EXPECT_LT(worst, 12 * 2 * scale * 0x1p-24);
  // The same full-rank M each round, residual dropped (no error feedback): with warm start
  // P^ Q^T approaches the best rank-2 approximation (subspace iteration), so its error
  // falls from round 1 to round 8; drawn afresh each time it does not improve.
  const auto m = testing::GradientLike(64 * 96, 7);
  auto error_after = [&](const char* spec, int rounds) {
    auto codec = MakePsgd(spec, l);
    double err = 0;
    for (int t = 0; t < rounds; ++t) {
      codec->SetResidual(std::vector<float>(m.size(), 0.0f));
      std::vector<Frame> frames;
      EXPECT_TRUE(codec->Encode(m, EncodeOptions{}, &frames).ok());
      err = testing::SquaredNorm(
          std::vector<float>(codec->residual().begin(), codec->residual().end()));
    }
    return err;
  };
  const double warm1 = error_after("powersgd(rank=2)", 1),
               warm8 = error_after("powersgd(rank=2)", 8);
  const double cold8 = error_after("powersgd(rank=2,warm=0)", 8);
  EXPECT_LT(warm8, warm1);
  EXPECT_LT(warm8, cold8);
  // iters=8 runs those eight power iterations inside one encode: the very same factors.
  const double iters8 = error_after("powersgd(rank=2,iters=8)", 1);
  EXPECT_EQ(iters8, warm8);
  auto spec = MakeCodec("powersgd(rank=2,iters=8)", &l);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ((*spec)->wire_spec(), MakePsgd("powersgd(rank=2)", l)->wire_spec())
      << "iterations are the sender's business: the frames are the same format";
  EXPECT_TRUE(FailsWith(MakeCodec("powersgd(rank=2,iters=0)", &l), StatusCode::kInvalidArgument));
}

// A sender restarted from its saved state sends the same bytes as one that never stopped;
// one that lost its Q does not.
TEST(PowerSgd, RestartedSenderContinuesTheSameIteration) {
  const ModelLayout l = testing::CnnLayout();
  auto a = MakePsgd("powersgd(rank=2)", l);
  for (int t = 0; t < 3; ++t) {
    std::vector<Frame> f;
    ASSERT_TRUE(a->Encode(testing::GradientLike(l.dim(), t), EncodeOptions{}, &f).ok());
  }
  auto b = MakePsgd("powersgd(rank=2)", l);
  ASSERT_TRUE(b->LoadState(a->SaveState()).ok());
  b->SetResidual(a->residual());
  EXPECT_EQ(b->encodes(), 3u);
  auto lost = MakePsgd("powersgd(rank=2)", l);
  lost->SetResidual(a->residual());
  const auto x = testing::GradientLike(l.dim(), 9);
  std::vector<Frame> fa, fb, fl;
  ASSERT_TRUE(a->Encode(x, EncodeOptions{}, &fa).ok());
  ASSERT_TRUE(b->Encode(x, EncodeOptions{}, &fb).ok());
  ASSERT_TRUE(lost->Encode(x, EncodeOptions{}, &fl).ok());
  EXPECT_EQ(fa[0].bytes, fb[0].bytes);
  EXPECT_NE(fa[0].bytes, fl[0].bytes);
  EXPECT_EQ(a->SaveState(), b->SaveState());
}

TEST(PowerSgd, RefusesStateItDidNotWrite) {
  const ModelLayout l = Small();
  auto a = MakePsgd("powersgd(rank=2)", l);
  std::vector<Frame> f;
  ASSERT_TRUE(a->Encode(testing::GradientLike(l.dim(), 1), EncodeOptions{}, &f).ok());
  const std::string good = a->SaveState();
  auto b = MakePsgd("powersgd(rank=2)", l);
  const std::string before = b->SaveState();
  std::vector<std::string> bad = {"x", good.substr(0, good.size() - 1), good + "z"};
  bad.push_back(MakePsgd("powersgd(rank=3)", l)->SaveState());                     // another spec
  bad.push_back(MakePsgd("powersgd(rank=2)", testing::CnnLayout())->SaveState());  // another layout
  std::string nan = good;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + nan.size() - 4, &q, 4);
  bad.push_back(nan);
  std::string version = good;
  version[4] = 2;
  bad.push_back(version);
  for (const std::string& s : bad) {
    EXPECT_TRUE(FailsWith(b->LoadState(s), InputError::kMalformed));
    EXPECT_EQ(b->SaveState(), before);
  }
  EXPECT_TRUE(b->LoadState(good).ok());
  EXPECT_TRUE(b->LoadState("").ok());
  EXPECT_EQ(b->SaveState(), before);
}

// Frame budgets: frames end on tensor or row boundaries, stay within the budget, each
// decodes alone, and together decode to what one frame does; a budget below one row of
// the largest matrix plus its Q is refused with the tensor's name.
TEST(PowerSgd, FrameBudgetsCutOnRowsAndDecodeAlike) {
  const ModelLayout l = testing::CnnLayout();
  const auto x = testing::GradientLike(l.dim(), 5);
  auto whole = MakePsgd("powersgd(rank=2)", l);
  auto cut = MakePsgd("powersgd(rank=2)", l);
  std::vector<Frame> one, many;
  ASSERT_TRUE(whole->Encode(x, EncodeOptions{}, &one).ok());
  EncodeOptions o;
  o.max_frame_bytes = 13000;  // fc1.weight's Q (12,544 bytes) and 45 of its 128 rows
  ASSERT_TRUE(cut->Encode(x, o, &many).ok());
  ASSERT_GT(many.size(), 3u);
  const TensorSlot& fc1 = l.tensors()[4];
  int inside_fc1 = 0;
  uint64_t next = 0;
  std::vector<float> a(l.dim()), b(l.dim());
  ASSERT_TRUE(DecodeAll(*whole, one, a).ok());
  for (const Frame& f : many) {
    EXPECT_LE(f.bytes.size(), o.max_frame_bytes);
    EXPECT_EQ(f.begin, next);
    next = f.begin + f.length;
    if (next > fc1.offset && next < fc1.offset + fc1.size) {
      ++inside_fc1;
      EXPECT_EQ((next - fc1.offset) % 1568, 0u);  // on a row boundary
    }
    ASSERT_TRUE(DecodeFrameInto(*cut, f.bytes, FrameLimits{}, b).ok());
  }
  EXPECT_EQ(next, l.dim());
  EXPECT_EQ(inside_fc1, 2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<float>(whole->residual().begin(), whole->residual().end()),
            std::vector<float>(cut->residual().begin(), cut->residual().end()));
  auto tiny = MakePsgd("powersgd(rank=2)", l);
  std::vector<Frame> none;
  o.max_frame_bytes = 4096;  // fc1's Q alone is 12,544 bytes
  const absl::Status st = tiny->Encode(x, o, &none);
  EXPECT_TRUE(FailsWith(st, StatusCode::kInvalidArgument));
  EXPECT_NE(std::string(st.message()).find("fc1.weight"), std::string::npos) << st;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(tiny->encodes(), 0u);
  EXPECT_TRUE(tiny->residual().empty());  // a failed first encode fixes no dimension
}

TEST(PowerSgd, ZeroUpdatesAndBadInputLeaveItUsable) {
  const ModelLayout l = Small();
  auto c = MakePsgd("powersgd(rank=2)", l);
  std::vector<Frame> f;
  ASSERT_TRUE(c->Encode(std::vector<float>(l.dim(), 0.0f), EncodeOptions{}, &f).ok());
  // A zero update gives zero factors; Q is drawn again so the next update gets through.
  for (float q : c->query(0)) EXPECT_NE(q, 0.0f);
  std::vector<float> x = LowRank(12, 30, 1, 4);
  x.resize(l.dim(), 0.5f);
  f.clear();
  ASSERT_TRUE(c->Encode(x, EncodeOptions{}, &f).ok());
  std::vector<float> out(l.dim());
  ASSERT_TRUE(DecodeAll(*c, f, out).ok());
  EXPECT_NEAR(out[7], x[7], 1e-5);
  const std::string state = c->SaveState();
  auto bad = x;
  bad[3] = std::numeric_limits<float>::infinity();
  f.clear();
  EXPECT_EQ(c->Encode(bad, EncodeOptions{}, &f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FailsWith(c->Encode(std::vector<float>(l.dim() - 1), EncodeOptions{}, &f),
                        StatusCode::kInvalidArgument));
  EXPECT_TRUE(f.empty());
  EXPECT_EQ(c->SaveState(), state);
}

class PowerSgdHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = MakePsgd("powersgd(rank=2)", l_);
    x_ = testing::GradientLike(l_.dim(), 2);
    std::vector<Frame> frames;
    ASSERT_TRUE(c_->Encode(x_, EncodeOptions{}, &frames).ok());
    frame_ = frames[0].bytes;
  }
  absl::Status Decode(const std::string& bytes) {
    std::vector<float> out(l_.dim());
    absl::Status st = DecodeFrameInto(*c_, bytes, FrameLimits{}, out);
    if (st.ok()) {
      for (float v : out) EXPECT_TRUE(std::isfinite(v));
    }
    return st;
  }
  // Rewrites a frame's range (checksum fixed) to reach the body checks.
  std::string WithRange(uint64_t begin, uint64_t length) {
    std::string f = frame_;
    const size_t at = testing::BodyOffset(f) - 4 - 16;
    std::memcpy(f.data() + at, &begin, 8);
    std::memcpy(f.data() + at + 8, &length, 8);
    testing::FixCrc(&f);
    return f;
  }
  ModelLayout l_ = Small();
  std::unique_ptr<PowerSgd> c_;
  std::vector<float> x_;
  std::string frame_;
};

TEST_F(PowerSgdHostile, RefusesCutExtendedMisalignedAndNonFiniteFrames) {
  EXPECT_TRUE(Decode(frame_).ok());
  for (size_t len = 0; len < frame_.size(); ++len) {
    EXPECT_TRUE(absl::IsInvalidArgument(Decode(frame_.substr(0, len)))) << len;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(frame_ + '\0')));
  // A range that starts inside a row of w, or stops inside one, is malformed.
  const absl::Status inside = Decode(WithRange(5, l_.dim() - 5));
  EXPECT_EQ(InputErrorOf(inside), InputError::kMalformed) << inside;
  EXPECT_NE(std::string(inside.message()).find("row"), std::string::npos);
  // A whole-row range whose body does not match it.
  EXPECT_EQ(InputErrorOf(Decode(WithRange(30, l_.dim() - 30))), InputError::kMalformed);
  // A NaN factor, and factors whose product overflows.
  const size_t body = testing::BodyOffset(frame_);
  std::string f = frame_;
  const float nan = std::numeric_limits<float>::quiet_NaN(), big = 1e30f;
  std::memcpy(f.data() + body + 4, &nan, 4);
  testing::FixCrc(&f);
  EXPECT_EQ(InputErrorOf(Decode(f)), InputError::kNonFinite);
  f = frame_;
  std::memcpy(f.data() + body, &big, 4);           // P^[0][0]
  std::memcpy(f.data() + body + 4 * 24, &big, 4);  // Q[0][0] (P^ is 12 x 2)
  testing::FixCrc(&f);
  EXPECT_EQ(InputErrorOf(Decode(f)), InputError::kNonFinite);
  // A frame of another layout names another spec: refused as another codec's.
  const ModelLayout other = ModelLayout::Parse("w:30x12;b:12;k:6x2x3;s:").value();
  auto o = MakePsgd("powersgd(rank=2)", other);
  std::vector<Frame> theirs;
  ASSERT_TRUE(o->Encode(x_, EncodeOptions{}, &theirs).ok());
  EXPECT_EQ(InputErrorOf(Decode(theirs[0].bytes)), InputError::kWrongCodec);
}

}  // namespace
}  // namespace fedlgc::codecs
