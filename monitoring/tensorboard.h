// TensorBoard event files (--tensorboard DIR on the coordinator and fedlgc-sim), written
// from the published format with no TensorFlow beneath: a file of TFRecords, each a
// little-endian uint64 length, the length's masked CRC32C, the bytes of one Event message
// (protos/tensorboard.proto) and their masked CRC32C. The first Event names the format
// ("brain.Event:2"); each after it holds one step's scalars, which TensorBoard's scalars
// dashboard plots by tag. A writer makes a file of its own, so a coordinator that
// restarts, or several that share DIR, never write into one file.
#ifndef FEDLGC_MONITORING_TENSORBOARD_H_
#define FEDLGC_MONITORING_TENSORBOARD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::monitoring {

// TFRecord's checksum: the CRC32C of `bytes` rotated right by 15 bits, plus 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view bytes);
// `bytes` framed as one TFRecord.
std::string TfRecord(std::string_view bytes);

struct Scalar {
  std::string tag;  // "accuracy/server": TensorBoard groups tags by their first part
  double value = 0;
};

// Not thread-safe: one thread writes (the coordinator's round recorder).
class TensorBoardWriter {
 public:
  // Makes `dir` if needed and a new file in it,
  // events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, that begins with the format's
  // record. Events carry the system clock's time (TensorBoard's "relative" and "wall"
  // axes).
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event of `scalars` at `step`, flushed, so that a TensorBoard watching the folder
  // plots it at once. A value that is not finite is written as it is (TensorBoard shows
  // NaN); callers leave out what was not measured.
  absl::Status Write(int64_t step, std::span<const Scalar> scalars);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  absl::Status Append(std::string_view event_bytes);

  std::FILE* file_;
  std::string path_;
};

}  // namespace fedlgc::monitoring

#endif  // FEDLGC_MONITORING_TENSORBOARD_H_
