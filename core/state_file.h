// The envelope of fedlgc's state files: a checked little-endian byte format shared by the
// coordinator's checkpoints and drivers' round states and the edge client's state, written
// whole and atomically (base/file.h). A state file ends with a CRC32C of the rest, so a
// torn or corrupted file is refused rather than half-loaded; inside, the state is a
// protobuf message (core/state_message.h).
#ifndef FEDLGC_CORE_STATE_FILE_H_
#define FEDLGC_CORE_STATE_FILE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/file.h"

namespace fedlgc::core {

// A driver's state as of a committed round, next to the checkpoint that names the round:
// <dir>/<prefix>-<round>.bin. Saving round r removes the files of rounds before r - 1 (the
// checkpoint of r - 1 may still be the one on disk when a crash comes).
std::string RoundStatePath(const std::string& dir, std::string_view prefix, uint64_t round);
absl::Status SaveRoundState(const std::string& dir, std::string_view prefix, uint64_t round,
                            std::string_view bytes);

// Appends fixed-width little-endian values and length-prefixed blobs.
class StateWriter {
 public:
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Floats(std::span<const float> v) {
    U64(v.size());
    Raw(v.data(), v.size() * 4);
  }
  // Appends bytes as they are, without a length: a body that runs to the end of the file
  // (a protobuf message, core/state_message.h).
  void Tail(std::string_view s) { out_.append(s); }
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
  bool F64(double* v) { return Raw(v, 8); }
  bool Str(std::string* s, size_t max = 1 << 20);
  bool Floats(std::vector<float>* v, size_t max = size_t{1} << 31);
  bool done() const { return pos_ == data_.size(); }
  // Everything not read yet (what Tail wrote); the reader is done after it.
  std::string_view Rest() {
    std::string_view rest = data_.substr(pos_);
    pos_ = data_.size();
    return rest;
  }

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

// A round state file starts with u32 magic, u32 version, u64 round. The writer of one,
// and the reader of <dir>/<prefix>-<round>.bin: reads it into *bytes, checks the CRC,
// magic, version and round, and returns a reader (viewing *bytes) past them.
StateWriter BeginRoundState(uint32_t magic, uint32_t version, uint64_t round);
absl::StatusOr<StateReader> ReadRoundState(const std::string& dir, std::string_view prefix,
                                           uint64_t round, uint32_t magic, uint32_t version,
                                           std::string* bytes);
// The same for a format whose versions min_version..max_version load (the current one and
// the ones its converters read); *version says which one the file holds.
absl::StatusOr<StateReader> ReadRoundState(const std::string& dir, std::string_view prefix,
                                           uint64_t round, uint32_t magic, uint32_t min_version,
                                           uint32_t max_version, uint32_t* version,
                                           std::string* bytes);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_STATE_FILE_H_
