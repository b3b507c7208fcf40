// Secure aggregation's masks (privacy/mask.h) with its key agreement and secret sharing:
// six clients mask integer codes in Z_(2^12) with their own seeds and pairwise seeds from
// X25519; the coordinator, rebuilding seeds and keys from Shamir shares, learns the sum of
// the codes exactly, also when a client drops after masking; a masked code is uniform.
#include "privacy/mask.h"

#include <openssl/rand.h>

#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "privacy/keystream.h"
#include "privacy/shamir.h"

namespace fedlgc::privacy {
namespace {

constexpr int kBits = 12;
constexpr size_t kDim = 1000;
constexpr uint64_t kMod = uint64_t{1} << kBits;

std::string PairContext(const std::string& a, const std::string& b) {
  return "round 1 " + std::min(a, b) + " " + std::max(a, b);
}

struct Client {
  std::string id;
  KeyPair keys;
  Key32 self_seed{};
  std::vector<uint64_t> code;                  // what it means to add
  std::vector<uint64_t> masked;                // what it sends
  std::vector<Share> seed_shares, key_shares;  // dealt to the others (the i-th to the i-th)
};

TEST(SecureAggregation, TheCoordinatorLearnsTheSumEvenWhenAClientDropsAfterMasking) {
  std::mt19937_64 rng(7);
  std::vector<Client> clients(6);
  for (size_t i = 0; i < clients.size(); ++i) {
    Client& c = clients[i];
    c.id = "client-" + std::to_string(i);
    c.keys = GenerateKeyPair().value();
    ASSERT_EQ(RAND_bytes(c.self_seed.data(), 32), 1);
    c.code.resize(kDim);
    for (uint64_t& v : c.code) v = rng() % 16;  // 4-bit codes; the sum of six fits 12 bits
    c.seed_shares = SplitSecret(c.self_seed, 4, 6).value();
    c.key_shares = SplitSecret(c.keys.private_key, 4, 6).value();
  }
  for (Client& c : clients) {
    c.masked = c.code;
    ASSERT_TRUE(ApplyMask(c.self_seed, kBits, 1, c.masked).ok());
    for (const Client& peer : clients) {
      if (peer.id == c.id) continue;
      const Key32 seed =
          AgreeSeed(c.keys.private_key, peer.keys.public_key, PairContext(c.id, peer.id)).value();
      ASSERT_TRUE(ApplyMask(seed, kBits, PairSign(c.id, peer.id), c.masked).ok());
    }
  }
  // Client 5 drops after masking: its masked code never arrives.
  const size_t dropped = 5;
  std::vector<uint64_t> sum(kDim, 0), want(kDim, 0);
  for (size_t i = 0; i < clients.size(); ++i) {
    if (i == dropped) continue;
    for (size_t k = 0; k < kDim; ++k) {
      sum[k] = (sum[k] + clients[i].masked[k]) % kMod;
      want[k] = (want[k] + clients[i].code[k]) % kMod;
    }
  }
  // The masked sum says nothing by itself.
  EXPECT_NE(sum, want);
  // Four survivors hand in their shares: the survivors' own seeds and the dropped client's
  // key are rebuilt (never a survivor's key nor the dropped one's seed).
  const auto shares_of = [&](const std::vector<Share>& all) {
    return std::vector<Share>{all[0], all[2], all[3], all[4]};
  };
  for (size_t i = 0; i < clients.size(); ++i) {
    if (i == dropped) continue;
    std::vector<uint8_t> seed = CombineShares(shares_of(clients[i].seed_shares)).value();
    Key32 self{};
    std::copy(seed.begin(), seed.end(), self.begin());
    ASSERT_EQ(self, clients[i].self_seed);
    ASSERT_TRUE(ApplyMask(self, kBits, -1, sum).ok());
  }
  std::vector<uint8_t> key = CombineShares(shares_of(clients[dropped].key_shares)).value();
  Key32 dropped_key{};
  std::copy(key.begin(), key.end(), dropped_key.begin());
  const std::string& d = clients[dropped].id;
  for (size_t i = 0; i < clients.size(); ++i) {
    if (i == dropped) continue;
    // Survivor i applied PairSign(i, d) x mask(s_id); take it back out.
    const Key32 seed =
        AgreeSeed(dropped_key, clients[i].keys.public_key, PairContext(clients[i].id, d)).value();
    ASSERT_TRUE(ApplyMask(seed, kBits, -PairSign(clients[i].id, d), sum).ok());
  }
  EXPECT_EQ(sum, want);
}

// A masked code is uniform over Z_(2^8) whatever the code (chi-square over 25,600
// coordinates of one constant code: 255 degrees of freedom, the bound 6 sd above the mean).
TEST(SecureAggregation, AMaskedCodeIsUniform) {
  Key32 seed{};
  seed[0] = 9;
  for (uint64_t value : {uint64_t{0}, uint64_t{200}}) {
    std::vector<uint64_t> code(25600, value);
    ASSERT_TRUE(ApplyMask(seed, 8, 1, code).ok());
    std::vector<int> counts(256, 0);
    for (uint64_t v : code) {
      ASSERT_LT(v, 256u);
      ++counts[v];
    }
    double chi2 = 0;
    for (int c : counts) chi2 += (c - 100.0) * (c - 100.0) / 100.0;
    EXPECT_LT(chi2, 255 + 6 * 22.6) << value;
  }
}

TEST(SecureAggregation, AMaskAndItsNegativeCancelAtEveryWidth) {
  Key32 seed{};
  seed[31] = 1;
  for (int bits : {1, 7, 32, 63, 64}) {
    const uint64_t keep = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    std::vector<uint64_t> v = {0, 1, keep, keep / 2, 12345 & keep};
    const std::vector<uint64_t> before = v;
    ASSERT_TRUE(ApplyMask(seed, bits, 1, v).ok());
    EXPECT_NE(v, before) << bits;
    ASSERT_TRUE(ApplyMask(seed, bits, -1, v).ok());
    EXPECT_EQ(v, before) << bits;
  }
  std::vector<uint64_t> v(3);
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyMask(seed, 0, 1, v)));
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyMask(seed, 65, 1, v)));
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyMask(seed, 8, 2, v)));
  EXPECT_EQ(PairSign("a", "b"), 1);
  EXPECT_EQ(PairSign("b", "a"), -1);
}

