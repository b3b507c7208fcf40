// NumPy arrays as numpy.save and numpy.savez write them: the .npy format (a magic string,
// a header that is a Python dict literal, then the raw values) and .npz archives of them
// (a zip archive, stored or deflated, read with libzip). Only what a data set needs: the
// numeric dtypes in either byte order, C order. Every size is checked against the bytes
// present before anything is allocated, so a truncated or hostile file is refused with a
// message that names it, never trusted.
#ifndef FEDLGC_CORE_NPZ_H_
#define FEDLGC_CORE_NPZ_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

enum class NpyType { kBool, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64, kF16, kF32, kF64 };

// One array. Its values are in the host's (little-endian) byte order whatever the file's.
struct NpyArray {
  NpyType type = NpyType::kF32;
  std::vector<int64_t> shape;  // empty: a scalar
  std::string data;            // elements() * item_bytes() bytes

  size_t elements() const;
  size_t item_bytes() const;
  bool is_float() const;
  // The dtype as numpy writes it ("float32", "uint8"), for messages.
  std::string type_name() const;
  // The shape as Python prints it: "(60000, 28, 28)".
  std::string shape_text() const;
  // Element i as a double (any dtype).
  double At(size_t i) const;
};

// Parses one .npy file's bytes. `what` names the file in errors.
absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, std::string_view what);

// The arrays of an .npz archive by name (the member's name without ".npy"): from a file,
// or from bytes in memory (the fuzzer). INVALID_ARGUMENT or DATA_LOSS naming `what` (or
// the path) and the member when anything is wrong.
using NpzArrays = std::map<std::string, NpyArray>;
absl::StatusOr<NpzArrays> ReadNpz(const std::string& path);
absl::StatusOr<NpzArrays> ParseNpz(std::string_view bytes, std::string_view what);

// Writes `arrays` as an uncompressed .npz archive (numpy.savez's format), for tests and
// tools that hand data to Python.
absl::Status WriteNpz(const std::string& path, const NpzArrays& arrays);
// One array as .npy bytes (version 1.0 header, little-endian, C order).
std::string NpyBytes(const NpyArray& array);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_NPZ_H_
