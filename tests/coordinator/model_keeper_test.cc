// The kept models and the export (coordinator/model_keeper.h): the last rounds and the
// best one are kept and pruned; the export follows the newest round, or with
// --export-best the best, across a restart; a kept round exports again to the same files.
#include "coordinator/model_keeper.h"

#include <filesystem>

#include "base/file.h"
#include "core/model.h"
#include "core/npz.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fedlgc::coordinator {
namespace {

namespace fs = std::filesystem;

class Keeper : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/keeper-" +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    model_ = core::Model::Create("mlp", 1).value()->GetFlat();
  }
  KeeperOptions Options(bool best) const {
    KeeperOptions o;
    o.state_dir = dir_ + "/state";
    o.export_path = dir_ + "/out/model.pt";
    o.export_best = best;
    o.keep = 2;
    o.model.model = "mlp";
    o.job = "job-key";
    o.job_id = "fedlgc-mlp";
    return o;
  }
  // Round r's model (its weights scaled, so rounds differ) with the accuracy `acc`.
  void Keep(ModelKeeper& k, uint64_t round, double acc) {
    RoundReport rep;
    rep.round = round;
    rep.accuracy = acc;
    rep.loss = acc < 0 ? -1 : 1 - acc;
    std::vector<float> w = model_;
    for (float& v : w) v *= static_cast<float>(round);
    ASSERT_TRUE(k.Keep(w, round, &rep).ok());
    EXPECT_EQ(rep.Label("export_round"), std::to_string(k.exported_round()));
    EXPECT_GE(rep.Figure("export_seconds", -1), 0);
  }
  uint64_t ExportedRound() const {
    return nlohmann::json::parse(ReadFile(dir_ + "/out/model.json").value())["round"];
  }

  std::string dir_;
  std::vector<float> model_;
};

TEST_F(Keeper, KeepsTheLastRoundsAndTheBestAndExportsTheNewest) {
  auto k = ModelKeeper::Create(Options(false));
  ASSERT_TRUE(k.ok()) << k.status();
  Keep(**k, 1, 0.5);
  Keep(**k, 2, 0.7);
  Keep(**k, 3, -1);  // not evaluated
  Keep(**k, 4, 0.6);
  EXPECT_EQ(KeptRounds(dir_ + "/state"), (std::vector<uint64_t>{3, 4}));
  auto best = ReadKeptModel(KeptBestPath(dir_ + "/state"));
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->round, 2u);
  EXPECT_EQ((*best)->metric, "accuracy");
  EXPECT_DOUBLE_EQ((*best)->accuracy, 0.7);
  EXPECT_EQ((*best)->weights[0], 2 * model_[0]);
  EXPECT_EQ(ExportedRound(), 4u);
  auto three = ReadKeptModel(KeptRoundPath(dir_ + "/state", 3));
  ASSERT_TRUE(three.ok() && three->has_value());
  EXPECT_EQ((*three)->metric, "");
  // The export holds round 4's weights: loaded back as a module, they are its flat vector.
  auto loaded = core::Model::Create(dir_ + "/out/model.pt", 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<float> w = (*loaded)->GetFlat();
  for (size_t i = 0; i < w.size(); i += 997) ASSERT_FLOAT_EQ(w[i], 4 * model_[i]);
}

TEST_F(Keeper, ExportBestHoldsTheBestRoundAcrossARestart) {
  {
    auto k = ModelKeeper::Create(Options(true));
    ASSERT_TRUE(k.ok()) << k.status();
    Keep(**k, 1, 0.5);
    EXPECT_EQ(ExportedRound(), 1u);
    Keep(**k, 2, 0.8);
    Keep(**k, 3, 0.6);
    EXPECT_EQ(ExportedRound(), 2u);
  }
  // Restarted: the best so far is round 2's, which a worse round 4 does not replace.
  auto k = ModelKeeper::Create(Options(true));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->exported_round(), 2u);
  Keep(**k, 4, 0.7);
  EXPECT_EQ(ExportedRound(), 2u);
  Keep(**k, 5, 0.9);
  EXPECT_EQ(ExportedRound(), 5u);
  // A regression job's metric is the loss, lower is better.
  KeptModel loss;
  loss.metric = "loss";
  loss.loss = 0.2;
  KeptModel worse = loss;
  worse.loss = 0.3;
  EXPECT_GT(*loss.Score(), *worse.Score());
}

TEST_F(Keeper, AKeptRoundExportsAgainToTheSameWeights) {
  auto k = ModelKeeper::Create(Options(false));
  ASSERT_TRUE(k.ok()) << k.status();
  Keep(**k, 1, 0.5);
  auto kept = ReadKeptModel(KeptRoundPath(dir_ + "/state", 1));
  ASSERT_TRUE(kept.ok() && kept->has_value());
  auto files = core::ExportFiles::For(dir_ + "/again/r1");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->pt, dir_ + "/again/r1.pt");
  EXPECT_EQ(files->npz, dir_ + "/again/r1.npz");
  ASSERT_TRUE(core::PrepareExport(*files).ok());
  ASSERT_TRUE(ExportKept(**kept, dir_ + "/state", "", *files, "round").ok());
  auto again = core::ReadNpz(files->npz), first = core::ReadNpz(dir_ + "/out/model.npz");
  ASSERT_TRUE(again.ok() && first.ok());
  ASSERT_EQ(again->size(), first->size());
  for (const auto& [name, a] : *first) EXPECT_EQ(again->at(name).data, a.data) << name;
  // A module job's round needs the module's file: a state folder without it says so.
  KeptModel module = **kept;
  module.model = "net.pt";
  module.model_sha256 = std::string(64, 'a');
  auto missing = ExportKept(module, dir_ + "/state", "", *files, "round");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("give its file with --model"), std::string::npos);
}

TEST_F(Keeper, ExportPathsThatCannotBeWrittenAreRefusedAtCreate) {
  KeeperOptions o = Options(false);
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/blocker", "x").ok());
  o.export_path = dir_ + "/blocker/model.pt";
  auto k = ModelKeeper::Create(o);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("cannot make its folder"), std::string::npos) << k.status();
  o.export_path = dir_ + "/model.npz";
  EXPECT_FALSE(ModelKeeper::Create(o).ok());
  o.export_path = dir_;
  EXPECT_FALSE(ModelKeeper::Create(o).ok());
  // A damaged kept model is refused by name.
  ASSERT_TRUE(AtomicWriteFile(KeptBestPath(dir_ + "/state"), "garbage bytes here").ok());
  auto bad = ReadKeptModel(KeptBestPath(dir_ + "/state"));
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace fedlgc::coordinator
