// Tests for TorchScript models behind the model facade (core/model.h), on modules written
// in Python by tests/core/make_test_models.py: the flat layout is Python's, coordinate for
// coordinate; buffers average or stay local; a module's own loss, Adam, sequence and
// regression models train; what does not fit is refused before any training, with a
// message that names the model, the data and what is wrong.
#include "core/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "base/file.h"
#include "core/dataset.h"
#include "core/float_bytes.h"
#include "core/npz.h"
#include "core/optimizer.h"
#include "core/statistics.h"
#include "gtest/gtest.h"

namespace fedlgc::core {
namespace {

namespace fs = std::filesystem;

class ScriptModel : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(Path("done"))) GTEST_SKIP() << "no python3-torch: fixtures not made";
  }
  static std::string Path(const std::string& name) {
    return std::string(FEDLGC_TEST_MODELS) + "/" + name;
  }
  static std::unique_ptr<Model> Load(const std::string& name, const std::string& buffers = "average",
                                     const std::string& loss = "auto") {
    ModelOptions o;
    o.model = Path(name + ".pt");
    o.buffers = buffers;
    o.loss = loss;
    auto m = Model::Create(o, 0);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }
};

// A classification task: `classes` Gaussian blobs in examples of `shape`.
Dataset Blobs(size_t n, std::vector<int64_t> shape, uint32_t classes, uint64_t seed) {
  Dataset d;
  d.source = "blobs";
  d.shape = std::move(shape);
  d.n = n;
  d.classes = classes;
  const size_t es = d.example_size();
  std::mt19937_64 centre_rng(99);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> centres(classes * es);
  for (float& c : centres) c = g(centre_rng);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const int32_t c = static_cast<int32_t>(rng() % classes);
    d.labels.push_back(c);
    for (size_t j = 0; j < es; ++j) d.x.push_back(centres[c * es + j] + 0.5f * g(rng));
  }
  return d;
}

std::vector<uint32_t> All(const Dataset& d) {
  std::vector<uint32_t> idx(d.size());
  std::iota(idx.begin(), idx.end(), 0u);
  return idx;
}

TEST_F(ScriptModel, TheFlatLayoutIsPythons) {
  for (const std::string name :
       {"bn_loss", "bn_frozen", "mlp_traced", "gru", "regress", "tuple_out", "tied"}) {
    auto m = Load(name);
    ASSERT_NE(m, nullptr) << name;
    std::ifstream f(Path(name + ".layout.txt"));
    std::string line;
    size_t i = 0;
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string tensor;
      in >> tensor;
      std::vector<uint64_t> shape;
      for (uint64_t d; in >> d;) shape.push_back(d);
      ASSERT_LT(i, m->layout().tensors().size()) << name;
      EXPECT_EQ(m->layout().tensors()[i].name, tensor) << name;
      EXPECT_EQ(m->layout().tensors()[i].shape, shape) << name << " " << tensor;
      ++i;
    }
    EXPECT_EQ(i, m->layout().tensors().size()) << name;
    const std::vector<float> python =
        FloatsFromBytes(ReadFile(Path(name + ".flat.f32")).value(), m->dim(), name).value();
    EXPECT_EQ(m->GetFlat(), python) << name << ": the file's weights, in Python's order";
  }
}

