// Upload order (P3): the permutation lists frames by non-increasing priority with ties in
// the encoder's order; magnitude priorities are each frame's decoded energy per byte; the
// layer order ranks input-side tensors first; reordered frames still tile the vector.
#include "codecs/priority.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

TEST(UploadOrder, NamesParseAndOthersAreRefused) {
  EXPECT_EQ(ParseUploadOrder("").value(), UploadOrder::kIndex);
  EXPECT_EQ(ParseUploadOrder("index").value(), UploadOrder::kIndex);
  EXPECT_EQ(ParseUploadOrder("layer").value(), UploadOrder::kLayer);
  EXPECT_EQ(ParseUploadOrder("magnitude").value(), UploadOrder::kMagnitude);
  EXPECT_TRUE(FailsWith(ParseUploadOrder("random"), StatusCode::kInvalidArgument));
}

TEST(UploadOrder, ByPriorityIsAStableNonIncreasingPermutation) {
  std::mt19937 rng(3);
  std::vector<double> p(500);
  for (double& x : p) x = static_cast<double>(rng() % 20);  // many ties
  const std::vector<size_t> order = ByPriority(p);
  ASSERT_EQ(order.size(), p.size());
  EXPECT_EQ(std::set<size_t>(order.begin(), order.end()).size(), p.size());
  for (size_t i = 1; i < order.size(); ++i) {
    ASSERT_GE(p[order[i - 1]], p[order[i]]);
    if (p[order[i - 1]] == p[order[i]]) {
      ASSERT_LT(order[i - 1], order[i]);  // ties keep the encoder's order
    }
  }
}

// An fp32 update in 1 KiB frames whose 7th frame holds a large region: by magnitude that
// frame leaves first, and every frame's priority is its energy per byte.
TEST(UploadOrder, MagnitudePutsTheMostEnergyPerByteFirst) {
  auto codec = testing::Make("fp32");
  std::vector<float> x = testing::GradientLike(5000, 4);
  for (size_t i = 1500; i < 1700; ++i) x[i] *= 50;
  std::vector<Frame> frames;
  testing::RoundTrip(*codec, x, 1, 1024, &frames);
  ASSERT_GT(frames.size(), 5u);
  const ModelLayout flat = ModelLayout::Flat(x.size());
  auto prio = FramePriorities(*codec, frames, UploadOrder::kMagnitude, flat);
  ASSERT_TRUE(prio.ok()) << prio.status();
  for (size_t i = 0; i < frames.size(); ++i) {
    double e = 0;
    for (uint64_t c = frames[i].begin; c < frames[i].begin + frames[i].length; ++c) {
      e += double(x[c]) * x[c];
    }
    EXPECT_DOUBLE_EQ((*prio)[i], e / frames[i].bytes.size());
  }
  std::vector<Frame> ordered = frames;
  ASSERT_TRUE(OrderFrames(*codec, UploadOrder::kMagnitude, flat, &ordered).ok());
  EXPECT_LE(ordered[0].begin, 1500u);
  EXPECT_GT(ordered[0].begin + ordered[0].length, 1500u);
  auto after = FramePriorities(*codec, ordered, UploadOrder::kMagnitude, flat).value();
  for (size_t i = 1; i < after.size(); ++i) EXPECT_GE(after[i - 1], after[i]);
  // Still a tiling of [0, n), and each frame decodes as before.
  std::vector<float> out(x.size(), -1.0f);
  ASSERT_TRUE(DecodeAll(*codec, ordered, out).ok());
  EXPECT_EQ(out, x);
}

