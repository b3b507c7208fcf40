// Masks in Z_(2^b) from AES-256-CTR (see mask.h).
#include "privacy/mask.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/str.h"

namespace fedlgc::privacy {
namespace {

struct CipherFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};

}  // namespace

absl::Status ApplyMask(const Key32& seed, int bits, int sign, std::span<uint64_t> values) {
  if (bits < 1 || bits > 64 || (sign != 1 && sign != -1)) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: a mask of ", bits, " bits, sign ",
                                             sign, " (bits in [1, 64], sign +1 or -1)"));
  }
  const uint64_t keep = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  std::unique_ptr<EVP_CIPHER_CTX, CipherFree> ctx(EVP_CIPHER_CTX_new());
  const unsigned char iv[16] = {};
  if (ctx == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, seed.data(), iv) != 1) {
    return absl::InternalError("OpenSSL: AES-256-CTR init failed");
  }
  // The keystream is the encryption of zeros, a block of values at a time.
  constexpr size_t kBlock = 4096;
  std::vector<unsigned char> zeros(kBlock * 8, 0), stream(kBlock * 8 + 16);
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const size_t n = std::min(kBlock, values.size() - at);
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), stream.data(), &len, zeros.data(), static_cast<int>(n * 8)) !=
            1 ||
        len != static_cast<int>(n * 8)) {
      return absl::InternalError("OpenSSL: AES-256-CTR failed");
    }
    for (size_t i = 0; i < n; ++i) {
      uint64_t m;
      std::memcpy(&m, stream.data() + 8 * i, 8);
      uint64_t& v = values[at + i];
      v = (sign > 0 ? v + m : v - m) & keep;  // unsigned arithmetic wraps mod 2^64
    }
  }
  return absl::OkStatus();
}

int PairSign(std::string_view self, std::string_view peer) { return self < peer ? 1 : -1; }

}  // namespace fedlgc::privacy
