// Secure aggregation's protocol (privacy/secagg.h), its boxes (share_box.h) and its graph
// (secagg_graph.h): rounds of many clients run through every phase in memory, with
// clients dropping before and after masking, and the server's unmasked sum compared with
// the sum of the survivors' codes exactly; a lying client's share found and left out;
// every refusal a client or the server owes.
#include "privacy/secagg.h"

#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "privacy/secagg_graph.h"
#include "privacy/share_box.h"

namespace fedlgc::privacy {
namespace {

constexpr char kContext[] = "job test round 3";

std::string Id(int i) { return "client-" + std::to_string(100 + i); }

// A round of n clients whose codes are `bits`-bit words in Z_(2^bits).
struct Round {
  Round(int n, int degree, int bits, uint64_t seed) : bits(bits), rng(seed) {
    std::set<std::string> ids;
    for (int i = 0; i < n; ++i) ids.insert(Id(i));
    server = std::make_unique<SecAggServer>(kContext, ids, degree, 0.5, seed, bits);
    for (const std::string& id : ids) {
      clients.emplace(id, SecAggClient::Create(id, kContext).value());
      std::vector<uint64_t> code(kDim);
      for (uint64_t& v : code) v = rng() % 16;
      codes[id] = code;
    }
  }
  // Runs the round; clients in `no_keys`, `no_shares`, `no_input` and `no_reveal` drop
  // before each of those steps. Returns the unmasked sum (or the failure).
  absl::StatusOr<std::vector<uint64_t>> Run(const std::set<std::string>& no_keys,
                                            const std::set<std::string>& no_shares,
                                            const std::set<std::string>& no_input,
                                            const std::set<std::string>& no_reveal) {
    for (auto& [id, c] : clients) {
      if (!no_keys.count(id)) {
        EXPECT_TRUE(server->AddKeys(id, c.public_keys()).ok());
      }
    }
    if (absl::Status st = server->CloseKeys(); !st.ok()) return st;
    for (auto& [id, c] : clients) {
      if (no_keys.count(id) || no_shares.count(id)) continue;
      auto shared = c.ShareKeys(server->PeersOf(id), server->threshold());
      EXPECT_TRUE(shared.ok()) << shared.status();
      if (id == false_dealer) {
        for (Box& b : shared->boxes) {
          if (garbage_to.count(b.peer)) b.bytes[b.bytes.size() / 2] ^= 0x5a;
        }
        if (false_commitment) shared->commitment[0] ^= 1;
      }
      EXPECT_TRUE(server->AddShares(id, shared->boxes, shared->commitment).ok());
    }
    if (absl::Status st = server->CloseShares(); !st.ok()) return st;
    std::vector<uint64_t> sum(kDim, 0);
    std::set<std::string> arrived;
    const uint64_t mod_mask = (uint64_t{1} << bits) - 1;
    for (const std::string& id : server->shared()) {
      SecAggClient& c = clients.at(id);
      auto bad = c.ReceiveShares(server->BoxesFor(id));
      EXPECT_TRUE(bad.ok());
      if (bad.ok() && !bad->empty()) refused_boxes[id] = *bad;
      std::vector<uint64_t> masked = codes[id];
      EXPECT_TRUE(c.Mask(bits, masked).ok());
      if (no_input.count(id)) continue;  // masked, never arrived
      for (size_t i = 0; i < kDim; ++i) sum[i] = (sum[i] + masked[i]) & mod_mask;
      arrived.insert(id);
    }
    if (absl::Status st = server->BeginUnmask(arrived); !st.ok()) return st;
    for (const std::string& id : server->masked()) {
      if (no_reveal.count(id)) continue;
      const auto [survivors, dropped] = server->RequestFor(id);
      auto reveals = clients.at(id).Unmask(survivors, dropped);
      EXPECT_TRUE(reveals.ok()) << reveals.status();
      if (lie == id) reveals->front().share.y[5] ^= 0x40;
      EXPECT_TRUE(server->AddReveals(id, *reveals).ok());
    }
    auto done = server->Finish(sum);
    if (!done.ok()) return done.status();
    finished = *done;
    return sum;
  }
  // The sum of the codes of `who`, mod 2^bits.
  std::vector<uint64_t> SumOf(const std::set<std::string>& who) const {
    std::vector<uint64_t> s(kDim, 0);
    for (const std::string& id : who) {
      for (size_t i = 0; i < kDim; ++i) s[i] = (s[i] + codes.at(id)[i]) & ((uint64_t{1} << bits) - 1);
    }
    return s;
  }