TEST(UploadOrder, LayerRanksInputSideTensorsFirstAndIndexKeepsTheOrder) {
  auto codec = testing::Make("qsgd(bits=8,bucket=64)");
  const ModelLayout layout =
      ModelLayout::Create({{"conv.weight", {8, 100}}, {"conv.bias", {8}}, {"fc.weight", {40, 50}}})
          .value();
  const auto x = testing::GradientLike(layout.dim(), 6);
  std::vector<Frame> frames;
  testing::RoundTrip(*codec, x, 1, 200, &frames);
  ASSERT_GT(frames.size(), 4u);
  auto prio = FramePriorities(*codec, frames, UploadOrder::kLayer, layout).value();
  for (size_t i = 0; i < frames.size(); ++i) {
    const double tensor = frames[i].begin < 800 ? 0 : frames[i].begin < 808 ? 1 : 2;
    EXPECT_EQ(prio[i], -tensor) << "frame at " << frames[i].begin;
  }
  // Parameters in forward order: layer order is the encoder's order.
  std::vector<Frame> by_layer = frames, by_index = frames;
  ASSERT_TRUE(OrderFrames(*codec, UploadOrder::kLayer, layout, &by_layer).ok());
  ASSERT_TRUE(OrderFrames(*codec, UploadOrder::kIndex, layout, &by_index).ok());
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(by_layer[i].begin, frames[i].begin);
    EXPECT_EQ(by_index[i].begin, frames[i].begin);
  }
  // A frame of another codec is refused, not misread (tagged malformed, where a decoder
  // tags another codec's frame kWrongCodec: only the code is pinned).
  auto other = testing::Make("fp32");
  EXPECT_TRUE(FailsWith(FramePriorities(*other, frames, UploadOrder::kMagnitude, layout),
                        StatusCode::kInvalidArgument));
}

// A layout whose tensors do not end on any codec's block: 216, 8, 720 and 10 coordinates.
ModelLayout Awkward() {
  return ModelLayout::Create({{"conv.weight", {8, 3, 3, 3}},
                              {"conv.bias", {8}},
                              {"fc.weight", {10, 72}},
                              {"fc.bias", {10}}})
      .value();
}

std::vector<Frame> EncodeWithCuts(Codec& codec, const std::vector<float>& x, uint64_t budget,
                                  std::span<const uint64_t> cuts) {
  EncodeOptions opts;
  opts.seed = 5;
  opts.max_frame_bytes = budget;
  opts.cuts = cuts;
  std::vector<Frame> frames;
  const absl::Status st = codec.Encode(x, opts, &frames);
  EXPECT_TRUE(st.ok()) << codec.spec() << ": " << st;
  return frames;
}