TEST_F(ScriptModel, BuffersAverageOrStayLocal) {
  auto avg = Load("bn_loss", "average");
  auto local = Load("bn_loss", "local");
  ASSERT_TRUE(avg && local);
  // BatchNorm2d(4): running_mean and running_var are coordinates; num_batches_tracked
  // (an integer) is not.
  EXPECT_EQ(avg->dim(), local->dim() + 8);
  EXPECT_EQ(avg->layout().tensors().back().name, "bn.running_var");
  EXPECT_TRUE(avg->GetLocalTensors().empty());
  EXPECT_EQ(local->GetLocalTensors().size(), 8u);
  // The statistics travel scale-free: the last 4 coordinates are log(var + 1e-5) of the
  // file's variances (drawn in [0.5, 2] by the fixture script), the 4 before them
  // mean / sqrt(var + 1e-5); they come back as they went.
  std::vector<float> w = avg->GetFlat();
  for (size_t i = w.size() - 4; i < w.size(); ++i) {
    EXPECT_GT(w[i], std::log(0.5f) - 1e-4f);
    EXPECT_LT(w[i], std::log(2.0f) + 1e-4f);
  }
  ASSERT_TRUE(avg->SetFlat(w).ok());
  const std::vector<float> again = avg->GetFlat();
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(again[i], w[i], 1e-5f * (1 + std::fabs(w[i])));
  // However far a lossy code takes them, the statistics stay usable: a variance at zero
  // at worst, a finite mean.
  w[w.size() - 1] = -80.0f;
  w[w.size() - 5] = 1e6f;
  ASSERT_TRUE(avg->SetFlat(w).ok());
  const Dataset data = Blobs(64, {1, 8, 8}, 4, 3);
  auto ev = avg->Evaluate(data);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_TRUE(std::isfinite(ev->loss));
  // Training moves a local model's buffers, and evaluation (batch statistics) leaves them.
  const Dataset local_data = Blobs(256, {1, 8, 8}, 4, 1);
  const std::vector<float> before = local->GetLocalTensors();
  TrainOptions opts;
  opts.steps = 5;
  ASSERT_TRUE(local->Train(local_data, All(local_data), opts).ok());
  const std::vector<float> trained = local->GetLocalTensors();
  EXPECT_NE(trained, before);
  auto local_ev = local->Evaluate(local_data);
  ASSERT_TRUE(local_ev.ok()) << local_ev.status();
  EXPECT_EQ(local->GetLocalTensors(), trained);
  ASSERT_TRUE(local->SetLocalTensors(before).ok());
  EXPECT_EQ(local->GetLocalTensors(), before);
  EXPECT_FALSE(local->SetLocalTensors(std::vector<float>(3)).ok());
}

// The values of one tensor, by its state_dict() name.
std::vector<float> TensorOf(const Model& m, const std::string& name) {
  auto arrays = m.StateArrays();
  EXPECT_TRUE(arrays.ok()) << arrays.status();
  if (!arrays.ok()) return {};
  auto it = arrays->find(name);
  if (it == arrays->end()) {
    ADD_FAILURE() << "no tensor " << name;
    return {};
  }
  std::vector<float> out(it->second.elements());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(it->second.At(i));
  return out;
}

TEST_F(ScriptModel, FrozenParametersNeitherTravelNorTrain) {
  auto all = Load("bn_loss");
  auto frozen = Load("bn_frozen");  // conv.weight [4, 1, 3, 3] and conv.bias: requires_grad=False
  ASSERT_TRUE(all && frozen);
  EXPECT_EQ(frozen->dim(), all->dim() - 40);
  EXPECT_EQ(frozen->layout().tensors().front().name, "bn.weight");
  EXPECT_EQ(frozen->parameter_groups().frozen, (std::vector<std::string>{"conv.weight", "conv.bias"}));
  EXPECT_EQ(frozen->parameter_groups().frozen_values, 40u);
  EXPECT_EQ(frozen->parameter_groups().local_values, 0u);
  const std::vector<float> conv = TensorOf(*frozen, "conv.weight");
  const std::vector<float> w0 = frozen->GetFlat();
  const Dataset data = Blobs(256, {1, 8, 8}, 4, 1);
  TrainOptions opts;
  opts.steps = 5;
  ASSERT_TRUE(frozen->Train(data, All(data), opts).ok());
  EXPECT_NE(frozen->GetFlat(), w0) << "the rest trains";
  EXPECT_EQ(TensorOf(*frozen, "conv.weight"), conv) << "the frozen convolution does not";
  std::vector<float> other(frozen->dim(), 0.25f);
  ASSERT_TRUE(frozen->SetFlat(other).ok());
  EXPECT_EQ(TensorOf(*frozen, "conv.weight"), conv) << "nor does a model set from the flat vector";
  // The export keeps them frozen, with the file's values.
  auto bytes = frozen->TorchScriptBytes({});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string path = testing::TempDir() + "/frozen_export.pt";
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, *bytes).ok());
  ModelOptions back;
  back.model = path;
  auto again = Model::Create(back, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->dim(), frozen->dim());
  EXPECT_EQ(TensorOf(**again, "conv.weight"), conv);
}

