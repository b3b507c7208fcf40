// X25519 and HKDF-SHA256 through OpenSSL's EVP interface (see key_agreement.h).
#include "privacy/key_agreement.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <memory>

namespace fedlgc::privacy {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct CtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Ctx = std::unique_ptr<EVP_PKEY_CTX, CtxFree>;

absl::Status OpenSslError(std::string_view what) {
  return absl::InternalError(std::string("OpenSSL: ") + std::string(what) + " failed");
}

}  // namespace

absl::StatusOr<KeyPair> GenerateKeyPair() {
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  if (key == nullptr) return OpenSslError("X25519 key generation");
  KeyPair pair;
  size_t priv_len = pair.private_key.size(), pub_len = pair.public_key.size();
  if (EVP_PKEY_get_raw_private_key(key.get(), pair.private_key.data(), &priv_len) != 1 ||
      EVP_PKEY_get_raw_public_key(key.get(), pair.public_key.data(), &pub_len) != 1 ||
      priv_len != 32 || pub_len != 32) {
    return OpenSslError("reading an X25519 key");
  }
  return pair;
}

absl::StatusOr<Key32> PublicKeyOf(const Key32& private_key) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(), 32));
  if (key == nullptr) return OpenSslError("loading an X25519 private key");
  Key32 out{};
  size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), out.data(), &len) != 1 || len != 32) {
    return OpenSslError("reading an X25519 public key");
  }
  return out;
}

absl::StatusOr<KeyAgreement> KeyAgreement::Load(const Key32& own_private) {
  std::shared_ptr<EVP_PKEY> own(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, own_private.data(), 32),
      EVP_PKEY_free);
  if (own == nullptr) return OpenSslError("loading an X25519 private key");
  return KeyAgreement(std::move(own));
}

absl::StatusOr<Key32> KeyAgreement::Seed(const Key32& peer_public,
                                         std::string_view context) const {
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(), 32));
  if (peer == nullptr) return OpenSslError("loading an X25519 public key");
  Ctx ctx(EVP_PKEY_CTX_new(own_.get(), nullptr));
  Key32 secret{};
  size_t len = secret.size();
  // OpenSSL refuses a peer key whose shared secret is all zeros, as RFC 7748 section 6.1
  // allows; the check below says so whatever the library does.
  if (ctx == nullptr || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), secret.data(), &len) != 1 || len != 32 || secret == Key32{}) {
    return absl::InvalidArgumentError(
        "X25519: the peer's public key gives no shared secret (a low-order point)");
  }
  return DeriveSeed(secret, context);
}

absl::StatusOr<Key32> AgreeSeed(const Key32& own_private, const Key32& peer_public,
                                std::string_view context) {
  auto own = KeyAgreement::Load(own_private);
  if (!own.ok()) return own.status();
  return own->Seed(peer_public, context);
}

absl::StatusOr<Key32> DeriveSeed(const Key32& secret, std::string_view info) {
  Ctx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  Key32 out{};
  size_t len = out.size();
  if (ctx == nullptr || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), secret.data(), static_cast<int>(secret.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) != 1 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != 32) {
    return OpenSslError("HKDF-SHA256");
  }
  return out;
}

}  // namespace fedlgc::privacy
