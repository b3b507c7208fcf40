// SHA-256 through OpenSSL's EVP interface (see sha256.h).
#include "core/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>

#include "base/str.h"

namespace fedlgc::core {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct FileClose {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string Hex(const unsigned char* d, unsigned n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = kDigits[d[i] >> 4];
    out[2 * i + 1] = kDigits[d[i] & 15];
  }
  return out;
}

// Feeds `read(buf, cap)` (bytes read, 0 at the end) into a SHA-256.
template <typename Read>
std::string Digest(const Read& read) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  unsigned char buf[1 << 16];
  for (size_t n; (n = read(buf, sizeof(buf))) > 0;) EVP_DigestUpdate(ctx.get(), buf, n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return Hex(md, len);
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  size_t pos = 0;
  return Digest([&](unsigned char* buf, size_t cap) {
    const size_t n = std::min(cap, bytes.size() - pos);
    std::copy_n(bytes.data() + pos, n, buf);
    pos += n;
    return n;
  });
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::unique_ptr<std::FILE, FileClose> f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) return absl::NotFoundError(StrCat(path, ": cannot open"));
  bool failed = false;
  std::string hex = Digest([&](unsigned char* buf, size_t cap) {
    const size_t n = std::fread(buf, 1, cap, f.get());
    failed |= n < cap && std::ferror(f.get());
    return n;
  });
  if (failed) return absl::DataLossError(StrCat(path, ": read error"));
  return hex;
}

}  // namespace fedlgc::core