TEST_F(ScriptModel, FreezeAndLocalParamsNameParametersByPattern) {
  // --freeze on a built-in: the MLP without its first layer's weights in the vector.
  ModelOptions mlp;
  mlp.model = "mlp";
  auto whole = Model::Create(mlp, 1);
  mlp.freeze = "^fc1\\.weight$";
  auto part = Model::Create(mlp, 1);
  ASSERT_TRUE(whole.ok() && part.ok()) << part.status();
  EXPECT_EQ((*part)->dim(), (*whole)->dim() - (*part)->parameter_groups().frozen_values);
  EXPECT_EQ((*part)->parameter_groups().frozen, (std::vector<std::string>{"fc1.weight"}));
  EXPECT_GT((*part)->parameter_groups().frozen_values, 100000u);

  // --local-params: the classifier is each client's, before the local buffers.
  ModelOptions o;
  o.model = Path("bn_loss.pt");
  o.local_params = "^fc\\.";
  o.buffers = "local";
  auto personal = Model::Create(o, 0);
  ASSERT_TRUE(personal.ok()) << personal.status();
  Model& m = **personal;
  const size_t fc = 4 * 8 * 8 * 4 + 4;
  EXPECT_EQ(m.parameter_groups().local, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(m.parameter_groups().local_values, fc);
  EXPECT_EQ(m.dim(), 40u + 8u) << "conv and bn's weights travel; fc and the statistics stay";
  const std::vector<float> own = m.GetLocalTensors();
  ASSERT_EQ(own.size(), fc + 8);
  EXPECT_EQ(std::vector<float>(own.begin(), own.begin() + 4 * 256), TensorOf(m, "fc.weight"));
  // It trains (with a SCAFFOLD correction of the vector's size: none for it), and the
  // global model set into the vector leaves it as this client trained it.
  const Dataset data = Blobs(256, {1, 8, 8}, 4, 1);
  TrainOptions opts;
  opts.steps = 5;
  const std::vector<float> correction(m.dim(), 0.01f);
  opts.correction = correction;
  ASSERT_TRUE(m.Train(data, All(data), opts).ok());
  const std::vector<float> trained = m.GetLocalTensors();
  EXPECT_NE(trained, own);
  ASSERT_TRUE(m.SetFlat(std::vector<float>(m.dim(), 0.1f)).ok());
  EXPECT_EQ(m.GetLocalTensors(), trained);
  ASSERT_TRUE(m.SetLocalTensors(own).ok());
  EXPECT_EQ(m.GetLocalTensors(), own);

  // What cannot be: a pattern that is not one, a parameter both frozen and personal, and
  // nothing left to travel.
  ModelOptions bad = o;
  bad.freeze = "fc(";
  auto st = Model::Create(bad, 0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--freeze 'fc(' is not a regular expression"), std::string::npos) << st;
  bad.freeze = "fc.bias";
  st = Model::Create(bad, 0).status();
  EXPECT_NE(st.message().find("fc.bias matches both --freeze and --local-params"), std::string::npos)
      << st;
  bad.freeze = "conv|bn";
  st = Model::Create(bad, 0).status();
  EXPECT_NE(st.message().find("no parameter travels"), std::string::npos) << st;
  bad.freeze = "^fc1\\.";  // a typo for fc: names nothing
  st = Model::Create(bad, 0).status();
  EXPECT_NE(st.message().find("--freeze '^fc1\\.' names no parameter (they are: conv.weight, "
                              "conv.bias, bn.weight, bn.bias, fc.weight, fc.bias)"),
            std::string::npos)
      << st;
  ModelOptions frozen_mine;
  frozen_mine.model = Path("bn_frozen.pt");
  frozen_mine.local_params = "^conv\\.";
  st = Model::Create(frozen_mine, 0).status();
  EXPECT_NE(st.message().find("conv.weight matches --local-params but the module freezes it"),
            std::string::npos)
      << st;
}

TEST_F(ScriptModel, ItsOwnLossSgdAndAdamTrainIt) {
  const Dataset train = Blobs(600, {1, 8, 8}, 4, 1), test = Blobs(300, {1, 8, 8}, 4, 2);
  for (const std::string optimizer : {"", "sgd(lr=0.05,momentum=0.5)", "adam(lr=0.01)"}) {
    auto m = Load("bn_loss");
    ASSERT_TRUE(m->CheckFits(train).ok());
    const double before = m->Evaluate(test)->accuracy;
    TrainOptions opts;
    opts.epochs = 2;
    opts.optimizer = optimizer;
    auto r = m->Train(train, All(train), opts);
    ASSERT_TRUE(r.ok()) << r.status();
    const double after = m->Evaluate(test)->accuracy;
    EXPECT_GT(after, 0.9) << optimizer << " (from " << before << ")";
    // The module's loss has label smoothing 0.1: it stays above what plain cross entropy
    // of a model this sure would be.
    EXPECT_GT(m->Evaluate(test)->loss, 0.3) << optimizer;
  }
  TrainOptions bad;
  bad.optimizer = "rmsprop(lr=1)";
  auto m = Load("bn_loss");
  EXPECT_FALSE(m->Train(train, All(train), bad).ok());
}

TEST_F(ScriptModel, SequenceAndRegressionModelsTrain) {
  // Three kinds of sequence: rising, falling, flat, plus noise.
  Dataset seq;
  seq.source = "sequences";
  seq.shape = {12, 1};
  seq.classes = 3;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0, 0.2f);
  for (size_t i = 0; i < 450; ++i) {
    const int c = static_cast<int>(i % 3);
    for (int t = 0; t < 12; ++t) seq.x.push_back((c == 0 ? t : c == 1 ? 12 - t : 6) / 6.0f + g(rng));
    seq.labels.push_back(c);
  }
  seq.n = 450;
  auto gru = Load("gru");
  ASSERT_TRUE(gru->CheckFits(seq).ok()) << gru->CheckFits(seq);
  TrainOptions opts;
  opts.epochs = 4;
  opts.optimizer = "adam(lr=0.01)";
  ASSERT_TRUE(gru->Train(seq, All(seq), opts).ok());
  EXPECT_GT(gru->Evaluate(seq)->accuracy, 0.9);

  // y = 2 a - b + 0.5 c + 1, four features (the fourth is noise).
  Dataset reg;
  reg.source = "linear";
  reg.shape = {4};
  reg.target_shape = {1};
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t i = 0; i < 500; ++i) {
    float f[4];
    for (float& v : f) v = u(rng);
    reg.x.insert(reg.x.end(), f, f + 4);
    reg.targets.push_back(2 * f[0] - f[1] + 0.5f * f[2] + 1);
  }
  reg.n = 500;
  auto lin = Load("regress");
  ASSERT_TRUE(lin->CheckFits(reg).ok()) << lin->CheckFits(reg);
  const double before = lin->Evaluate(reg)->loss;
  opts.epochs = 20;
  ASSERT_TRUE(lin->Train(reg, All(reg), opts).ok());
  auto ev = lin->Evaluate(reg);
  EXPECT_LT(ev->loss, 0.01 * before);
  EXPECT_TRUE(std::isnan(ev->accuracy)) << "no accuracy for float targets";
}