// P3's slices: with the layout's tensor cuts every frame lies in one tensor and the frames of
// each tensor tile it; the layer order then lists them by tensor, input side first. Cuts
// change where frames end, not what deterministic codecs decode to.
TEST(UploadOrder, P3SlicesTileEachTensor) {
  const ModelLayout layout = Awkward();
  const std::vector<uint64_t> cuts = layout.TensorCuts();
  ASSERT_EQ(cuts, (std::vector<uint64_t>{216, 224, 944}));
  // conv.weight holds the largest values: a top-k frame of it keeps far more than its share.
  auto x = testing::GradientLike(layout.dim(), 8);
  for (uint64_t i = 0; i < 216; ++i) x[i] *= 50;
  struct Case {
    std::string spec;
    bool deterministic;
  };
  const std::vector<Case> cases = {
      {"fp32", true},       {"qsgd(bits=4,bucket=64)", false}, {"terngrad(bucket=128)", false},
      {"natural", false},   {"topk(ratio=0.05)", true},        {"ef(topk(ratio=0.05))", true},
      {"zstd(fp16)", true}, {"zstd(topk(ratio=0.05))", true},  {"powersgd(rank=2)", true},
  };
  for (const Case& c : cases) {
    for (uint64_t budget : {uint64_t{0}, uint64_t{1200}, uint64_t{3000}}) {
      SCOPED_TRACE(c.spec + " budget " + std::to_string(budget));
      auto plain = MakeCodec(c.spec, &layout);
      auto sliced = MakeCodec(c.spec, &layout);
      ASSERT_TRUE(plain.ok() && sliced.ok()) << plain.status() << sliced.status();
      const std::vector<Frame> frames = EncodeWithCuts(**sliced, x, budget, cuts);
      // Each frame inside one tensor; per tensor, the frames in order tile it.
      std::vector<uint64_t> next(layout.tensors().size());
      for (size_t t = 0; t < next.size(); ++t) next[t] = layout.tensors()[t].offset;
      for (const Frame& f : frames) {
        ASSERT_GT(f.length, 0u);
        size_t t = 0;
        while (t + 1 < next.size() && layout.tensors()[t + 1].offset <= f.begin) ++t;
        const TensorSlot& slot = layout.tensors()[t];
        ASSERT_LE(f.begin + f.length, slot.offset + slot.size) << "frame at " << f.begin;
        ASSERT_EQ(f.begin, next[t]) << "frame at " << f.begin;
        next[t] += f.length;
        if (budget != 0) {
          EXPECT_LE(f.bytes.size(), budget);
        }
      }
      for (size_t t = 0; t < next.size(); ++t) {
        EXPECT_EQ(next[t], layout.tensors()[t].offset + layout.tensors()[t].size);
      }
      std::vector<float> got(x.size(), -7.0f);
      ASSERT_TRUE(DecodeAll(**sliced, frames, got).ok());
      for (float v : got) ASSERT_TRUE(std::isfinite(v));
      if (c.deterministic) {
        std::vector<float> want(x.size(), -7.0f);
        const std::vector<Frame> whole = EncodeWithCuts(**plain, x, budget, {});
        ASSERT_TRUE(DecodeAll(**plain, whole, want).ok());
        EXPECT_EQ(got, want);
      }
      // Dequeued by layer: non-increasing priority, and each frame's is its tensor's.
      std::vector<Frame> ordered = frames;
      ASSERT_TRUE(OrderFrames(**sliced, UploadOrder::kLayer, layout, &ordered).ok());
      auto prio = FramePriorities(**sliced, ordered, UploadOrder::kLayer, layout).value();
      for (size_t i = 0; i < ordered.size(); ++i) {
        if (i > 0) {
          ASSERT_GE(prio[i - 1], prio[i]);
        }
        size_t t = 0;
        while (t + 1 < next.size() && layout.tensors()[t + 1].offset <= ordered[i].begin) ++t;
        EXPECT_EQ(prio[i], -static_cast<double>(t));
      }
    }
  }
}

// Stochastic rounding stays unbiased when blocks restart at cuts (Monte Carlo over seeds:
// each tensor's decoded sum within 5 standard errors of its true sum).
TEST(UploadOrder, CutsKeepStochasticCodecsUnbiased) {
  const ModelLayout layout = Awkward();
  const std::vector<uint64_t> cuts = layout.TensorCuts();
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(layout.dim());
  for (float& v : x) v = uniform(rng);
  auto codec = testing::Make("qsgd(bits=2,bucket=64)");
  const int trials = 800;
  const size_t nt = layout.tensors().size();
  std::vector<double> sum(nt, 0), sq(nt, 0), truth(nt, 0);
  for (size_t t = 0; t < nt; ++t) {
    const TensorSlot& slot = layout.tensors()[t];
    for (uint64_t i = slot.offset; i < slot.offset + slot.size; ++i) truth[t] += x[i];
  }
  for (int s = 0; s < trials; ++s) {
    std::vector<Frame> frames;
    std::vector<float> out(x.size());
    EncodeOptions opts;
    opts.seed = 100 + s;
    opts.max_frame_bytes = 120;
    opts.cuts = cuts;
    ASSERT_TRUE(codec->Encode(x, opts, &frames).ok());
    ASSERT_TRUE(DecodeAll(*codec, frames, out).ok());
    for (size_t t = 0; t < nt; ++t) {
      const TensorSlot& slot = layout.tensors()[t];
      double acc = 0;
      for (uint64_t i = slot.offset; i < slot.offset + slot.size; ++i) acc += out[i];
      sum[t] += acc;
      sq[t] += acc * acc;
    }
  }
  for (size_t t = 0; t < nt; ++t) {
    const double mean = sum[t] / trials;
    const double se = std::sqrt(std::max(0.0, sq[t] / trials - mean * mean) / trials);
    EXPECT_GT(se, 0) << layout.tensors()[t].name;
    EXPECT_LE(std::abs(mean - truth[t]), 5 * se) << layout.tensors()[t].name;
  }
}

