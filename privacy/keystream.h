// A cryptographic pseudo-random generator: the AES-256-CTR keystream of a 32-byte key
// (IV zero), read as little-endian 64-bit words, continuing from call to call. Secure
// aggregation's masks (mask.h) and DP noise (gaussian_noise.h) expand their seeds with it.
// Not thread-safe; one stream per key.
#ifndef FEDLGC_PRIVACY_KEYSTREAM_H_
#define FEDLGC_PRIVACY_KEYSTREAM_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "privacy/key_agreement.h"

struct evp_cipher_ctx_st;

namespace fedlgc::privacy {

class Keystream {
 public:
  // INTERNAL if OpenSSL cannot set up the cipher.
  static absl::StatusOr<Keystream> Create(const Key32& key);
  Keystream(Keystream&&) noexcept;
  Keystream& operator=(Keystream&&) noexcept;
  ~Keystream();

  // Fills `out` with the next words of the stream.
  absl::Status Next(std::span<uint64_t> out);
  // Fills `out` with the next bytes of the stream.
  absl::Status NextBytes(std::span<uint8_t> out);

 private:
  struct CtxFree {
    void operator()(evp_cipher_ctx_st* c) const;
  };
  explicit Keystream(std::unique_ptr<evp_cipher_ctx_st, CtxFree> ctx);
  std::unique_ptr<evp_cipher_ctx_st, CtxFree> ctx_;
};

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_KEYSTREAM_H_