TEST_F(ScriptModel, WhatDoesNotFitIsRefusedBeforeTraining) {
  auto has = [](const absl::Status& st, std::initializer_list<std::string> parts) {
    if (st.ok()) return testing::AssertionFailure() << "fits";
    for (const std::string& p : parts) {
      if (std::string(st.message()).find(p) == std::string::npos) {
        return testing::AssertionFailure() << "'" << st.message() << "' lacks '" << p << "'";
      }
    }
    return testing::AssertionSuccess();
  };
  auto bn = Load("bn_loss");
  // Images of another shape: found by a forward pass on the first batch.
  EXPECT_TRUE(has(bn->CheckFits(Blobs(10, {3, 8, 8}, 4, 1)),
                  {"bn_loss.pt", "does not fit blobs", "[2, 3, 8, 8]", "fails in forward"}));
  // Labels beyond the model's outputs (a module with its own loss too).
  auto mlp = Load("mlp_traced");
  EXPECT_TRUE(has(mlp->CheckFits(Blobs(50, {1, 28, 28}, 12, 1)),
                  {"mlp_traced.pt", "labels go up to 11", "outputs 10 classes"}));
  EXPECT_TRUE(mlp->CheckFits(Blobs(50, {784}, 10, 1)).ok()) << "flattened images fit too";
  EXPECT_TRUE(has(bn->CheckFits(Blobs(50, {1, 8, 8}, 6, 1)),
                  {"bn_loss.pt", "labels go up to 5", "outputs 4 classes"}))
      << "its own loss() too";
  // What the first batch's check did not see ends the client: not a retry.
  auto trained = mlp->Train(Blobs(50, {784}, 12, 1), All(Blobs(50, {784}, 12, 1)), TrainOptions());
  EXPECT_EQ(trained.status().code(), absl::StatusCode::kFailedPrecondition) << trained.status();
  // Float targets with cross entropy, class labels with mse.
  Dataset reg = Blobs(8, {4}, 2, 1);
  reg.targets.assign(reg.labels.begin(), reg.labels.end());
  reg.labels.clear();
  reg.classes = 0;
  EXPECT_TRUE(has(Load("regress", "average", "cross_entropy")->CheckFits(reg),
                  {"cross_entropy needs class labels"}));
  EXPECT_TRUE(has(Load("regress", "average", "mse")->CheckFits(Blobs(8, {4}, 2, 1)),
                  {"mse needs float targets"}));
  // Targets of another size than the outputs.
  reg.target_shape = {2};
  reg.targets.resize(16);
  EXPECT_TRUE(has(Load("regress")->CheckFits(reg), {"gives outputs [2, 1]", "targets [2, 2]"}));
  // Class labels saved as floats: the message says how to read them as classes.
  Dataset floats = Blobs(8, {784}, 10, 1);
  floats.targets.assign(floats.labels.begin(), floats.labels.end());
  floats.labels.clear();
  floats.classes = 0;
  EXPECT_TRUE(has(mlp->CheckFits(floats), {"outputs [2, 10]", "--targets classes"}));
  // A tuple's first element is the output.
  EXPECT_TRUE(Load("tuple_out")->CheckFits(Blobs(8, {6}, 2, 1)).ok());
  // The built-ins take 28x28 images only.
  EXPECT_TRUE(has(Model::Create("cnn", 1).value()->CheckFits(Blobs(4, {3, 32, 32}, 2, 1)),
                  {"built-in cnn", "[3, 32, 32]"}));
}

