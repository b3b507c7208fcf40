// The checked state file envelope (see state_file.h).
#include "core/state_file.h"

#include <cstring>
#include <filesystem>

#include "base/crc32c.h"
#include "base/str.h"

namespace fedlgc::core {

std::string RoundStatePath(const std::string& dir, std::string_view prefix, uint64_t round) {
  return StrCat(dir, "/", prefix, "-", round, ".bin");
}

absl::Status SaveRoundState(const std::string& dir, std::string_view prefix, uint64_t round,
                            std::string_view bytes) {
  if (absl::Status st = AtomicWriteFile(RoundStatePath(dir, prefix, round), bytes); !st.ok())
    return st;
  std::error_code ec;
  if (round < 2) return absl::OkStatus();
  for (uint64_t old = round - 2;; --old) {
    if (!std::filesystem::remove(RoundStatePath(dir, prefix, old), ec) || old == 0) break;
  }
  return absl::OkStatus();
}

StateWriter BeginRoundState(uint32_t magic, uint32_t version, uint64_t round) {
  StateWriter w;
  w.U32(magic);
  w.U32(version);
  w.U64(round);
  return w;
}

absl::StatusOr<StateReader> ReadRoundState(const std::string& dir, std::string_view prefix,
                                           uint64_t round, uint32_t magic, uint32_t version,
                                           std::string* bytes) {
  uint32_t found = 0;
  return ReadRoundState(dir, prefix, round, magic, version, version, &found, bytes);
}

absl::StatusOr<StateReader> ReadRoundState(const std::string& dir, std::string_view prefix,
                                           uint64_t round, uint32_t magic, uint32_t min_version,
                                           uint32_t max_version, uint32_t* version,
                                           std::string* bytes) {
  const std::string path = RoundStatePath(dir, prefix, round);
  auto read = ReadFile(path);
  if (!read.ok()) return read.status();
  *bytes = std::move(read).value();
  auto reader = StateReader::Open(*bytes, path);
  if (!reader.ok()) return reader.status();
  uint32_t m;
  uint64_t r;
  if (!reader->U32(&m) || !reader->U32(version) || !reader->U64(&r) || m != magic ||
      *version < min_version || *version > max_version || r != round) {
    return absl::DataLossError(StrCat(
        path, ": not the ", prefix, " state (version ",
        min_version == max_version ? StrCat(max_version) : StrCat(min_version, " to ", max_version),
        ") of round ", round));
  }
  return reader;
}

std::string StateWriter::Finish() {
  const uint32_t crc = Crc32c(out_.data(), out_.size());
  Raw(&crc, 4);
  return std::move(out_);
}

absl::StatusOr<StateReader> StateReader::Open(std::string_view bytes, std::string_view what) {
  if (bytes.size() < 4) return absl::DataLossError(StrCat(what, ": truncated"));
  uint32_t crc;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (Crc32c(bytes.data(), bytes.size() - 4) != crc) {
    return absl::DataLossError(StrCat(what, ": checksum mismatch"));
  }
  return StateReader(bytes.substr(0, bytes.size() - 4));
}

bool StateReader::Str(std::string* s, size_t max) {
  uint32_t n;
  if (!U32(&n) || n > max || data_.size() - pos_ < n) return false;
  s->assign(data_.data() + pos_, n);
  pos_ += n;
  return true;
}

bool StateReader::Floats(std::vector<float>* v, size_t max) {
  uint64_t n;
  if (!U64(&n) || n > max || (data_.size() - pos_) / 4 < n) return false;
  v->resize(n);
  return Raw(v->data(), n * 4);
}

}  // namespace fedlgc::core
