// The tests' own reader of TensorBoard event files, written from the format and not from
// monitoring/tensorboard.cc: each record's length and bytes checked against their masked
// CRC32Cs (the mask written out here again), each Event parsed with the published field
// numbers (protos/tensorboard.proto). Any damage is an error naming the record.
#ifndef FEDLGC_TESTS_MONITORING_TENSORBOARD_READER_H_
#define FEDLGC_TESTS_MONITORING_TENSORBOARD_READER_H_

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/crc32c.h"
#include "protos/tensorboard.pb.h"

namespace fedlgc::testing {

inline uint32_t TestMaskedCrc(const char* p, size_t n) {
  const uint32_t c = Crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

inline uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Every Event of one file's bytes, in order.
inline absl::StatusOr<std::vector<tensorboard::Event>> ReadEvents(const std::string& bytes) {
  std::vector<tensorboard::Event> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = "record " + std::to_string(out.size());
    if (bytes.size() - at < 12) return absl::DataLossError(where + ": a cut header");
    const uint64_t len = LittleEndian(bytes, at, 8);
    if (LittleEndian(bytes, at + 8, 4) != TestMaskedCrc(bytes.data() + at, 8)) {
      return absl::DataLossError(where + ": the length's CRC");
    }
    if (bytes.size() - at - 12 < len + 4) return absl::DataLossError(where + ": cut");
    const char* data = bytes.data() + at + 12;
    if (LittleEndian(bytes, at + 12 + len, 4) != TestMaskedCrc(data, len)) {
      return absl::DataLossError(where + ": the data's CRC");
    }
    tensorboard::Event e;
    if (!e.ParseFromArray(data, static_cast<int>(len))) {
      return absl::DataLossError(where + ": not an Event");
    }
    out.push_back(std::move(e));
    at += 12 + len + 4;
  }
  return out;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The event files of `dir` (names holding "tfevents"), sorted.
inline std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().find("tfevents") != std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// step -> tag -> value, over a file's summaries.
inline std::map<int64_t, std::map<std::string, float>> ScalarsByStep(
    const std::vector<tensorboard::Event>& events) {
  std::map<int64_t, std::map<std::string, float>> out;
  for (const auto& e : events) {
    if (!e.has_summary()) continue;
    for (const auto& v : e.summary().value()) out[e.step()][v.tag()] = v.simple_value();
  }
  return out;
}

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_MONITORING_TENSORBOARD_READER_H_
