// The per-client collection of LSGD, SGP and buffered rounds through the round engine:
// each client's update kept apart and the uploader set (SGP's push-sum share checks are
// modes/sgp/push_sum_collector_test.cc's); updates of several parts, each summed apart.
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

// An update of two parts (SCAFFOLD's model update and control-variate delta): one chunk
// index space, each part its own coordinates and its own sum, a part with its own
// decoder; a part the round does not take is refused by name, and a plain round takes
// part 0 alone.
TEST(PartCollector, EachPartIsSummedApartOverTheSameCoordinates) {
  auto e = Engine({"a", "b"});
  auto model = std::make_shared<WeightedSumCollector>(kDim);
  auto control = std::make_shared<WeightedSumCollector>(kDim);
  std::shared_ptr<const codecs::Codec> f16 = codecs::MakeCodec("fp16").value();
  auto parts = std::make_shared<PartCollector>(std::vector<PartCollector::Part>{
      {model, nullptr}, {control, f16}});
  ASSERT_TRUE(
      e->OpenRound({"a", "b"}, Clock::Real()->Now() + std::chrono::seconds(9), parts).ok());
  // a: part 0 all 1, part 1 all 4 (exact in fp16); b: 3 and 8.
  auto update = [&](const std::string& client, float x0, float x1) {
    std::vector<std::string> frames = Frames(std::vector<float>(kDim, x0));
    const size_t first = frames.size();
    for (auto& f : Frames(std::vector<float>(kDim, x1), "fp16")) frames.push_back(f);
    // A frame of part 1's codec offered as part 0 is of the wrong codec there.
    EXPECT_EQ(e->AcceptChunk(Chunk(client, frames, static_cast<uint32_t>(first))).reason,
              RejectReason::kCodec);
    for (uint32_t i = 0; i < frames.size(); ++i) {
      ChunkIn c = Chunk(client, frames, i);
      c.part = i < first ? 0 : 1;
      const ChunkResult r = e->AcceptChunk(c);
      ASSERT_TRUE(r.status.ok()) << client << " chunk " << i << ": " << r.status;
      EXPECT_FALSE(r.duplicate);
    }
  };
  update("a", 1, 4);
  // A part past the round's: refused, typed.
  std::vector<std::string> one = Frames(std::vector<float>(kDim, 1));
  ChunkIn third = Chunk("b", one, 0);
  third.part = 2;
  const ChunkResult refused = e->AcceptChunk(third);
  EXPECT_EQ(refused.reason, RejectReason::kPart);
  EXPECT_NE(std::string(refused.status.message()).find("takes 2 part(s)"), std::string::npos)
      << refused.status;
  update("b", 3, 8);
  EXPECT_TRUE(e->AllComplete());
  const std::vector<float> m0 = model->Mean().value(), m1 = control->Mean().value();
  for (size_t i = 0; i < kDim; ++i) {
    ASSERT_FLOAT_EQ(m0[i], 2.0f) << i;  // equal weights: (1 + 3) / 2
    ASSERT_NEAR(m1[i], 6.0f, 1e-5) << i;
  }
  // A plain round takes part 0 only.
  auto plain = Engine({"c"});
  ASSERT_TRUE(plain
                  ->OpenRound({"c"}, Clock::Real()->Now() + std::chrono::seconds(9),
                              std::make_shared<WeightedSumCollector>(kDim))
                  .ok());
  ChunkIn part1 = Chunk("c", one, 0);
  part1.part = 1;
  EXPECT_EQ(plain->AcceptChunk(part1).reason, RejectReason::kPart);
  EXPECT_TRUE(plain->AcceptChunk(Chunk("c", one, 0)).status.ok());
}

// The mean and robust aggregators collect part 0 per client and take only complete
// updates: an update whose last chunk is of part 1 (SCAFFOLD sends its control variate's
// change after the model update) is complete in part 0's collector too, and one whose
// part 1 never came is not, in either.
TEST(PartCollector, AnUpdateIsCompleteInEveryPartWhicheverPartEndsIt) {
  auto e = Engine({"a", "b"});
  auto model = std::make_shared<PerClientCollector>(/*compact=*/true);
  auto control = std::make_shared<PerClientCollector>(/*compact=*/true);
  auto parts = std::make_shared<PartCollector>(
      std::vector<PartCollector::Part>{{model, nullptr}, {control, nullptr}});
  ASSERT_TRUE(e->OpenRound({"a", "b"}, Clock::Real()->Now() + std::chrono::seconds(9), parts).ok());
  auto send = [&](const std::string& client, bool last_part) {
    std::vector<std::string> frames = Frames(std::vector<float>(kDim, 1));
    const size_t first = frames.size();
    for (auto& f : Frames(std::vector<float>(kDim, 2))) frames.push_back(f);
    const size_t n = last_part ? frames.size() : first;
    for (uint32_t i = 0; i < n; ++i) {
      ChunkIn c = Chunk(client, frames, i);
      c.part = i < first ? 0 : 1;
      ASSERT_TRUE(e->AcceptChunk(c).status.ok()) << client << " chunk " << i;
    }
  };
  send("a", true);
  send("b", false);  // part 0 only: the update is not complete
  EXPECT_EQ(model->CompleteClients(), std::set<std::string>{"a"});
  EXPECT_EQ(control->CompleteClients(), std::set<std::string>{"a"});
  EXPECT_EQ(model->EarliestComplete(2), std::set<std::string>{"a"});
  EXPECT_EQ(model->Updates().at("b").frames.size(), model->Updates().at("a").frames.size());
  EXPECT_FALSE(model->Updates().at("b").complete);
}

}  // namespace
}  // namespace fedlgc::coordinator
