// Atomic file replacement and the checked state format (see atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/crc32c.h"
#include "base/str.h"

namespace fedlgc::core {
namespace {

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

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

absl::Status AtomicWriteFile(const std::string& path, std::string_view bytes,
                             Durability durability) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec)
    return absl::InternalError(StrCat("create ", p.parent_path().string(), ": ", ec.message()));
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open", tmp);
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Errno("write", tmp);
    }
    off += static_cast<size_t>(n);
  }
  if (durability == Durability::kDurable && ::fsync(fd) != 0) {
    ::close(fd);
    return Errno("fsync", tmp);
  }
  if (::close(fd) != 0) return Errno("close", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename", tmp);
  if (durability == Durability::kVisible) return absl::OkStatus();
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Errno("open", path);
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Errno("read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return std::optional<std::string>(std::move(out));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  auto f = ReadFileIfExists(path);
  if (!f.ok()) return f.status();
  if (!f->has_value()) return absl::NotFoundError(StrCat("cannot read ", path, ": no such file"));
  return std::move(**f);
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
