// FedAvg's round protocols (round_protocol.h), every one alone and every pair of them
// asked for together: a job the table accepts runs two rounds on a loopback host with
// three FedAvg clients and commits both; a job it refuses says which two protocols do
// not run together (or which one the other needs).
#include "modes/fedavg/round_protocols.h"

#include <set>

#include "base/str.h"
#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_test_clients.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using testing::LoopbackHost;

constexpr ProtocolId kAll[] = {
    ProtocolId::kRoundSeed, ProtocolId::kBasis,   ProtocolId::kSharedScale,
    ProtocolId::kTwoPhase,  ProtocolId::kDp,      ProtocolId::kSecAgg,
    ProtocolId::kBuffered,  ProtocolId::kFedProx, ProtocolId::kScaffold};

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {8, 5}}, {"b", {8}}}).value();
}

// A job that asks for `want` as a user would: the codec protocols' job codec, a seeded
// warm-up round where the job codec is another protocol's, the flags of the others.
struct Asked {
  FedAvgOptions options;
  coordinator::RoundPlan plan;
};
Asked Ask(const std::set<ProtocolId>& want) {
  const auto has = [&](ProtocolId id) { return want.count(id) > 0; };
  Asked a;
  a.plan.local_steps = 1;
  std::string codec;
  if (has(ProtocolId::kBasis)) codec = "gradiveq(dims=2,slice=4)";
  if (has(ProtocolId::kSharedScale)) codec = "terngrad(shared=1)";
  if (has(ProtocolId::kTwoPhase)) codec = "powersgd(rank=1,phases=2)";
  const std::string values = has(ProtocolId::kSecAgg) ? "qsgd(bits=4)" : "fp32";
  if (has(ProtocolId::kRoundSeed)) {
    const std::string seeded = StrCat("randk(ratio=0.5,values=", values, ",seed=round)");
    if (codec.empty()) {
      codec = seeded;
    } else {
      a.plan.warmup_codecs = {seeded};
    }
  }
  a.plan.codec = codec.empty() ? values : codec;
  if (has(ProtocolId::kSecAgg)) a.options.secagg = "secagg(clip=2)";
  if (has(ProtocolId::kDp)) {
    a.options.dp = has(ProtocolId::kSecAgg) ? "skellam(noise=0.01,clip=2)"
                                            : "gaussian(noise=0.01,clip=2)";
  }
  if (has(ProtocolId::kBuffered)) a.options.rounds_mode = "buffered(k=3,concurrency=3)";
  if (has(ProtocolId::kFedProx)) a.options.algorithm = "fedprox(mu=0.1)";
  if (has(ProtocolId::kScaffold)) a.options.algorithm = "scaffold";
  return a;
}

// Two codec protocols cannot be asked for together with one job codec.
bool Expressible(const std::set<ProtocolId>& want) {
  int codec_protocols = 0;
  for (ProtocolId id : {ProtocolId::kBasis, ProtocolId::kSharedScale, ProtocolId::kTwoPhase}) {
    codec_protocols += static_cast<int>(want.count(id));
  }
  return codec_protocols <= 1;
}

// The pairs that run together; every other pair is refused.
const std::set<std::set<ProtocolId>>& Accepted() {
  static auto* const kAccepted = new std::set<std::set<ProtocolId>>{
      {ProtocolId::kRoundSeed, ProtocolId::kSharedScale},
      {ProtocolId::kRoundSeed, ProtocolId::kTwoPhase},
      {ProtocolId::kRoundSeed, ProtocolId::kDp},
      {ProtocolId::kRoundSeed, ProtocolId::kSecAgg},  // secure aggregation stands in for it
      {ProtocolId::kDp, ProtocolId::kSecAgg},         // distributed DP
      // SCAFFOLD's changes through the seeded codec: the same kept set as the update's.
      {ProtocolId::kRoundSeed, ProtocolId::kScaffold},
  };
  static const bool kWithFedProx = [] {
    // FedProx is the clients' objective alone: it runs beside every round protocol.
    for (ProtocolId id : kAll) {
      if (id != ProtocolId::kFedProx && id != ProtocolId::kScaffold) {
        kAccepted->insert({ProtocolId::kFedProx, id});
      }
    }
    return true;
  }();
  (void)kWithFedProx;
  return *kAccepted;
}

std::string Names(const std::set<ProtocolId>& want) {
  std::string s;
  for (ProtocolId id : want) s += StrCat(s.empty() ? "" : " + ", EntryOf(id).name);
  return s;
}

// Makes the job's driver and, when it is made, runs two rounds with three clients;
// *allows_statistics: whether the driver lets clients send the statistics phase theirs.
absl::Status MakeAndRun(const std::set<ProtocolId>& want, std::vector<ProtocolId>* made,
                        bool* allows_statistics = nullptr) {
  const codecs::ModelLayout layout = Layout();
  Asked a = Ask(want);
  LoopbackHost host(a.plan, layout);
  coordinator::DriverEnv env = host.DriverEnvFor(&a.plan, "round_protocols_test");
  env.rounds = 10;
  env.metrics = &host.metrics();
  auto driver = FedAvgDriver::Create(a.options, env);
  if (!driver.ok()) return driver.status();
  *made = (*driver)->protocols();
  if (allows_statistics != nullptr) *allows_statistics = (*driver)->AllowsClientStatistics();
  host.set_driver(driver->get());
  for (int i = 0; i < 3; ++i) {
    AddFedAvgClient(host, layout, StrCat("c", i), 100, 1.0f + static_cast<float>(i) / 4);
  }
  const std::vector<float> before = host.engine().ModelVector();
  for (uint64_t r = 1; r <= 2; ++r) {
    RoundReport report;
    coordinator::CommitResult commit;
    const auto deadline = host.Now() + std::chrono::seconds(60);
    EXPECT_TRUE((*driver)->RunRound(host, {"c0", "c1", "c2"}, deadline, &commit, &report).ok())
        << Names(want);
    EXPECT_EQ(commit.round, r) << Names(want);
    EXPECT_GE(commit.participants, 2) << Names(want) << " round " << r;
    EXPECT_TRUE(host.refused().empty()) << Names(want) << " round " << r;
    host.SendReceipts(commit);
    EXPECT_TRUE((*driver)->Save(commit.round).ok()) << Names(want);
  }
  EXPECT_NE(host.engine().ModelVector(), before) << Names(want);
  return absl::OkStatus();
}

