// The edge client's side of the compressed downlink (coordinator/downlink.h): the global
// model as this client holds it, rebuilt from the coordinator's chains of deltas and
// checked against the CRC32C they carry, and kept in <state_dir>/<id>.downlink so a
// restarted client asks for the chain from its version rather than the model whole.
//
// Not thread-safe (the event loop's thread).
#ifndef FEDLGC_EDGE_CLIENT_DOWNLINK_RECEIVER_H_
#define FEDLGC_EDGE_CLIENT_DOWNLINK_RECEIVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "edge_client/transport.h"

namespace fedlgc::edge_client {

class DownlinkReceiver {
 public:
  // Persists to `path`; holds nothing until Configure.
  explicit DownlinkReceiver(std::string path) : path_(std::move(path)) {}

  // The job's downlink codec (JoinReply.downlink_codec; "": plain float32 downloads).
  // Loads the model saved for the same codec and `dim`; a different codec or a file that
  // does not load leaves nothing held (the next download is the model whole).
  absl::Status Configure(const std::string& codec, uint64_t dim);
  bool active() const { return codec_ != nullptr; }
  // The version this client holds; nullopt: none.
  std::optional<uint64_t> held_version() const { return version_; }
  const std::vector<float>& model() const { return model_; }

  // Takes a download of `version`: the model whole, or a chain applied to the held model
  // (all or nothing). On success the result is held and saved. A chain that does not
  // rebuild the coordinator's model: DATA_LOSS (mismatch) or INVALID_ARGUMENT
  // (malformed), and the held model is dropped: download the model whole.
  absl::StatusOr<std::vector<float>> Take(const Transport::ModelDownload& download,
                                          uint64_t version);
  // Holds `model` at `version` and saves it (Take's last step; tests plant a model).
  absl::Status Hold(uint64_t version, std::vector<float> model);
  void Forget();

 private:
  const std::string path_;
  std::string spec_;
  std::unique_ptr<codecs::Codec> codec_;
  uint64_t dim_ = 0;
  std::optional<uint64_t> version_;
  std::vector<float> model_;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_DOWNLINK_RECEIVER_H_
