// Upload order (P3): the permutation lists frames by non-increasing priority with ties in
// the encoder's order; magnitude priorities are each frame's decoded energy per byte; the
// layer order ranks input-side tensors first; reordered frames still tile the vector.
#include "codecs/priority.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

TEST(UploadOrder, NamesParseAndOthersAreRefused) {
  EXPECT_EQ(ParseUploadOrder("").value(), UploadOrder::kIndex);
  EXPECT_EQ(ParseUploadOrder("index").value(), UploadOrder::kIndex);
  EXPECT_EQ(ParseUploadOrder("layer").value(), UploadOrder::kLayer);
  EXPECT_EQ(ParseUploadOrder("magnitude").value(), UploadOrder::kMagnitude);
  EXPECT_FALSE(ParseUploadOrder("random").ok());
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
  // A frame of another codec is refused, not misread.
  auto other = testing::Make("fp32");
  EXPECT_FALSE(FramePriorities(*other, frames, UploadOrder::kMagnitude, layout).ok());
}

}  // namespace
}  // namespace fedlgc::codecs
