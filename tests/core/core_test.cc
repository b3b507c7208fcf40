// Tests for core/: Fashion-MNIST loading, partitions, and the model facade.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/dataset.h"
#include "core/model.h"
#include "core/partition.h"
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

std::vector<int32_t> Labels(size_t n) {
  std::vector<int32_t> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = static_cast<int32_t>((i * 7) % 10);
  return l;
}

TEST(Partition, IidCoversEverythingOnceAndEvenly) {
  const auto labels = Labels(10007);
  const auto shards = Partition(labels, labels.size(), 10, 8, *PartitionSpec::Parse("iid"), 1);
  std::vector<int> seen(labels.size(), 0);
  for (const auto& s : shards) {
    EXPECT_NEAR(static_cast<double>(s.size()), 10007.0 / 8, 1.0);
    for (uint32_t i : s) ++seen[i];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  EXPECT_EQ(shards, Partition(labels, labels.size(), 10, 8, *PartitionSpec::Parse("iid"), 1));
  EXPECT_NE(shards, Partition(labels, labels.size(), 10, 8, *PartitionSpec::Parse("iid"), 2));
}

TEST(Partition, LabelsPerClient) {
  const auto labels = Labels(5000);
  const auto shards = Partition(labels, labels.size(), 10, 10, *PartitionSpec::Parse("labels(2)"), 3);
  for (const auto& s : shards) {
    std::set<int> c;
    for (uint32_t i : s) c.insert(labels[i]);
    EXPECT_EQ(c.size(), 2u);
  }
}

TEST(Partition, DirichletSkewGrowsAsAlphaShrinks) {
  const auto labels = Labels(20000);
  auto skew = [&](double alpha) {
    const auto shards =
        Partition(labels, labels.size(), 10, 10, PartitionSpec{PartitionSpec::Kind::kDirichlet, alpha, 0}, 5);
    size_t total = 0;
    double dominant = 0;  // mean share of each client's most frequent class
    for (const auto& s : shards) {
      total += s.size();
      std::vector<int> count(10, 0);
      for (uint32_t i : s) ++count[labels[i]];
      if (!s.empty()) dominant += *std::max_element(count.begin(), count.end()) / double(s.size());
    }
    EXPECT_EQ(total, labels.size());
    return dominant / shards.size();
  };
  const double low = skew(100.0), high = skew(0.1);
  EXPECT_LT(low, 0.2);
  EXPECT_GT(high, 0.5);
}

TEST(Partition, ParseErrors) {
  EXPECT_FALSE(PartitionSpec::Parse("dirichlet(-1)").ok());
  EXPECT_FALSE(PartitionSpec::Parse("labels(x)").ok());
  EXPECT_FALSE(PartitionSpec::Parse("random").ok());
  EXPECT_EQ(PartitionSpec::Parse("dirichlet:0.3")->ToString(), "dirichlet(0.3)");
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
