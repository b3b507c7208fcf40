// AES-256-CTR through OpenSSL's EVP interface (see keystream.h).
#include "privacy/keystream.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace fedlgc::privacy {

void Keystream::CtxFree::operator()(evp_cipher_ctx_st* c) const { EVP_CIPHER_CTX_free(c); }

Keystream::Keystream(std::unique_ptr<evp_cipher_ctx_st, CtxFree> ctx) : ctx_(std::move(ctx)) {}
Keystream::Keystream(Keystream&&) noexcept = default;
Keystream& Keystream::operator=(Keystream&&) noexcept = default;
Keystream::~Keystream() = default;

absl::StatusOr<Keystream> Keystream::Create(const Key32& key) {
  std::unique_ptr<evp_cipher_ctx_st, CtxFree> ctx(EVP_CIPHER_CTX_new());
  const unsigned char iv[16] = {};
  if (ctx == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, key.data(), iv) != 1) {
    return absl::InternalError("OpenSSL: AES-256-CTR init failed");
  }
  return Keystream(std::move(ctx));
}

absl::Status Keystream::Next(std::span<uint64_t> out) {
  // The keystream is the encryption of zeros, a block of words at a time.
  constexpr size_t kBlock = 4096;
  std::vector<unsigned char> zeros(kBlock * 8, 0), stream(kBlock * 8);
  for (size_t at = 0; at < out.size(); at += kBlock) {
    const size_t n = std::min(kBlock, out.size() - at);
    int len = 0;
    if (EVP_EncryptUpdate(ctx_.get(), stream.data(), &len, zeros.data(), static_cast<int>(n * 8)) !=
            1 ||
        len != static_cast<int>(n * 8)) {
      return absl::InternalError("OpenSSL: AES-256-CTR failed");
    }
    for (size_t i = 0; i < n; ++i) {
      uint64_t w = 0;
      for (int b = 7; b >= 0; --b) w = (w << 8) | stream[8 * i + static_cast<size_t>(b)];
      out[at + i] = w;
    }
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::privacy