// The one-pass form against the definition: mask_i is the i-th group of the fewest whole
// bytes that hold `bits` of the seed's keystream, read little-endian, cut to `bits`, and
// every term is added with its sign mod 2^bits, across the blocks the pass works in.
TEST(SecureAggregation, ManyMasksInOnePassAreTheirDefinitionsSummed) {
  std::mt19937_64 rng(7);
  for (int bits : {5, 12, 20, 40, 64}) {
    const uint64_t keep = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    const size_t width = bits <= 8 ? 1 : bits <= 16 ? 2 : bits <= 32 ? 4 : 8;
    std::vector<MaskTerm> terms(7);
    for (size_t t = 0; t < terms.size(); ++t) {
      for (uint8_t& b : terms[t].seed) b = static_cast<uint8_t>(rng());
      terms[t].sign = t % 3 == 0 ? -1 : 1;
    }
    std::vector<uint64_t> v(10'001);  // past two blocks of 4,096
    for (uint64_t& x : v) x = rng() & keep;
    std::vector<uint64_t> expected = v;
    for (const MaskTerm& t : terms) {
      auto stream = Keystream::Create(t.seed);
      ASSERT_TRUE(stream.ok());
      std::vector<uint8_t> bytes(v.size() * width);
      ASSERT_TRUE(stream->NextBytes(bytes).ok());
      for (size_t i = 0; i < v.size(); ++i) {
        uint64_t m = 0;
        for (size_t b = 0; b < width; ++b) m |= uint64_t{bytes[i * width + b]} << (8 * b);
        expected[i] = (t.sign > 0 ? expected[i] + m : expected[i] - m) & keep;
      }
    }
    std::vector<uint64_t> one_by_one = v;
    for (const MaskTerm& t : terms) ASSERT_TRUE(ApplyMask(t.seed, bits, t.sign, one_by_one).ok());
    ASSERT_TRUE(ApplyMasks(terms, bits, v).ok());
    EXPECT_EQ(v, expected) << bits;
    EXPECT_EQ(one_by_one, expected) << bits;
  }
  std::vector<uint64_t> v(3);
  const MaskTerm bad{Key32{}, 0};
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyMasks({&bad, 1}, 8, v)));
}

}  // namespace
}  // namespace fedlgc::privacy
