// TensorBoard event files (see tensorboard.h).
#include "monitoring/tensorboard.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/crc32c.h"
#include "base/str.h"
#include "protos/tensorboard.pb.h"

namespace fedlgc::monitoring {
namespace {

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

uint32_t MaskedCrc32c(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 16);
  PutLittleEndian(bytes.size(), 8, &out);
  PutLittleEndian(MaskedCrc32c(out), 4, &out);
  out.append(bytes);
  PutLittleEndian(MaskedCrc32c(bytes), 4, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir) {
  const double wall_time = WallSeconds();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("--tensorboard ", dir, ": ", ec.message()));
  // Two writers of one process in the same second (tests, a restart in place) get files
  // of their own.
  static std::atomic<int> opened{0};
  const std::string path =
      StrCat(dir, "/events.out.tfevents.", static_cast<long long>(wall_time), ".", HostName(), ".",
             static_cast<long long>(::getpid()), ".", opened++);
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("--tensorboard: cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(f, path));
  tensorboard::Event first;
  first.set_wall_time(wall_time);
  first.set_file_version("brain.Event:2");
  if (absl::Status st = w->Append(first.SerializeAsString()); !st.ok()) return st;
  return w;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::Write(int64_t step, std::span<const Scalar> scalars) {
  tensorboard::Event e;
  e.set_wall_time(WallSeconds());
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const Scalar& s : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(s.tag);
    v->set_simple_value(static_cast<float>(s.value));
  }
  return Append(e.SerializeAsString());
}

absl::Status TensorBoardWriter::Append(std::string_view event_bytes) {
  const std::string record = TfRecord(event_bytes);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(StrCat("writing ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::monitoring
