// The byte form of float vectors that travel as blobs (the global model, LSGD leader
// models, LGC latents and echoes): little-endian float32, 4 bytes per value. Both ends
// encode and decode them here.
#ifndef FEDLGC_CORE_FLOAT_BYTES_H_
#define FEDLGC_CORE_FLOAT_BYTES_H_

#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/str.h"

namespace fedlgc::core {

inline std::string FloatsToBytes(std::span<const float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// `n` floats from `bytes` (DATA_LOSS, naming `what`, when the size differs).
inline absl::StatusOr<std::vector<float>> FloatsFromBytes(std::string_view bytes, size_t n,
                                                          std::string_view what) {
  if (bytes.size() != n * 4) {
    return absl::DataLossError(StrCat(what, ": ", bytes.size(), " bytes for ", n, " floats"));
  }
  std::vector<float> v(n);
  if (n > 0) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// All the floats of `bytes` (DATA_LOSS, naming `what`, unless its size is a multiple of 4).
inline absl::StatusOr<std::vector<float>> FloatsFromBytes(std::string_view bytes,
                                                          std::string_view what) {
  if (bytes.size() % 4 != 0) {
    return absl::DataLossError(StrCat(what, ": ", bytes.size(), " bytes are not whole floats"));
  }
  return FloatsFromBytes(bytes, bytes.size() / 4, what);
}

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_FLOAT_BYTES_H_
