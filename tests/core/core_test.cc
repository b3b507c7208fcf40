// Tests for core/: Fashion-MNIST loading and the model facade (partitions: partition_test.cc).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/dataset.h"
#include "core/model.h"
#include "gtest/gtest.h"

namespace fedlgc::core {
namespace {

TEST(Dataset, ReadsFashionMnistFromTheDebianPackage) {
  auto train = LoadFashionMnist(kFashionMnistDir, true, 2000);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 2000u);
  EXPECT_EQ(train->example_size(), 784u);
  EXPECT_EQ(train->shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(train->classes, 10u);
  const auto [lo, hi] = std::minmax_element(train->x.begin(), train->x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  std::set<int> classes(train->labels.begin(), train->labels.end());
  EXPECT_EQ(classes.size(), 10u);
  auto test = LoadFashionMnist(kFashionMnistDir, false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000u);
  EXPECT_FALSE(LoadFashionMnist("/nonexistent", true).ok());
}

TEST(Model, ZooSizesAndFlatRoundTrip) {
  auto cnn = Model::Create("cnn", 1);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_GE((*cnn)->dim(), 100000u);
  EXPECT_LE((*cnn)->dim(), 400000u);
  auto mlp = Model::Create("mlp", 1);
  ASSERT_TRUE(mlp.ok());
  EXPECT_EQ((*mlp)->dim(), 784u * 200 + 200 + 200 * 10 + 10);
  auto w = (*cnn)->GetFlat();
  auto again = Model::Create("cnn", 1);
  EXPECT_EQ((*again)->GetFlat(), w) << "same seed, same initial weights";
  for (float& v : w) v *= 0.5f;
  ASSERT_TRUE((*cnn)->SetFlat(w).ok());
  EXPECT_EQ((*cnn)->GetFlat(), w);
  EXPECT_FALSE((*cnn)->SetFlat(std::vector<float>(3)).ok());
  EXPECT_FALSE(Model::Create("resnet", 1).ok());
}

TEST(Model, TrainingLearnsTheSyntheticTask) {
  const Dataset train = SyntheticImages(2000, 1), test = SyntheticImages(500, 2);
  auto model = *Model::Create("mlp", 3);
  const double before = model->Evaluate(test)->accuracy;
  std::vector<uint32_t> idx(train.size());
  std::iota(idx.begin(), idx.end(), 0u);
  TrainOptions opts;
  opts.epochs = 2;
  auto r = model->Train(train, idx, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 2 * 63);
  const auto after = model->Evaluate(test);
  EXPECT_LT(before, 0.3);
  EXPECT_GT(after->accuracy, 0.9);
  opts.steps = 5;
  EXPECT_EQ(model->Train(train, idx, opts)->steps, 5);
}

TEST(Model, DevicesResolveOrFailClearly) {
  EXPECT_EQ(Model::Create("mlp", 1, "cpu").value()->device(), "cpu");
  EXPECT_EQ(Model::Create("mlp", 1, "auto").value()->device(), CudaAvailable() ? "cuda:0" : "cpu");
  auto tpu = Model::Create("mlp", 1, "tpu");
  EXPECT_EQ(tpu.status().code(), absl::StatusCode::kInvalidArgument);
  if (!CudaAvailable()) {
    auto cuda = Model::Create("mlp", 1, "cuda");
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("no CUDA"), std::string_view::npos);
  }
}

// Training on the GPU gives the weights of the same seed and a model that learns, and
// the flat weights travel between devices exactly. Skips where libtorch has no CUDA.
TEST(Model, TrainsOnCudaWhenAvailable) {
  if (!CudaAvailable()) GTEST_SKIP() << "libtorch here has no CUDA or no GPU is visible";
  auto gpu = Model::Create("mlp", 3, "cuda").value();
  auto cpu = Model::Create("mlp", 3, "cpu").value();
  EXPECT_EQ(gpu->GetFlat(), cpu->GetFlat());
  std::vector<float> w = cpu->GetFlat();
  for (float& v : w) v *= 0.25f;
  ASSERT_TRUE(gpu->SetFlat(w).ok());
  EXPECT_EQ(gpu->GetFlat(), w);
  ASSERT_TRUE(gpu->SetFlat(cpu->GetFlat()).ok());
  const Dataset train = SyntheticImages(2000, 1), test = SyntheticImages(500, 2);
  std::vector<uint32_t> idx(train.size());
  std::iota(idx.begin(), idx.end(), 0u);
  TrainOptions opts;
  opts.epochs = 2;
  ASSERT_TRUE(gpu->Train(train, idx, opts).ok());
  EXPECT_GT(gpu->Evaluate(test)->accuracy, 0.9);
}

}  // namespace
}  // namespace fedlgc::core