TEST(RoundProtocols, EveryProtocolHasOneLineInTheTableInRoundOrder) {
  const auto& table = ProtocolTable();
  ASSERT_EQ(table.size(), std::size(kAll));
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i]->id, kAll[i]) << i;
    EXPECT_FALSE(table[i]->name.empty()) << i;
    EXPECT_NE(table[i]->wanted, nullptr) << i;
    EXPECT_NE(table[i]->make, nullptr) << i;
    for (const ProtocolRule& r : table[i]->conflicts) EXPECT_NE(r.other, table[i]->id);
  }
}

TEST(RoundProtocols, APlainJobRunsNoProtocol) {
  std::vector<ProtocolId> made;
  bool allows_statistics = false;
  ASSERT_TRUE(MakeAndRun({}, &made, &allows_statistics).ok());
  EXPECT_TRUE(made.empty());
  EXPECT_TRUE(allows_statistics);
}

// Each alone; the ones that keep the clients' data private (DP, secure aggregation) or
// never close a round (buffered) keep the statistics phase out (--bn-stats auto).
TEST(RoundProtocols, EachRunsAlone) {
  const std::set<ProtocolId> no_statistics{ProtocolId::kDp, ProtocolId::kSecAgg,
                                           ProtocolId::kBuffered};
  for (ProtocolId id : kAll) {
    std::vector<ProtocolId> made;
    bool allows_statistics = false;
    const absl::Status st = MakeAndRun({id}, &made, &allows_statistics);
    EXPECT_TRUE(st.ok()) << EntryOf(id).name << ": " << st;
    EXPECT_EQ(made, std::vector<ProtocolId>{id}) << EntryOf(id).name;
    EXPECT_EQ(allows_statistics, no_statistics.count(id) == 0) << EntryOf(id).name;
  }
}

TEST(RoundProtocols, EveryPairRunsOrIsRefusedByName) {
  int ran = 0, refused = 0;
  for (size_t i = 0; i < std::size(kAll); ++i) {
    for (size_t j = i + 1; j < std::size(kAll); ++j) {
      const std::set<ProtocolId> pair{kAll[i], kAll[j]};
      // One --algorithm: a job cannot ask for both (Algorithm::Parse takes one).
      if (pair == std::set<ProtocolId>{ProtocolId::kFedProx, ProtocolId::kScaffold}) continue;
      const std::string a(EntryOf(kAll[i]).name), b(EntryOf(kAll[j]).name);
      absl::Status st;
      std::vector<ProtocolId> made;
      if (Expressible(pair)) {
        st = MakeAndRun(pair, &made);
      } else {
        // The table's verdict on a job that asked for both.
        Asked asked = Ask({kAll[i]});
        LoopbackHost host(asked.plan, Layout());
        const coordinator::DriverEnv env = host.DriverEnvFor(&asked.plan, "round_protocols_test");
        ProtocolJob job = ProtocolJob::Read(asked.options, env).value();
        job.codec.basis = job.codec.shared_scale = job.codec.two_phase = codecs::Placement::kAbsent;
        for (ProtocolId id : pair) {
          if (id == ProtocolId::kBasis) job.codec.basis = codecs::Placement::kTop;
          if (id == ProtocolId::kSharedScale) job.codec.shared_scale = codecs::Placement::kTop;
          if (id == ProtocolId::kTwoPhase) job.codec.two_phase = codecs::Placement::kTop;
        }
        st = PlanProtocols(job).status();
      }
      if (Accepted().count(pair)) {
        EXPECT_TRUE(st.ok()) << a << " + " << b << ": " << st;
        std::vector<ProtocolId> want(pair.begin(), pair.end());
        if (pair.count(ProtocolId::kSecAgg) && pair.count(ProtocolId::kRoundSeed)) {
          want = {ProtocolId::kSecAgg};
        }
        EXPECT_EQ(made, want) << a << " + " << b;
        ++ran;
      } else {
        EXPECT_TRUE(absl::IsInvalidArgument(st)) << a << " + " << b << ": " << st;
        const std::string message(st.message());
        EXPECT_NE(message.find(a), std::string::npos) << message;
        EXPECT_NE(message.find(b), std::string::npos) << message;
        ++refused;
      }
    }
  }
  // FedProx beside each of the seven that are no algorithm; SCAFFOLD beside the round seed.
  EXPECT_EQ(ran, 6 + 7);
  EXPECT_EQ(refused, 16 + 6);  // SCAFFOLD with a codec protocol, DP, secure aggregation, buffered
}

}  // namespace
}  // namespace fedlgc::modes
