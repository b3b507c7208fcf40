// X25519 and HKDF (privacy/key_agreement.h) against RFC 7748's test vector and an HKDF
// computed by another implementation (Python's hmac module, RFC 5869's construction).
#include "privacy/key_agreement.h"

#include <string>

#include "gtest/gtest.h"

namespace fedlgc::privacy {
namespace {

Key32 Hex(const std::string& hex) {
  Key32 out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  return out;
}

// RFC 7748 section 6.1: Alice's and Bob's keys and the secret they share.
const Key32 kAlicePrivate = Hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
const Key32 kAlicePublic = Hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
const Key32 kBobPrivate = Hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
const Key32 kBobPublic = Hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
const Key32 kShared = Hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");

TEST(KeyAgreement, MatchesRfc7748AndBothEndsDeriveOneSeed) {
  EXPECT_EQ(PublicKeyOf(kAlicePrivate).value(), kAlicePublic);
  EXPECT_EQ(PublicKeyOf(kBobPrivate).value(), kBobPublic);
  const std::string context = "fedlgc secagg job-1 round 3 client-a client-b";
  const Key32 alice = AgreeSeed(kAlicePrivate, kBobPublic, context).value();
  const Key32 bob = AgreeSeed(kBobPrivate, kAlicePublic, context).value();
  EXPECT_EQ(alice, bob);
  // HKDF-SHA256(shared secret, no salt, context), by Python's hmac.
  EXPECT_EQ(alice, Hex("7be5a3fbf3837bf2107bc628443eb920d5fb1f3d6a6591debe32de09fdc2e463"));
  EXPECT_EQ(DeriveSeed(kShared, context).value(), alice);
  // Another context (round) gives another seed.
  EXPECT_NE(AgreeSeed(kAlicePrivate, kBobPublic, context + "x").value(), alice);
  // A key loaded once agrees the same seeds, again and again.
  const KeyAgreement loaded = KeyAgreement::Load(kAlicePrivate).value();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(loaded.Seed(kBobPublic, context).value(), alice);
  EXPECT_NE(loaded.Seed(kBobPublic, context + "x").value(), alice);
}

TEST(KeyAgreement, FreshPairsAgreeAndALowOrderPeerKeyIsRefused) {
  const KeyPair a = GenerateKeyPair().value(), b = GenerateKeyPair().value();
  EXPECT_NE(a.private_key, b.private_key);
  EXPECT_EQ(PublicKeyOf(a.private_key).value(), a.public_key);
  EXPECT_EQ(AgreeSeed(a.private_key, b.public_key, "c").value(),
            AgreeSeed(b.private_key, a.public_key, "c").value());
  // The all-zero point and the point of order 2 make every shared secret zero.
  Key32 one{};
  one[0] = 1;
  for (const Key32& low : {Key32{}, one}) {
    EXPECT_TRUE(absl::IsInvalidArgument(AgreeSeed(a.private_key, low, "c").status()));
    EXPECT_TRUE(
        absl::IsInvalidArgument(KeyAgreement::Load(a.private_key).value().Seed(low, "c").status()));
  }
}

}  // namespace
}  // namespace fedlgc::privacy
