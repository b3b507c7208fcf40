// Durable whole-file writes (write a temporary, fsync, rename, fsync the folder) and a
// checked little-endian byte format for state files, shared by the coordinator's
// checkpoints and the edge client's residual. A state file ends with a CRC32C of the
// rest, so a torn or corrupted file is refused rather than half-loaded.
#ifndef FEDLGC_CORE_ATOMIC_FILE_H_
#define FEDLGC_CORE_ATOMIC_FILE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

// Replaces `path` with `bytes` atomically: after a crash the file holds either the old or
// the new contents, never a mix. Creates the parent folder if needed.
absl::Status AtomicWriteFile(const std::string& path, std::string_view bytes);
// The whole file; nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path);
// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Appends fixed-width little-endian values and length-prefixed blobs.
class StateWriter {
 public:
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Floats(std::span<const float> v) {
    U64(v.size());
    Raw(v.data(), v.size() * 4);
  }
  // Appends the CRC32C of everything written and returns the result.
  std::string Finish();

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// Reads what StateWriter wrote; every read checks bounds. Construct with Open().
class StateReader {
 public:
  // Verifies the trailing CRC32C.
  static absl::StatusOr<StateReader> Open(std::string_view bytes, std::string_view what);
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool Str(std::string* s, size_t max = 1 << 20);
  bool Floats(std::vector<float>* v, size_t max = size_t{1} << 31);
  bool done() const { return pos_ == data_.size(); }

 private:
  explicit StateReader(std::string_view data) : data_(data) {}
  bool Raw(void* p, size_t n) {
    if (data_.size() - pos_ < n) return false;
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_ATOMIC_FILE_H_