TEST_F(ScriptModel, FilesThatAreNotTorchScriptAreRefused) {
  ModelOptions o;
  o.model = Path("state_dict.pt");
  auto m = Model::Create(o, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("state_dict.pt: not a TorchScript file"), std::string::npos)
      << m.status();
  o.model = Path("numpy_plain.npz");
  EXPECT_FALSE(Model::Create(o, 0).ok());
  o.model = Path("missing.pt");
  EXPECT_NE(Model::Create(o, 0).status().message().find("no such file"), std::string::npos);
  o.model = Path("bn_loss.pt");
  o.loss = "mse";  // a loss() of its own decides
  EXPECT_NE(Model::Create(o, 0).status().message().find("has a loss() method"), std::string::npos);
  o.loss = "auto";
  o.buffers = "shared";
  EXPECT_NE(Model::Create(o, 0).status().message().find("--buffers"), std::string::npos);
}

// An export written and loaded back as a module: the same flat weights and the same
// outputs (loss) on the same data.
void ExpectExportRoundTrips(Model& m, const Dataset& data, const std::string& path) {
  const std::vector<float> w = m.GetFlat();
  auto bytes = m.TorchScriptBytes({{"fedlgc.json", "{\"round\": 7}"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(AtomicWriteFile(path, *bytes).ok());
  auto loaded = Model::Create(path, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ((*loaded)->dim(), m.dim()) << path;
  const std::vector<float> back = (*loaded)->GetFlat();
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(back[i], w[i], 1e-5f * (1 + std::fabs(w[i])));
  auto a = m.Evaluate(data), b = (*loaded)->Evaluate(data);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->loss, b->loss, 1e-5 * (1 + a->loss)) << path;
  if (data.classification()) {
    EXPECT_EQ(a->accuracy, b->accuracy) << path;
  }
}

// Token ids: each class a band of the vocabulary, sequences of 6 ids.
Dataset Tokens(size_t n, uint64_t seed) {
  Dataset d;
  d.source = "tokens";
  d.shape = {6};
  d.n = n;
  d.classes = 3;
  d.integer_inputs = true;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const int32_t c = static_cast<int32_t>(rng() % 3);
    d.labels.push_back(c);
    for (int t = 0; t < 6; ++t) d.ids.push_back(c * 16 + static_cast<int64_t>(rng() % 16));
  }
  return d;
}

TEST_F(ScriptModel, AnEmbeddingTrainsAndEvaluatesOnTokenIds) {
  auto m = Load("embed");
  ASSERT_NE(m, nullptr);
  const Dataset train = Tokens(600, 1), test = Tokens(300, 2);
  ASSERT_TRUE(m->CheckFits(train).ok()) << m->CheckFits(train);
  auto before = m->Evaluate(test);
  ASSERT_TRUE(before.ok()) << before.status();
  TrainOptions opts;
  opts.epochs = 3;
  opts.lr = 0.5f;
  ASSERT_TRUE(m->Train(train, All(train), opts).ok());
  auto after = m->Evaluate(test);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(after->accuracy, 0.9) << "before: " << before->accuracy;
  EXPECT_EQ(after->class_examples.size(), 3u);
  // The same ids as floats: refused before training, saying how to give integers.
  Dataset floats = train;
  floats.integer_inputs = false;
  floats.x.assign(floats.ids.begin(), floats.ids.end());
  floats.ids.clear();
  const absl::Status st = m->CheckFits(floats);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--inputs ids"), std::string::npos) << st;
}

TEST(Export, TheBuiltinsAreScriptedWithTheirNamesAndForward) {
  const Dataset data = SyntheticImages(200, 5);
  for (const std::string name : {"cnn", "mlp"}) {
    auto m = Model::Create(name, 3);
    ASSERT_TRUE(m.ok()) << m.status();
    TrainOptions opts;
    opts.steps = 3;
    ASSERT_TRUE((*m)->Train(data, All(data), opts).ok());
    const std::string path = testing::TempDir() + "/export-" + name + ".pt";
    ExpectExportRoundTrips(**m, data, path);
    auto arrays = (*m)->StateArrays();
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    std::vector<std::string> names;
    for (const auto& t : (*m)->layout().tensors()) names.push_back(t.name);
    std::vector<std::string> got;
    size_t values = 0;
    for (const auto& [n, a] : *arrays) {
      got.push_back(n);
      values += a.elements();
      EXPECT_EQ(a.type, NpyType::kF32) << n;
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(got, names) << name;
    EXPECT_EQ(values, (*m)->dim()) << name;
  }
}

TEST_F(ScriptModel, AModuleExportsWithItsStatisticsInTheirOwnForm) {
  auto m = Load("bn_loss", "average");
  ASSERT_NE(m, nullptr);
  const Dataset data = Blobs(256, {1, 8, 8}, 4, 1);
  TrainOptions opts;
  opts.steps = 6;
  ASSERT_TRUE(m->Train(data, All(data), opts).ok());
  // A flat vector as a round commits it: the statistics in travel form, moved.
  std::vector<float> w = m->GetFlat();
  w[w.size() - 1] += 0.5f;  // log(var + eps) of channel 3: its variance x1.65
  ASSERT_TRUE(m->SetFlat(w).ok());
  ExpectExportRoundTrips(*m, data, testing::TempDir() + "/export-bn.pt");
  auto arrays = m->StateArrays();
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  // The archive's running_var is the variance itself, not its travel form.
  const NpyArray& var = arrays->at("bn.running_var");
  ASSERT_EQ(var.elements(), 4u);
  EXPECT_NEAR(var.At(3), std::exp(w.back()) - 1e-5, 1e-4 * std::exp(w.back()));
  EXPECT_EQ(arrays->at("bn.num_batches_tracked").type, NpyType::kI64);
  EXPECT_GT(arrays->at("bn.num_batches_tracked").At(0), 0);
}

// The statistics re-estimated for a model's weights against the definition, computed here
// from the exported weights: the batches' mean of each batch's per-channel mean and
// unbiased variance of the convolution's output. The same whether the BatchNorm's momentum
// is 0.1 (bn_loss) or None (bn_stats); a pair of buffers its module never updates
// (bn_stats' whiten) is named and kept; the weights and the counters stay.
TEST_F(ScriptModel, ReestimatedStatisticsAreTheBatchesMeanWhateverTheMomentum) {
  const Dataset data = Blobs(200, {1, 8, 8}, 4, 5);
  std::vector<uint32_t> idx = All(data);
  std::shuffle(idx.begin(), idx.end(), std::mt19937_64(4));
  for (const char* name : {"bn_loss", "bn_stats"}) {
    SCOPED_TRACE(name);
    auto m = Load(name);
    ASSERT_NE(m, nullptr);
    const NpzArrays before = m->StateArrays().value();
    StatisticsOptions opts;  // batches of 64: 64, 64, 64, 8
    auto st = m->ReestimateStatistics(data, idx, opts);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->examples, 200u);
    EXPECT_EQ(st->batches, 4u);
    const bool whiten = std::string(name) == "bn_stats";
    EXPECT_EQ(st->skipped, whiten ? std::vector<uint32_t>{1} : std::vector<uint32_t>{});
    ASSERT_EQ(st->mean.size(), whiten ? 8u : 4u);
    // The oracle: conv(x) per batch, channel by channel, in doubles.
    const NpyArray& w = before.at("conv.weight");  // [4, 1, 3, 3]
    const NpyArray& b = before.at("conv.bias");
    std::vector<double> mean(4, 0), var(4, 0);
    size_t batches = 0;
    for (size_t at = 0; at < idx.size(); at += 64, ++batches) {
      const size_t len = std::min<size_t>(64, idx.size() - at);
      for (size_t c = 0; c < 4; ++c) {
        std::vector<double> out;
        for (size_t e = at; e < at + len; ++e) {
          const float* x = data.x.data() + idx[e] * 64;
          for (int i = 0; i < 8; ++i) {
            for (int j = 0; j < 8; ++j) {
              double v = b.At(c);
              for (int di = -1; di <= 1; ++di) {
                for (int dj = -1; dj <= 1; ++dj) {
                  if (i + di < 0 || i + di > 7 || j + dj < 0 || j + dj > 7) continue;
                  v += w.At(c * 9 + (di + 1) * 3 + dj + 1) * x[(i + di) * 8 + j + dj];
                }
              }
              out.push_back(v);
            }
          }
        }
        const double mu = std::accumulate(out.begin(), out.end(), 0.0) / out.size();
        double ss = 0;
        for (double v : out) ss += (v - mu) * (v - mu);
        mean[c] += mu;
        var[c] += ss / (out.size() - 1);
      }
    }
    const NpzArrays after = m->StateArrays().value();
    for (size_t c = 0; c < 4; ++c) {
      const double mu = mean[c] / batches, v = var[c] / batches;
      EXPECT_NEAR(st->mean[c], mu, 1e-4 * (1 + std::fabs(mu))) << "channel " << c;
      EXPECT_NEAR(st->var[c], v, 1e-4 * (1 + v)) << "channel " << c;
      EXPECT_EQ(after.at("bn.running_mean").At(c), st->mean[c]);
      EXPECT_EQ(after.at("bn.running_var").At(c), st->var[c]);
    }
    // Everything else as it was, to the bit.
    for (const auto& [n, a] : before) {
      if (n != "bn.running_mean" && n != "bn.running_var") {
        EXPECT_EQ(after.at(n).data, a.data) << n;
      }
    }
    // The flat vector holds the estimate as WriteStatistics writes it from the layout.
    std::vector<float> written = m->GetFlat();
    ASSERT_TRUE(
        WriteStatistics(StatisticsPairs(m->layout()), st->mean, st->var, st->skipped, written)
            .ok());
    const std::vector<float> flat = m->GetFlat();
    for (size_t i = 0; i < flat.size(); ++i) {
      EXPECT_NEAR(written[i], flat[i], 1e-6f * (1 + std::fabs(flat[i]))) << i;
    }
    // Deterministic: again from the estimate, the same estimate.
    auto again = m->ReestimateStatistics(data, idx, opts);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->mean, st->mean);
    EXPECT_EQ(again->var, st->var);
  }
  // At most max_batches; a single example is no batch; a built-in has no statistics.
  auto m = Load("bn_loss");
  ASSERT_NE(m, nullptr);
  StatisticsOptions two;
  two.max_batches = 2;
  EXPECT_EQ(m->ReestimateStatistics(data, idx, two)->examples, 128u);
  const NpzArrays kept = m->StateArrays().value();
  auto one = m->ReestimateStatistics(data, std::span<const uint32_t>(idx).first(1), two);
  EXPECT_TRUE(absl::IsInvalidArgument(one.status())) << one.status();
  EXPECT_EQ(m->StateArrays()->at("bn.running_var").data, kept.at("bn.running_var").data);
  auto cnn = Model::Create("cnn", 1);
  ASSERT_TRUE(cnn.ok());
  EXPECT_EQ((*cnn)->ReestimateStatistics(data, idx, two)->batches, 0u);
}

// FedProx's term, checked against plain SGD without a reference implementation: with
// momentum 0, two steps from w0 differ from the plain two steps by exactly lr x mu x (w0 -
// w1), w1 being the first step's weights (the term's gradient is 0 at w0 and mu (w1 - w0)
// at the second step).
TEST(Model, TheProximalTermPullsEachStepTowardsTheStartingWeights) {
  const Dataset data = Blobs(256, {1, 28, 28}, 10, 3);
  const std::vector<uint32_t> idx = All(data);
  auto train = [&](int steps, double mu) {
    auto m = Model::Create("mlp", 1);
    EXPECT_TRUE(m.ok()) << m.status();
    TrainOptions o;
    o.steps = steps;
    o.lr = 0.1f;
    o.batch_size = 32;
    o.seed = 5;
    o.optimizer = "sgd(momentum=0)";
    o.prox_mu = mu;
    EXPECT_TRUE((*m)->Train(data, idx, o).ok());
    return (*m)->GetFlat();
  };
  const double mu = 0.5, lr = 0.1;
  const std::vector<float> w0 = Model::Create("mlp", 1).value()->GetFlat();
  const std::vector<float> w1 = train(1, 0);
  const std::vector<float> plain = train(2, 0);
  const std::vector<float> prox = train(2, mu);
  ASSERT_EQ(prox.size(), plain.size());
  double moved = 0, worst = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double want = lr * mu * (static_cast<double>(w0[i]) - w1[i]);
    moved = std::max(moved, std::abs(want));
    worst = std::max(worst, std::abs((static_cast<double>(prox[i]) - plain[i]) - want));
  }
  EXPECT_GT(moved, 1e-4);    // the term did something
  EXPECT_LT(worst, 2e-6);    // and exactly this (float32 rounding of weights near 0.1)
  // Over many steps the term keeps the weights nearer w0.
  auto distance = [&](const std::vector<float>& w) {
    double d = 0;
    for (size_t i = 0; i < w.size(); ++i) d += (w[i] - w0[i]) * (w[i] - w0[i]);
    return std::sqrt(d);
  };
  EXPECT_LT(distance(train(40, 5.0)), 0.8 * distance(train(40, 0)));
}

