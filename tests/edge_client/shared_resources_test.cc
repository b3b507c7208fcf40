// What the clients of one process share (edge_client/shared_resources.h) and how a host
// names its clients (edge_client/client_host.h): one copy of a training set per data
// options, split exactly as a client alone splits it; a model prepared once; a pool whose
// leases never hand one model to two trainers, and that remakes a slot for another model.
#include "edge_client/shared_resources.h"

#include <atomic>
#include <thread>
#include <vector>

#include "core/partition.h"
#include "edge_client/client_host.h"
#include "edge_client/options.h"
#include "gtest/gtest.h"

namespace fedlgc::edge_client {
namespace {

TEST(ClientList, RangesAndListsInOrderEachOnce) {
  EXPECT_EQ(ParseClientList("0-3,7,10-11").value(), (std::vector<uint32_t>{0, 1, 2, 3, 7, 10, 11}));
  EXPECT_EQ(ParseClientList("5").value(), (std::vector<uint32_t>{5}));
  for (const char* bad : {"", "3-1", "1,1", "0-2,2", "a", "2-", "-2", "1,,2", "0-100000"}) {
    auto got = ParseClientList(bad);
    EXPECT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(got.status().message().find("--client-ids"), std::string_view::npos) << got.status();
  }
}

TEST(ClientList, EachHostedClientGetsItsIndexInItsNamesAndAsItsShard) {
  EXPECT_EQ(WithIndex("certs/client-{i}/{i}.pem", 12), "certs/client-12/12.pem");
  EXPECT_EQ(WithIndex("plain", 3), "plain");
  EdgeClientOptions base;
  base.client_id = "edge-{i}";
  base.tls_cert = "c/{i}.pem";
  base.tls_key = "c/{i}.key";
  base.data = "npz:data/{i}.npz";
  base.server = "host-{i}:1";  // not a per-client name: kept as it is
  const EdgeClientOptions o = HostedClientOptions(base, 7);
  EXPECT_EQ(o.client_id, "edge-7");
  EXPECT_EQ(o.tls_cert, "c/7.pem");
  EXPECT_EQ(o.tls_key, "c/7.key");
  EXPECT_EQ(o.data, "npz:data/7.npz");
  EXPECT_EQ(o.server, "host-{i}:1");
  EXPECT_EQ(o.shard, 0u);  // a file of its own, read whole
  EXPECT_EQ(o.num_shards, 1u);
  base.data = "fashion-mnist";
  base.num_shards = 10;
  EXPECT_EQ(HostedClientOptions(base, 7).shard, 7u);
  EXPECT_EQ(HostedClientOptions(base, 7).num_shards, 10u);
}

EdgeClientOptions SyntheticClient(uint32_t shard, const std::string& partition = "iid") {
  EdgeClientOptions o;
  o.data = "synthetic:400";
  o.num_shards = 8;
  o.shard = shard;
  o.partition = partition;
  return o;
}

TEST(DataCache, ClientsWithTheSameDataShareOneCopySplitAsAClientAloneSplitsIt) {
  DataCache cache;
  auto a = cache.Get(SyntheticClient(0));
  auto b = cache.Get(SyntheticClient(5));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());  // one copy
  EXPECT_EQ(cache.size(), 1u);
  const TrainingData& set = **a;
  ASSERT_EQ(set.data.size(), 400u);
  const auto spec = core::PartitionSpec::Parse("iid").value();
  EXPECT_EQ(set.shards, core::Partition(set.data.labels, set.data.size(),
                                        static_cast<int>(set.data.classes), 8, spec, 1)
                            .value());
  // Another split of the same data is another set.
  auto c = cache.Get(SyntheticClient(0, "dirichlet(0.3)"));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->get(), a->get());
  EXPECT_EQ(cache.size(), 2u);
  EdgeClientOptions bad = SyntheticClient(0);
  bad.data = "npz:/nonexistent/{i}.npz";
  EXPECT_FALSE(cache.Get(bad).ok());
  EXPECT_EQ(cache.size(), 2u);
}

core::ModelOptions Builtin(const std::string& name) {
  core::ModelOptions m;
  m.model = name;
  return m;
}

TEST(ModelPool, AModelIsPreparedOnceAndItsFirstCopyIsTheFirstSlots) {
  ModelPool pool(1);
  auto a = pool.Prepare(Builtin("mlp"), "cpu");
  auto b = pool.Prepare(Builtin("mlp"), "cpu");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(pool.models_made(), 1u);
  EXPECT_EQ((*a)->dim, core::ModelLayoutOf("mlp").value().dim());
  EXPECT_EQ((*a)->layout.dim(), (*a)->dim);
  {
    auto lease = pool.Acquire(**a);
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(lease->model().dim(), (*a)->dim);
  }
  EXPECT_EQ(pool.models_made(), 1u);  // the slot holds the model Prepare made
  EXPECT_EQ(pool.ResolveDevice("cpu").value(), "cpu");
  EXPECT_FALSE(pool.ResolveDevice("tpu").ok());
}

TEST(ModelPool, ASlotIsRemadeForAnotherModelAndABadFileHoldsNoSlot) {
  ModelPool pool(1);
  auto mlp = pool.Prepare(Builtin("mlp"), "cpu");
  auto cnn = pool.Prepare(Builtin("cnn"), "cpu");
  ASSERT_TRUE(mlp.ok() && cnn.ok());
  EXPECT_EQ(pool.models_made(), 2u);  // the CNN's first copy found no empty slot
  {
    auto lease = pool.Acquire(**cnn);
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(lease->model().dim(), (*cnn)->dim);
  }
  EXPECT_EQ(pool.models_made(), 3u);
  {
    auto lease = pool.Acquire(**cnn);  // the slot holds the CNN now
    ASSERT_TRUE(lease.ok());
  }
  EXPECT_EQ(pool.models_made(), 3u);
  auto bad = pool.Prepare(Builtin("/nonexistent/model.pt"), "cpu");
  EXPECT_FALSE(bad.ok());
  ModelInfo missing = **mlp;
  missing.key = "another";
  missing.options = Builtin("/nonexistent/model.pt");
  EXPECT_FALSE(pool.Acquire(missing).ok());
  auto lease = pool.Acquire(**mlp);  // the failed make gave its slot back
  EXPECT_TRUE(lease.ok());
}

// Trainers that lease and use a model concurrently: never more holders than slots, and
// each holder alone on its model (weights it set are the weights it reads back).
void LeasesAreExclusive(int slots) {
  ModelPool pool(slots);
  auto info = pool.Prepare(Builtin("mlp"), "cpu");
  ASSERT_TRUE(info.ok());
  std::atomic<int> holders{0}, most{0}, clashes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) {
        auto lease = pool.Acquire(**info);
        ASSERT_TRUE(lease.ok());
        const int now = ++holders;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        const std::vector<float> mine((*info)->dim, static_cast<float>(t * 100 + k));
        ASSERT_TRUE(lease->model().SetFlat(mine).ok());
        if (lease->model().GetFlat() != mine) ++clashes;
        --holders;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(most.load(), slots);
  EXPECT_GE(most.load(), 1);
  EXPECT_EQ(clashes.load(), 0);
  EXPECT_LE(pool.models_made(), static_cast<uint64_t>(slots));
}

TEST(ModelPool, OneSlotOneTrainerAtATime) { LeasesAreExclusive(1); }
TEST(ModelPool, ThreeSlotsAtMostThreeTrainers) { LeasesAreExclusive(3); }

}  // namespace
}  // namespace fedlgc::edge_client
