// AES-256-CTR through OpenSSL's EVP interface (see keystream.h).
#include "privacy/keystream.h"

#include <endian.h>
#include <openssl/evp.h>

#include <algorithm>

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

absl::Status Keystream::NextBytes(std::span<uint8_t> out) {
  // The keystream is the encryption of zeros: encrypted in place (CTR allows it), at most
  // 1 MiB per call into OpenSSL.
  constexpr size_t kBytes = size_t{1} << 20;
  std::fill(out.begin(), out.end(), 0);
  for (size_t at = 0; at < out.size(); at += kBytes) {
    const size_t n = std::min(kBytes, out.size() - at);
    int len = 0;
    if (EVP_EncryptUpdate(ctx_.get(), out.data() + at, &len, out.data() + at,
                          static_cast<int>(n)) != 1 ||
        len != static_cast<int>(n)) {
      return absl::InternalError("OpenSSL: AES-256-CTR failed");
    }
  }
  return absl::OkStatus();
}

absl::Status Keystream::Next(std::span<uint64_t> out) {
  // Read as little-endian words.
  if (absl::Status st = NextBytes({reinterpret_cast<uint8_t*>(out.data()), out.size() * 8});
      !st.ok()) {
    return st;
  }
  for (uint64_t& w : out) w = le64toh(w);
  return absl::OkStatus();
}

}  // namespace fedlgc::privacy
