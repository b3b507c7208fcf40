// AES-256-GCM boxes between two clients (see share_box.h).
#include "privacy/share_box.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <memory>

namespace fedlgc::privacy {
namespace {

struct CipherFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Cipher = std::unique_ptr<EVP_CIPHER_CTX, CipherFree>;

constexpr int kNonce = 12, kTag = 16;

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

absl::StatusOr<std::string> SealBox(const Key32& key, std::string_view aad,
                                    std::span<const uint8_t> plaintext) {
  std::string box(kNonce + plaintext.size() + kTag, '\0');
  auto* out = reinterpret_cast<unsigned char*>(box.data());
  if (RAND_bytes(out, kNonce) != 1) return absl::InternalError("OpenSSL: RAND_bytes failed");
  Cipher ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (ctx == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), out) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out + kNonce, &len, plaintext.data(),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out + kNonce + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag,
                          out + kNonce + plaintext.size()) != 1) {
    return absl::InternalError("OpenSSL: AES-256-GCM encryption failed");
  }
  return box;
}

absl::StatusOr<std::vector<uint8_t>> OpenBox(const Key32& key, std::string_view aad,
                                             std::string_view box) {
  if (box.size() < static_cast<size_t>(kNonce + kTag)) {
    return absl::InvalidArgumentError("a share box shorter than its nonce and tag");
  }
  const size_t n = box.size() - kNonce - kTag;
  std::vector<uint8_t> plain(n);
  std::string tag(box.substr(kNonce + n));
  Cipher ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (ctx == nullptr ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), Bytes(box)) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain.data(), &len, Bytes(box) + kNonce,
                        static_cast<int>(n)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), plain.data() + len, &len) != 1) {
    return absl::InvalidArgumentError(
        "a share box does not authenticate (tampered, misrouted or from another round)");
  }
  return plain;
}

}  // namespace fedlgc::privacy