// Blocks that restart at a cut draw streams of their own: with the same value everywhere,
// natural compression's rounding of conv.weight (from coordinate 0) and of fc.weight (from
// the cut at 224, inside the same 1024-coordinate block) differ. Keyed by begin / block
// both would be block 0 and round alike.
TEST(UploadOrder, BlocksThatRestartAtACutDrawTheirOwnStreams) {
  const ModelLayout layout = Awkward();
  const std::vector<uint64_t> cuts = layout.TensorCuts();
  const std::vector<float> x(layout.dim(), 1.5f);  // rounds to 1 or 2, each with p = 1/2
  auto codec = testing::Make("natural");
  EncodeOptions opts;
  opts.seed = 77;
  opts.cuts = cuts;
  std::vector<Frame> frames;
  ASSERT_TRUE(codec->Encode(x, opts, &frames).ok());
  ASSERT_EQ(frames.size(), 4u);
  std::vector<float> out(x.size());
  ASSERT_TRUE(DecodeAll(*codec, frames, out).ok());
  size_t same = 0;
  for (uint64_t i = 0; i < 216; ++i) same += out[i] == out[224 + i];
  EXPECT_LT(same, 216u * 3 / 4) << "fc.weight rounds like conv.weight";
  EXPECT_GT(same, 216u / 4);
  // And FirstBlockKey is unique over the blocks of a chunked, cut encoding.
  std::set<uint64_t> keys;
  size_t blocks = 0;
  auto qsgd = testing::Make("qsgd(bits=2,bucket=64)");
  opts.max_frame_bytes = 120;
  frames.clear();
  ASSERT_TRUE(qsgd->Encode(x, opts, &frames).ok());
  for (const Frame& f : frames) {
    const uint64_t first = FirstBlockKey(f.begin, 64, x.size());
    for (uint64_t j = 0; j * 64 < f.length; ++j, ++blocks) keys.insert(first + j);
  }
  EXPECT_EQ(keys.size(), blocks);
}

TEST(UploadOrder, CutsACodecCannotHonourAreRefused) {
  const ModelLayout layout = Awkward();
  const auto x = testing::GradientLike(layout.dim(), 10);
  auto fp32 = testing::Make("fp32");
  std::vector<Frame> frames;
  EncodeOptions opts;
  for (const std::vector<uint64_t>& bad :
       {std::vector<uint64_t>{0}, {300, 200}, {216, 216}, {layout.dim()}}) {
    opts.cuts = bad;
    EXPECT_TRUE(FailsWith(fp32->Encode(x, opts, &frames), StatusCode::kInvalidArgument));
    auto topk = testing::Make("topk(ratio=0.1)");
    EXPECT_TRUE(FailsWith(topk->Encode(x, opts, &frames), StatusCode::kInvalidArgument));
  }
  EXPECT_TRUE(frames.empty());
  // fc.weight is 10 x 72: a PowerSGD frame may end between its rows, not inside one.
  auto psgd = MakeCodec("powersgd(rank=2)", &layout);
  ASSERT_TRUE(psgd.ok());
  const std::vector<uint64_t> between{224 + 72 * 3}, inside{224 + 100};
  opts.cuts = between;
  EXPECT_TRUE((*psgd)->Encode(x, opts, &frames).ok());
  opts.cuts = inside;
  frames.clear();
  const absl::Status st = (*psgd)->Encode(x, opts, &frames);
  EXPECT_TRUE(FailsWith(st, StatusCode::kInvalidArgument));
  EXPECT_NE(st.message().find("inside a row of fc.weight"), std::string::npos) << st;
}

}  // namespace
}  // namespace fedlgc::codecs
