// GradiVeQ's bases at the coordinator: the schedule of fp32 fit rounds and coded rounds,
// the spec each round sends, the blob served, and the basis in force across a restart.
#include "modes/fedavg/gradiveq_bases.h"

#include <filesystem>
#include <random>

#include "coordinator/collectors.h"
#include "gtest/gtest.h"

namespace fedlgc::modes {
namespace {

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"fc1.weight", {50, 64}}, {"fc1.bias", {50}}}).value();
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/gradiveq-bases-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<coordinator::RoundEngine> Engine(const codecs::ModelLayout& layout,
                                                 const std::string& codec) {
  coordinator::EngineOptions eo;
  eo.plan.codec = codec;
  eo.layout = layout;
  coordinator::EngineState state;
  state.model.assign(layout.dim(), 0.0f);
  return std::make_unique<coordinator::RoundEngine>(eo, std::move(state));
}

// The spec the engine sends a participant of a round opened now.
std::string SpecOfNextRound(coordinator::RoundEngine& engine) {
  engine.roster().Register("c", 10);
  auto sum = std::make_shared<coordinator::WeightedSumCollector>(engine.dim());
  EXPECT_TRUE(engine.OpenRound({"c"}, coordinator::Clock::Real()->Now(), sum).ok());
  const std::string spec = engine.OpenRoundFor("c")->codec;
  EXPECT_TRUE(engine.CommitModel(engine.ModelVector(), {}).ok());
  return spec;
}

std::vector<float> Step(uint64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.01f);
  std::vector<float> s(dim);
  for (float& v : s) v = g(rng);
  return s;
}

TEST(GradiveqBases, FitRoundsGoFp32AndTheRoundsBetweenNameTheBasisInForce) {
  const auto layout = Layout();
  const std::string codec = "gradiveq(dims=4,slice=16,refit=3)";
  const std::string dir = FreshDir("schedule");
  auto bases = GradiveqBases::Create(codec, layout, dir, 0).value();
  auto engine = Engine(layout, codec);
  RoundReport report;
  // Round 1: no basis yet, so fp32; nothing is served.
  const codecs::LinearCode* code = bases->BeginRound(*engine, 1);
  EXPECT_TRUE(bases->fitting());
  EXPECT_EQ(code->code_size(), layout.dim());
  EXPECT_EQ(SpecOfNextRound(*engine).find("basis="), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(bases->Blob(1).status()));
  // A round that moved nothing fits nothing: round 2 tries again.
  ASSERT_TRUE(bases->EndRound(1, std::vector<float>(layout.dim(), 0.0f), &report).ok());
  EXPECT_EQ(report.figures.at("gradiveq_basis"), 0);
  bases->BeginRound(*engine, 2);
  EXPECT_TRUE(bases->fitting());
  ASSERT_TRUE(bases->EndRound(2, Step(layout.dim(), 1), &report).ok());
  EXPECT_EQ(report.figures.at("gradiveq_basis"), 2);
  EXPECT_GT(report.figures.at("gradiveq_kept"), 4.0 / 16);
  // Rounds 3 and 4 code against basis 2 (200 slices of 16 to 4 values, the bias fp32).
  for (uint64_t round : {3, 4}) {
    code = bases->BeginRound(*engine, round);
    EXPECT_FALSE(bases->fitting()) << round;
    EXPECT_EQ(code->code_size(), 200u * 4 + 50);
    const std::string spec = SpecOfNextRound(*engine);
    const auto named = codecs::RoundKindOf(spec).basis_named;
    ASSERT_TRUE(named.has_value()) << spec;
    EXPECT_EQ(named->first, 2u);
    ASSERT_TRUE(bases->EndRound(round, Step(layout.dim(), round), &report).ok());
  }
  auto blob = bases->Blob(2);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto served = codecs::SliceBasis::Parse((*blob)->bytes, layout);
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(served->word(), codecs::RoundKindOf(SpecOfNextRound(*engine)).basis_named->second);
  // Round 5 = 2 + refit: fp32 again, and its step fits basis 5.
  bases->BeginRound(*engine, 5);
  EXPECT_TRUE(bases->fitting());
  ASSERT_TRUE(bases->EndRound(5, Step(layout.dim(), 9), &report).ok());
  EXPECT_TRUE(absl::IsNotFound(bases->Blob(2).status()));
  EXPECT_TRUE(bases->Blob(5).ok());
}