// SCAFFOLD's correction: a step with correction v lands lr x v below the plain step, on
// every trainable coordinate, whatever the momentum (it moves the weights outside the
// optimizer); a correction of another size is refused before any step.
TEST(Model, TheCorrectionShiftsEachStepOutsideTheOptimizer) {
  const Dataset data = Blobs(256, {1, 28, 28}, 10, 3);
  const std::vector<uint32_t> idx = All(data);
  const size_t dim = Model::Create("mlp", 1).value()->dim();
  std::vector<float> v(dim);
  for (size_t i = 0; i < dim; ++i) v[i] = 0.01f * static_cast<float>((i * 37) % 11) - 0.05f;
  auto train = [&](std::span<const float> correction, absl::Status* status = nullptr) {
    auto m = Model::Create("mlp", 1);
    TrainOptions o;
    o.steps = 1;
    o.lr = 0.5f;  // the round's; the spec's 0.1 wins
    o.batch_size = 32;
    o.seed = 5;
    o.optimizer = "sgd(lr=0.1,momentum=0.9)";
    o.correction = correction;
    auto r = (*m)->Train(data, idx, o);
    if (status != nullptr) *status = r.status();
    if (r.ok()) {
      EXPECT_DOUBLE_EQ(r->lr, 0.1);
    }
    return (*m)->GetFlat();
  };
  const std::vector<float> plain = train({}), shifted = train(v);
  double worst = 0;
  for (size_t i = 0; i < dim; ++i) {
    worst = std::max(worst, std::abs((plain[i] - shifted[i]) - 0.1 * v[i]));
  }
  EXPECT_LT(worst, 1e-6);
  absl::Status st;
  const std::vector<float> short_one(dim - 1, 0.0f);
  train(short_one, &st);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

TEST(OptimizerSpec, ParsesSgdAndAdam) {
  auto sgd = OptimizerSpec::Parse("sgd(momentum=0.5,nesterov=1)");
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_EQ(sgd->LearningRate(0.2), 0.2);  // the round's
  EXPECT_EQ(sgd->momentum, 0.5);
  EXPECT_TRUE(sgd->nesterov);
  auto adam = OptimizerSpec::Parse("adam");
  ASSERT_TRUE(adam.ok());
  EXPECT_EQ(adam->LearningRate(0.2), 0.001);
  EXPECT_EQ(OptimizerSpec::Parse("adam(lr=0.01,beta2=0.99)")->LearningRate(0.2), 0.01);
  EXPECT_EQ(OptimizerSpec::Parse(OptimizerSpec::Parse("adam(lr=0.01)")->ToString())->lr, 0.01);
  for (const char* bad : {"sgd(lr=-1)", "sgd(momentum=2)", "adam(betas=1)", "lbfgs",
                          "sgd(nesterov=1,momentum=0)", "sgd("}) {
    auto st = OptimizerSpec::Parse(bad);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.status().message().find("--optimizer"), std::string::npos) << st.status();
  }
}

}  // namespace
}  // namespace fedlgc::core
