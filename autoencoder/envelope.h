// The envelope of the autoencoder's weight bytes: "FLAE", u32 format version, u32 kind,
// i64 input length L, the body, CRC32C of everything before it. Torch-free.
#ifndef FEDLGC_AUTOENCODER_ENVELOPE_H_
#define FEDLGC_AUTOENCODER_ENVELOPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::autoencoder {

inline constexpr uint32_t kKindEncoder = 1;  // the encoder alone (for the LGC leader)
inline constexpr uint32_t kKindFull = 2;     // encoder and every decoder (checkpoints)
inline constexpr uint32_t kKindDecoder = 3;  // one client's decoder (LGC with predict=1)

std::string Seal(uint32_t kind, int64_t length, const std::string& body);
// Checks checksum, magic, version and kind; returns the body and sets *length.
absl::StatusOr<std::string_view> OpenEnvelope(std::string_view bytes, uint32_t kind,
                                              int64_t* length);

}  // namespace fedlgc::autoencoder

#endif  // FEDLGC_AUTOENCODER_ENVELOPE_H_