TEST(GradiveqBases, WarmupRoundsRunThePlansCodecAndTheFitsStartAfterThem) {
  const auto layout = Layout();
  const std::string codec = "gradiveq(dims=4,slice=16,refit=3)";
  auto bases = GradiveqBases::Create(codec, layout, FreshDir("warmup"), 0).value();
  coordinator::EngineOptions eo;
  eo.plan.codec = codec;
  eo.plan.warmup_codecs = {"fp16"};
  eo.layout = layout;
  coordinator::EngineState state;
  state.model.assign(layout.dim(), 0.0f);
  coordinator::RoundEngine engine(eo, std::move(state));
  RoundReport report;
  EXPECT_EQ(bases->BeginRound(engine, 1), nullptr);
  EXPECT_FALSE(bases->fitting());
  EXPECT_EQ(SpecOfNextRound(engine), "fp16");
  ASSERT_TRUE(bases->EndRound(1, Step(layout.dim(), 1), &report).ok());
  EXPECT_TRUE(absl::IsNotFound(bases->Blob(1).status())) << "a warm-up round fits nothing";
  EXPECT_NE(bases->BeginRound(engine, 2), nullptr);
  EXPECT_TRUE(bases->fitting());
}

TEST(GradiveqBases, ARestartedCoordinatorNamesAndServesTheBasisItSaved) {
  const auto layout = Layout();
  const std::string codec = "gradiveq(dims=4,slice=16,refit=10)";
  const std::string dir = FreshDir("restart");
  std::string word, bytes;
  {
    auto bases = GradiveqBases::Create(codec, layout, dir, 0).value();
    auto engine = Engine(layout, codec);
    RoundReport report;
    bases->BeginRound(*engine, 1);
    ASSERT_TRUE(bases->EndRound(1, Step(layout.dim(), 3), &report).ok());
    bases->BeginRound(*engine, 2);
    word = codecs::RoundKindOf(SpecOfNextRound(*engine)).basis_named->second;
    bytes = bases->Blob(1).value()->bytes;
    ASSERT_TRUE(bases->Save(2).ok());
  }
  auto bases = GradiveqBases::Create(codec, layout, dir, 2).value();
  auto engine = Engine(layout, codec);
  bases->BeginRound(*engine, 3);
  EXPECT_FALSE(bases->fitting());
  EXPECT_EQ(codecs::RoundKindOf(SpecOfNextRound(*engine)).basis_named->second, word);
  EXPECT_EQ(bases->Blob(1).value()->bytes, bytes);
  // A checkpoint with no saved bases beside it: the next round fits new ones.
  auto fresh = GradiveqBases::Create(codec, layout, dir, 7).value();
  fresh->BeginRound(*engine, 8);
  EXPECT_TRUE(fresh->fitting());
  // ef(gradiveq(...)) is refused with a message that says why.
  auto wrapped = GradiveqBases::Create("ef(" + codec + ")", layout, dir, 0);
  ASSERT_FALSE(wrapped.ok());
  EXPECT_NE(wrapped.status().message().find("clients add"), std::string::npos);
  // Saved bases that do not parse for this layout are data loss, not a silent refit.
  const auto other = codecs::ModelLayout::Create({{"fc1.weight", {60, 64}}}).value();
  EXPECT_TRUE(absl::IsDataLoss(GradiveqBases::Create(codec, other, dir, 2).status()));
}

}  // namespace
}  // namespace fedlgc::modes
