// Weight envelope (see envelope.h).
#include "autoencoder/envelope.h"

#include <cstring>

#include "base/crc32c.h"
#include "base/str.h"
#include "codecs/byte_io.h"

namespace fedlgc::autoencoder {

using codecs::ByteReader;
using codecs::PutScalar;
namespace {
constexpr char kMagic[4] = {'F', 'L', 'A', 'E'};
constexpr uint32_t kFormatVersion = 1;
}  // namespace

absl::StatusOr<std::string_view> OpenEnvelope(std::string_view bytes, uint32_t kind,
                                              int64_t* length) {
  constexpr size_t kHeader = 4 + 4 + 4 + 8;
  if (bytes.size() < kHeader + 4) return absl::DataLossError("autoencoder weights: truncated");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (crc != Crc32c(bytes.data(), bytes.size() - 4)) {
    return absl::DataLossError("autoencoder weights: checksum mismatch");
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError("autoencoder weights: not FLAE data");
  }
  uint32_t version = 0, got_kind = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&got_kind, bytes.data() + 8, 4);
  std::memcpy(length, bytes.data() + 12, 8);
  if (version != kFormatVersion) {
    return absl::UnimplementedError(StrCat("autoencoder weights: format version ", version,
                                           "; this build reads ", kFormatVersion));
  }
  if (got_kind != kind) {
    return absl::InvalidArgumentError(
        StrCat("autoencoder weights: kind ", got_kind, ", expected ", kind));
  }
  return bytes.substr(kHeader, bytes.size() - kHeader - 4);
}

std::string Seal(uint32_t kind, int64_t length, const std::string& body) {
  std::string out(kMagic, 4);
  PutScalar<uint32_t>(&out, kFormatVersion);
  PutScalar<uint32_t>(&out, kind);
  PutScalar<int64_t>(&out, length);
  out += body;
  PutScalar<uint32_t>(&out, Crc32c(out.data(), out.size()));
  return out;
}

}  // namespace fedlgc::autoencoder
