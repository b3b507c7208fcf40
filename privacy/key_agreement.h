// The key agreement of secure aggregation (SecAgg, Bonawitz et al. 2017; SecAgg+, Bell et
// al. 2020): each client holds an X25519 key pair (RFC 7748); two clients that know each
// other's public key derive the same 32-byte seed, HKDF-SHA256 (RFC 5869) of their shared
// secret bound to a context (the job, the round, the two identities), from which each
// expands the pairwise mask (mask.h). Through OpenSSL; keys are raw 32-byte strings as
// they travel.
#ifndef FEDLGC_PRIVACY_KEY_AGREEMENT_H_
#define FEDLGC_PRIVACY_KEY_AGREEMENT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace fedlgc::privacy {

using Key32 = std::array<uint8_t, 32>;

struct KeyPair {
  Key32 private_key{};
  Key32 public_key{};
};

// A fresh X25519 key pair from OpenSSL's generator; INTERNAL if OpenSSL fails.
absl::StatusOr<KeyPair> GenerateKeyPair();
// The public key of a private one.
absl::StatusOr<Key32> PublicKeyOf(const Key32& private_key);

// The seed `own` and `peer` share: HKDF-SHA256 of the X25519 secret, salted by nothing,
// with `context` as its info. Both ends get the same bytes from their own private key and
// the other's public one. INVALID_ARGUMENT for a peer key whose shared secret is all zeros
// (a low-order point: a key chosen to make the mask known).
absl::StatusOr<Key32> AgreeSeed(const Key32& own_private, const Key32& peer_public,
                                std::string_view context);

// An own private key loaded once for many agreements: loading an X25519 private key
// computes its public key, about two thirds of an agreement's cost, so a client that
// agrees with each of its neighbours loads its key once. Thread-compatible; copies share
// the loaded key.
class KeyAgreement {
 public:
  // INTERNAL if OpenSSL cannot load the key.
  static absl::StatusOr<KeyAgreement> Load(const Key32& own_private);
  // The same seed as AgreeSeed(own_private, peer_public, context), with the same errors.
  absl::StatusOr<Key32> Seed(const Key32& peer_public, std::string_view context) const;

 private:
  explicit KeyAgreement(std::shared_ptr<evp_pkey_st> own) : own_(std::move(own)) {}
  std::shared_ptr<evp_pkey_st> own_;
};

// HKDF-SHA256 of `secret` with `info`: 32 bytes.
absl::StatusOr<Key32> DeriveSeed(const Key32& secret, std::string_view info);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_KEY_AGREEMENT_H_
