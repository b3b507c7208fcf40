// The compressed downlink (docs/protocol.md#compressed-downloads): the global model goes
// to clients as a chain of broadcast deltas (codecs/broadcast.h) from the version they
// hold, through the job's --downlink-codec, with error feedback at the coordinator. The
// model clients train on is the one the deltas rebuild (Held), the same to the bit at both
// ends; the true model (RoundEngine's) takes the updates, and what the deltas have not
// carried yet goes in the next one.
//
// Every committed version is published here before its round's checkpoint, and the
// broadcast's state (held model and the window of deltas) is written beside it, so a
// coordinator restarted after a SIGKILL serves the same chains and clients keep their
// models. A client whose version the window no longer reaches, or whose chain would be
// larger than the model, downloads the held model whole.
//
// Thread-safe.
#ifndef FEDLGC_COORDINATOR_DOWNLINK_H_
#define FEDLGC_COORDINATOR_DOWNLINK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codecs/broadcast.h"
#include "coordinator/round_engine.h"

namespace fedlgc::coordinator {

struct DownlinkOptions {
  std::string codec = "fp32";  // "fp32": plain float32 downloads, no Downlink at all
  size_t window = 8;           // deltas kept for clients that are behind
  uint32_t max_frame_bytes = 256 * 1024;
};

// Whether `options` compress the downlink (any codec but fp32).
bool DownlinkCompressed(const DownlinkOptions& options);

class Downlink {
 public:
  // The broadcast at `version`: the one saved beside the checkpoint of that version when
  // there is one for the same codec (a restart), else a new one whose clients all start
  // with a full download of `model`. INVALID_ARGUMENT for a codec a broadcast cannot use.
  static absl::StatusOr<std::unique_ptr<Downlink>> Open(const DownlinkOptions& options,
                                                        const std::string& state_dir,
                                                        uint64_t version,
                                                        std::span<const float> model);

  // The true model of committed `version` (> version()): the next delta, then its state
  // on disk. A version already published is a no-op.
  absl::Status Publish(uint64_t version, std::span<const float> model);

  // What a client holding `held` (nullopt: nothing usable) downloads to reach `version`:
  // the chain of deltas from `held` (empty when it is up to date), or the held model whole
  // when the chain is not kept or larger. NOT_FOUND when `version` is not the current one.
  absl::StatusOr<std::shared_ptr<const ModelBlob>> Serve(uint64_t version,
                                                         std::optional<uint64_t> held);

  // The model clients hold at version() (what they train on, and what a mode's reference
  // is): float32 values.
  std::vector<float> Held() const;
  uint64_t version() const;
  const std::string& codec() const { return codec_spec_; }

 private:
  Downlink(DownlinkOptions options, std::string state_dir,
           std::unique_ptr<codecs::BroadcastEncoder> encoder);
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetBlobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DownlinkOptions options_;
  const std::string state_dir_;
  const std::string codec_spec_;
  mutable absl::Mutex mu_;
  std::unique_ptr<codecs::BroadcastEncoder> encoder_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelBlob> full_ ABSL_GUARDED_BY(mu_);
  // Chains of the current version by the version they start from.
  std::map<uint64_t, std::shared_ptr<const ModelBlob>> chains_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_DOWNLINK_H_