  static constexpr size_t kDim = 300;
  const int bits;
  std::mt19937_64 rng;
  std::unique_ptr<SecAggServer> server;
  std::map<std::string, SecAggClient> clients;
  std::map<std::string, std::vector<uint64_t>> codes;
  std::string lie;  // a client that flips a bit of its first revealed share
  // A dealer that garbles its boxes to `garbage_to`, and with `false_commitment` commits to
  // another seed than its own.
  std::string false_dealer;
  std::set<std::string> garbage_to;
  bool false_commitment = false;
  std::map<std::string, std::set<std::string>> refused_boxes;  // receiver -> bad senders
  SecAggServer::Finished finished;
};

TEST(SecAgg, TheServerLearnsExactlyTheSumOfTheMaskedInputsThatArrived) {
  Round r(10, 0, 10, 1);  // everyone neighbours everyone
  auto sum = r.Run({}, {}, {}, {});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(r.server->degree(), 9);
  EXPECT_EQ(r.server->threshold(), 6);
  EXPECT_EQ(*sum, r.SumOf(r.server->masked()));
  EXPECT_EQ(r.finished.survivors, 10u);
  EXPECT_EQ(r.finished.dropped, 0u);
}

TEST(SecAgg, ThirtyPercentDroppedAfterMaskingAndAtEveryOtherStep) {
  // 20 clients: one drops before its keys, one before its shares, three after masking
  // (their input never arrives) and three after theirs arrived (they never reveal).
  Round r(20, 0, 12, 2);
  auto sum = r.Run({Id(0)}, {Id(1)}, {Id(2), Id(3), Id(4)}, {Id(5), Id(6), Id(7)});
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::set<std::string> expected;
  for (int i = 5; i < 20; ++i) expected.insert(Id(i));
  EXPECT_EQ(r.server->masked(), expected);
  EXPECT_EQ(*sum, r.SumOf(expected));
  EXPECT_EQ(r.finished.dropped, 3u);  // the three whose input never came: their keys
  EXPECT_EQ(r.finished.survivors, 15u);
}

TEST(SecAggPlus, ASparseGraphOfDegreeTenSumsWithDropouts) {
  // 10% gone, half after masking, half after their input arrived: within what a graph of
  // degree 10 and a threshold of 6 of 11 shares holds here.
  Round r(60, 10, 14, 3);
  std::set<std::string> dropped_after_masking, silent;
  for (int i = 0; i < 6; ++i) (i % 2 ? dropped_after_masking : silent).insert(Id(i * 9));
  auto sum = r.Run({}, {}, dropped_after_masking, silent);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(r.server->degree(), 10);
  EXPECT_EQ(r.server->threshold(), 6);
  for (const auto& [id, c] : r.clients) EXPECT_EQ(r.server->BoxesFor(id).size(), 10u);
  EXPECT_EQ(r.server->masked().size(), 57u);
  EXPECT_EQ(*sum, r.SumOf(r.server->masked()));
}

TEST(SecAggPlus, TheDefaultDegreeHoldsThirtyPercentGoneAfterMasking) {
  // 150 clients, the default graph (not complete past 128), 45 gone: 22 after masking and
  // 23 after their input arrived.
  Round r(150, 0, 16, 9);
  std::set<std::string> dropped_after_masking, silent;
  for (int i = 0; i < 45; ++i) (i % 2 ? dropped_after_masking : silent).insert(Id(i * 3 + 1));
  auto sum = r.Run({}, {}, dropped_after_masking, silent);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(r.server->degree(), DefaultDegree(150));
  EXPECT_LT(r.server->degree(), 149);
  EXPECT_EQ(r.server->masked().size(), 128u);
  EXPECT_EQ(*sum, r.SumOf(r.server->masked()));
}

TEST(SecAgg, TooManyDroppedLeavesTheRoundUnmaskableAndSaysSo) {
  Round r(6, 0, 10, 4);  // t = 4 of 6 shares
  auto sum = r.Run({}, {}, {Id(0), Id(1), Id(2)}, {});
  ASSERT_FALSE(sum.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(sum.status())) << sum.status();
  EXPECT_NE(sum.status().message().find("cannot be unmasked"), std::string::npos);
}

TEST(SecAgg, ALyingShareIsFoundAndLeftOutAndTheSumStillComes) {
  Round r(8, 0, 10, 5);
  r.lie = Id(3);
  auto sum = r.Run({}, {}, {}, {});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, r.SumOf(r.server->masked()));
  EXPECT_EQ(r.finished.off, std::set<std::string>({Id(3)}));
  EXPECT_TRUE(r.server->proven_liars().empty()) << "a false share proves nothing of its dealer";
}

TEST(SecAgg, AFalseBoxCostsOnlyItsDealersHoldersAndTheSumStillComes) {
  // client-101 garbles its boxes to 3 of its 7 neighbours: they keep no share of its
  // secrets but still mask against it; its seed rebuilds from the other 5 (t = 5 of 8).
  Round r(8, 0, 10, 11);
  r.false_dealer = Id(1);
  r.garbage_to = {Id(2), Id(4), Id(6)};
  auto sum = r.Run({}, {}, {}, {});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(r.server->masked().size(), 8u);
  EXPECT_EQ(*sum, r.SumOf(r.server->masked()));
  for (const std::string& id : r.garbage_to) {
    EXPECT_EQ(r.refused_boxes[id], std::set<std::string>({Id(1)})) << id;
  }
}

TEST(SecAgg, ADealerWhoseSharesAgreeOnAnotherSeedThanItCommittedToIsProvenALiar) {
  Round r(6, 0, 10, 12);
  r.false_dealer = Id(2);
  r.false_commitment = true;
  auto sum = r.Run({}, {}, {}, {});
  ASSERT_FALSE(sum.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(sum.status())) << sum.status();
  EXPECT_EQ(r.server->proven_liars(), std::set<std::string>({Id(2)}));
}

TEST(SecAgg, AGraphWithoutEdgesIsRefusedAndSoIsAClientAlone) {
  Round r(5, 1, 10, 13);  // degree 1 rounds down to 0 past a complete graph
  for (auto& [id, c] : r.clients) ASSERT_TRUE(r.server->AddKeys(id, c.public_keys()).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(r.server->CloseKeys()));
  SecAggClient alone = SecAggClient::Create("solo", kContext).value();
  EXPECT_TRUE(absl::IsInvalidArgument(alone.ShareKeys({}, 1).status()));
}

TEST(SecAgg, KeysSentAgainReplaceTheFirstUntilThePhaseCloses) {
  Round r(3, 0, 10, 14);
  SecAggClient again = SecAggClient::Create(Id(0), kContext).value();
  ASSERT_TRUE(r.server->AddKeys(Id(0), r.clients.at(Id(0)).public_keys()).ok());
  ASSERT_TRUE(r.server->AddKeys(Id(0), again.public_keys()).ok()) << "a restarted client";
  EXPECT_EQ(r.server->KeysOf(Id(0)), again.public_keys());
}

TEST(SecAgg, AClientRefusesToRevealASeedAndAKeyOfOnePeer) {
  Round r(5, 0, 10, 6);
  for (auto& [id, c] : r.clients) ASSERT_TRUE(r.server->AddKeys(id, c.public_keys()).ok());
  ASSERT_TRUE(r.server->CloseKeys().ok());
  for (auto& [id, c] : r.clients) {
    auto shared = c.ShareKeys(r.server->PeersOf(id), r.server->threshold());
    ASSERT_TRUE(shared.ok());
    ASSERT_TRUE(r.server->AddShares(id, shared->boxes, shared->commitment).ok());
  }
  ASSERT_TRUE(r.server->CloseShares().ok());
  SecAggClient& c = r.clients.at(Id(0));
  ASSERT_TRUE(c.ReceiveShares(r.server->BoxesFor(Id(0))).ok());
  const std::set<std::string> all = {Id(0), Id(1), Id(2), Id(3), Id(4)};
  // Asked first with client-101 dropped, then with it a survivor: that would hand over
  // both its key share and its seed share.
  std::set<std::string> survivors = all;
  survivors.erase(Id(1));
  ASSERT_TRUE(c.Unmask(survivors, {Id(1)}).ok());
  ASSERT_TRUE(c.Unmask(survivors, {Id(1)}).ok()) << "the same request again is answered";
  EXPECT_TRUE(absl::IsFailedPrecondition(c.Unmask(all, {}).status()));
  // Requests that do not split the peers, or name too few survivors.
  SecAggClient& d = r.clients.at(Id(2));
  ASSERT_TRUE(d.ReceiveShares(r.server->BoxesFor(Id(2))).ok());
  EXPECT_FALSE(d.Unmask({Id(2), Id(3)}, {Id(0), Id(1), Id(4)}).ok()) << "2 survivors < t = 3";
  EXPECT_FALSE(d.Unmask(all, {Id(1)}).ok()) << "client-101 both";
  EXPECT_FALSE(d.Unmask({Id(2), Id(3), Id(4)}, {Id(1)}).ok()) << "client-100 not named";
  EXPECT_FALSE(d.Unmask({Id(0), Id(1), Id(3), Id(4)}, {Id(2)}).ok()) << "itself dropped";
}

TEST(SecAgg, TheServerRefusesReplayedAndLowOrderKeysAndMisaddressedMessages) {
  Round r(4, 0, 10, 7);
  SecAggClient& a = r.clients.at(Id(0));
  SecAggClient& b = r.clients.at(Id(1));
  ASSERT_TRUE(r.server->AddKeys(Id(0), a.public_keys()).ok());
  ASSERT_TRUE(r.server->AddKeys(Id(0), a.public_keys()).ok()) << "the same keys again";
  EXPECT_TRUE(absl::IsInvalidArgument(r.server->AddKeys(Id(1), a.public_keys()))) << "replayed";
  PublicKeys low = b.public_keys();
  low.mask = Key32{};  // the point 0: every seed it agreed would be all zeros
  EXPECT_TRUE(absl::IsInvalidArgument(r.server->AddKeys(Id(1), low)));
  EXPECT_TRUE(absl::IsFailedPrecondition(r.server->AddKeys("stranger", b.public_keys())));
  for (int i = 1; i < 4; ++i) {
    ASSERT_TRUE(r.server->AddKeys(Id(i), r.clients.at(Id(i)).public_keys()).ok());
  }
  ASSERT_TRUE(r.server->CloseKeys().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(r.server->AddKeys(Id(0), a.public_keys())));
  auto shared = a.ShareKeys(r.server->PeersOf(Id(0)), r.server->threshold());
  ASSERT_TRUE(shared.ok());
  std::vector<Box> to_self = shared->boxes;
  to_self[0].peer = Id(0);
  EXPECT_TRUE(absl::IsInvalidArgument(r.server->AddShares(Id(0), to_self, shared->commitment)));
  std::vector<Box> twice = shared->boxes;
  twice.push_back(twice[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(r.server->AddShares(Id(0), twice, shared->commitment)));
  ASSERT_TRUE(r.server->AddShares(Id(0), shared->boxes, shared->commitment).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      r.server->AddShares(Id(0), shared->boxes, shared->commitment)));
  EXPECT_TRUE(absl::IsFailedPrecondition(a.ShareKeys(r.server->PeersOf(Id(0)), 3).status()));
}

TEST(SecAgg, ABoxOpensOnlyForItsReceiverInItsRound) {
  Round r(3, 0, 10, 8);
  for (auto& [id, c] : r.clients) ASSERT_TRUE(r.server->AddKeys(id, c.public_keys()).ok());
  ASSERT_TRUE(r.server->CloseKeys().ok());
  auto shared = r.clients.at(Id(0)).ShareKeys(r.server->PeersOf(Id(0)), r.server->threshold());
  ASSERT_TRUE(shared.ok());
  ASSERT_EQ(shared->boxes.size(), 2u);
  // client-101's box relayed to client-102 as if it were its own, and one tampered with by
  // one bit: neither opens, and neither's shares are kept.
  SecAggClient& c = r.clients.at(Id(2));
  ASSERT_TRUE(c.ShareKeys(r.server->PeersOf(Id(2)), r.server->threshold()).ok());
  const Box& to_1 = shared->boxes[0].peer == Id(1) ? shared->boxes[0] : shared->boxes[1];
  EXPECT_EQ(c.ReceiveShares({{Id(0), to_1.bytes}}).value(), std::set<std::string>({Id(0)}));
  SecAggClient& d = r.clients.at(Id(1));
  ASSERT_TRUE(d.ShareKeys(r.server->PeersOf(Id(1)), r.server->threshold()).ok());
  std::string bad = to_1.bytes;
  bad[20] ^= 1;
  EXPECT_EQ(d.ReceiveShares({{Id(0), bad}}).value(), std::set<std::string>({Id(0)}));
  // A box that opens but holds another point than the one relayed with it.
  Round r2(3, 0, 10, 15);
  for (auto& [id, cl] : r2.clients) ASSERT_TRUE(r2.server->AddKeys(id, cl.public_keys()).ok());
  ASSERT_TRUE(r2.server->CloseKeys().ok());
  auto s2 = r2.clients.at(Id(0)).ShareKeys(r2.server->PeersOf(Id(0)), r2.server->threshold());
  ASSERT_TRUE(s2.ok());
  SecAggClient& e = r2.clients.at(Id(1));
  ASSERT_TRUE(e.ShareKeys(r2.server->PeersOf(Id(1)), r2.server->threshold()).ok());
  const Box& good = s2->boxes[0].peer == Id(1) ? s2->boxes[0] : s2->boxes[1];
  EXPECT_EQ(e.ReceiveShares({{Id(0), good.bytes, 3}}).value(), std::set<std::string>({Id(0)}))
      << "client-101 holds point 2 of client-100's three";
  // The same boxes under another round's context.
  Key32 k{};
  k.fill(9);
  const std::vector<uint8_t> plain = {1, 2, 3};
  const std::string box = SealBox(k, "round 3", plain).value();
  EXPECT_EQ(OpenBox(k, "round 3", box).value(), plain);
  EXPECT_FALSE(OpenBox(k, "round 4", box).ok());
  EXPECT_FALSE(OpenBox(k, "round 3", box.substr(0, 20)).ok());
}

TEST(SecAggGraph, HararyGraphsAreSymmetricOfTheirDegreeAndDrawnFromTheSeed) {
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) ids.insert(Id(i));
  const auto g = NeighbourGraph(ids, 12, 42);
  for (const auto& [a, ns] : g) {
    EXPECT_EQ(ns.size(), 12u) << a;
    EXPECT_FALSE(ns.count(a));
    for (const std::string& b : ns) EXPECT_TRUE(g.at(b).count(a));
  }
  EXPECT_EQ(NeighbourGraph(ids, 12, 42), g);
  EXPECT_NE(NeighbourGraph(ids, 12, 43), g);
  EXPECT_EQ(NeighbourGraph(ids, 11, 42).begin()->second.size(), 10u) << "rounded down to even";
  EXPECT_EQ(NeighbourGraph(ids, 80, 42).begin()->second.size(), 49u) << "complete";
  EXPECT_EQ(DefaultDegree(4), 3);
  EXPECT_EQ(DefaultDegree(128), 127);
  EXPECT_EQ(DefaultDegree(1000), 134);
}

}  // namespace
}  // namespace fedlgc::privacy
