// The per-client collection of LSGD, SGP and buffered rounds through the round engine:
// each client's update kept apart and the uploader set (SGP's push-sum share checks are
// modes/sgp/push_sum_collector_test.cc's).
#include "coordinator/collectors.h"

#include <cmath>
#include <filesystem>

#include "codecs/registry.h"
#include "coordinator/round_engine.h"
#include "gtest/gtest.h"
#include "tests/coordinator/chunks.h"

namespace fedlgc::coordinator {
namespace {

constexpr size_t kDim = 64;

std::vector<std::string> Frames(const std::vector<float>& x, const std::string& spec = "fp32") {
  return testing::ChunkFrames(x, spec);
}

ChunkIn Chunk(const std::string& client, const std::vector<std::string>& frames, uint32_t i) {
  return testing::ChunkOf(client, frames, i);
}

std::unique_ptr<RoundEngine> Engine(const std::vector<std::string>& clients,
                                    const std::string& codec = "fp32") {
  EngineState s;
  s.model.assign(kDim, 0.5f);
  EngineOptions o;
  o.plan.codec = codec;
  auto e = std::make_unique<RoundEngine>(o, s);
  for (const auto& c : clients) e->roster().Register(c, 10);
  return e;
}

// The buffered mean keeps updates as their frames: decoded again on demand they are the
// values the dense collector keeps, their norms are the dense norms, and the mean made
// from them is the mean of the dense updates.
TEST(PerClientCollector, CompactUpdatesAreTheDenseOnesAndMakeTheSameMean) {
  const std::vector<std::string> clients = {"a", "b", "c"};
  // (the mean below is made bit for bit the same without clipping, and within a float's
  // last bits with it)
  auto e_dense = Engine(clients, "qsgd(bits=4)"), e_compact = Engine(clients, "qsgd(bits=4)");
  auto dense = std::make_shared<PerClientCollector>();
  auto compact = std::make_shared<PerClientCollector>(/*compact=*/true);
  const auto deadline = Clock::Real()->Now() + std::chrono::seconds(9);
  ASSERT_TRUE(e_dense->OpenRound(clients, deadline, dense).ok());
  ASSERT_TRUE(e_compact->OpenRound(clients, deadline, compact).ok());
  for (size_t k = 0; k < clients.size(); ++k) {
    std::vector<float> x(kDim);
    for (size_t i = 0; i < kDim; ++i) x[i] = std::sin(0.37f * i + k) * (1.0f + 3.0f * k);
    const auto frames = Frames(x, "qsgd(bits=4)");
    // c sends only its first chunk: a partial update.
    const size_t n = clients[k] == "c" ? 1 : frames.size();
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_TRUE(e_dense->AcceptChunk(Chunk(clients[k], frames, i)).status.ok());
      ASSERT_TRUE(e_compact->AcceptChunk(Chunk(clients[k], frames, i)).status.ok());
    }
  }
  const auto d = dense->Updates();
  const auto c = compact->TakeUpdates();
  EXPECT_TRUE(compact->Updates().empty()) << "taken: the collector holds nothing after";
  std::vector<Contribution> dc, cc;
  for (const std::string& id : clients) {
    const auto& du = d.at(id);
    const auto& cu = c.at(id);
    EXPECT_TRUE(cu.values.empty());
    std::vector<float> filled(kDim, 7.0f);
    ASSERT_TRUE(compact->Fill(cu, filled).ok());
    EXPECT_EQ(filled, du.values) << id;
    EXPECT_EQ(cu.ranges, du.ranges);
    EXPECT_NEAR(cu.Norm(), L2Norm(du.values), 1e-12 * L2Norm(du.values));
    dc.push_back({id, du.weight, du.values, du.ranges, du.complete});
    Contribution lazy{id, cu.weight, {}, cu.ranges, cu.complete};
    lazy.fill = [&compact, &cu](std::span<float> out) { return compact->Fill(cu, out); };
    lazy.norm = cu.Norm();
    cc.push_back(std::move(lazy));
  }
  AggregatorOptions mean;
  for (double clip : {0.0, 1.0}) {
    const auto a = AggregateUpdates(mean, dc, ClipByMedian(dc, clip), kDim).value();
    const auto b = AggregateUpdates(mean, cc, ClipByMedian(cc, clip), kDim).value();
    EXPECT_EQ(a.used, b.used);
    ASSERT_EQ(a.values.size(), b.values.size());
    if (clip == 0) {
      EXPECT_EQ(a.values, b.values);
      continue;
    }
    // Clipped: the compact norm sums chunk by chunk, so its factor may differ in the last
    // bit.
    for (size_t i = 0; i < kDim; ++i) EXPECT_NEAR(a.values[i], b.values[i], 1e-6) << i;
  }
  AggregatorOptions median;
  median.kind = AggregatorKind::kMedian;
  EXPECT_TRUE(absl::IsInvalidArgument(
      AggregateUpdates(median, cc, ClipByMedian(cc, 0), kDim).status()))
      << "only the means take compact updates";
}

TEST(PerClientCollector, KeepsEachClientsUpdateApartAndWaitsOnlyForUploaders) {
  auto e = Engine({"a", "b", "c"});
  auto collector = std::make_shared<PerClientCollector>();
  ASSERT_TRUE(
      e->OpenRound({"a", "b", "c"}, Clock::Real()->Now() + std::chrono::seconds(9), collector)
          .ok());
  e->SetUploaders({"a", "b"});
  std::vector<float> xa(kDim, 1.0f), xb(kDim, -2.0f);
  const auto fa = Frames(xa), fb = Frames(xb);
  ASSERT_GT(fa.size(), 1u);
  // c is a participant but not an uploader: refused.
  EXPECT_EQ(e->AcceptChunk(Chunk("c", fa, 0)).reason, RejectReason::kNotParticipant);
  for (uint32_t i = 0; i < fa.size(); ++i)
    ASSERT_TRUE(e->AcceptChunk(Chunk("a", fa, i)).status.ok());
  EXPECT_FALSE(e->AllComplete());
  ASSERT_TRUE(e->AcceptChunk(Chunk("b", fb, 0)).status.ok());
  auto sep = collector->Updates();
  EXPECT_TRUE(sep.at("a").complete);
  EXPECT_EQ(sep.at("a").values, xa);
  EXPECT_FALSE(sep.at("b").complete);
  EXPECT_EQ(sep.at("b").values[0], -2.0f);
  EXPECT_EQ(sep.at("b").values[kDim - 1], 0.0f);  // not arrived yet
  e->SetUploaders({"a"});                         // b's leadership went elsewhere
  EXPECT_TRUE(e->AllComplete());
  std::vector<float> next(kDim, 3.0f);
  EXPECT_TRUE(absl::IsInternal(e->CommitModel(std::vector<float>(kDim + 1), {"a"}).status()))
      << "an aggregate of the wrong size commits nothing";
  const CommitResult r = e->CommitModel(next, {"a"}).value();
  EXPECT_EQ(r.participants, 1);
  EXPECT_EQ(r.stragglers, 1);  // b held a partial update that did not count
  EXPECT_EQ(r.receipts.at("a").counted.size(), fa.size());
  EXPECT_TRUE(r.receipts.at("b").counted.empty());
  EXPECT_EQ(e->ModelVector(), next);
}

}  // namespace
}  // namespace fedlgc::coordinator
