// The compressed downlink (docs/protocol.md#compressed-downloads): the global model, and
// the model-valued blobs a mode broadcasts (RoundDriver::Broadcasts: LSGD's group
// references), go to clients as chains of broadcast deltas (codecs/broadcast.h) from the
// version they hold, through the job's --downlink-codec, with error feedback at the
// coordinator. The model clients train on is the one the deltas rebuild (Held), the same
// to the bit at both ends; the true model (RoundEngine's, the driver's) takes the updates,
// and what the deltas have not carried yet goes in the next one.
//
// Every version is published before clients can ask for it (the global model's before its
// round's checkpoint, a mode's blob when first asked for), and the broadcast's state (held
// model and the window of deltas) is written beside the checkpoints, so a coordinator
// restarted after a SIGKILL serves the same chains and clients keep their models. A client
// whose version the window no longer reaches, or whose chain would be larger than the
// model, downloads the held model whole.
//
// Thread-safe.
#ifndef FEDLGC_COORDINATOR_DOWNLINK_H_
#define FEDLGC_COORDINATOR_DOWNLINK_H_

#include <cstdint>
#include <deque>
#include <functional>
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
  std::vector<uint64_t> cuts;  // the model's scale cuts (core/model.h), set by the coordinator
  size_t window = 8;           // deltas kept for clients that are behind
  uint32_t max_frame_bytes = 256 * 1024;
  std::string job;  // the job key (CoordinatorOptions::JobKey): a state of another is not loaded
  // Superseded versions still served whole (buffered rounds: a client asked from a version
  // that a commit superseded before its download was done); not kept across a restart.
  size_t keep_versions = 0;
};

// The codec a --downlink-codec spec runs as: a qsgd(...) anywhere in it that names no norm
// takes norm=linf. The broadcast's error feedback is exact, so its codec need not be
// unbiased, and levels of each bucket's largest magnitude keep the model clients hold 0.19
// steps behind the true one where the L2 norm keeps it 1.25 steps behind (1.7 points of
// accuracy in 6 rounds of 4 clients; docs/protocol.md). norm=l2 keeps the L2 norm. *note
// says what changed, "" when nothing did (or the spec does not parse: Create says why).
std::string EffectiveDownlinkCodec(const std::string& spec, std::string* note = nullptr);

// Whether `options` compress the downlink (any codec but fp32).
bool DownlinkCompressed(const DownlinkOptions& options);

class Downlink {
 public:
  // The broadcast of blob `name` ("" the global model) at `version`: the newest state saved
  // in `state_dir` at `version` or before for the same codec (a restart), advanced to
  // `model` when older, else a new one whose clients all start with a full download of
  // `model`. INVALID_ARGUMENT for a codec a broadcast cannot use.
  static absl::StatusOr<std::unique_ptr<Downlink>> Open(const DownlinkOptions& options,
                                                        const std::string& state_dir,
                                                        const std::string& name,
                                                        uint64_t version,
                                                        std::span<const float> model);

  // The true model of committed `version` (> version()): the next delta, then its state
  // on disk. A version already published is a no-op (but for a state whose write failed,
  // written now).
  absl::Status Publish(uint64_t version, std::span<const float> model);

  // What a client holding `held` (nullopt: nothing usable) downloads to reach `version`:
  // the chain of deltas from `held` (empty when it is up to date), or the held model whole
  // when the chain is not kept or larger. A superseded version still kept
  // (DownlinkOptions::keep_versions) goes whole. NOT_FOUND for any other version.
  absl::StatusOr<std::shared_ptr<const ModelBlob>> Serve(uint64_t version,
                                                         std::optional<uint64_t> held);

  // The held model saved in `state_dir` for blob `name` at `version`, read only (for
  // inspection and tests); NOT_FOUND when no state of that version is kept.
  static absl::StatusOr<std::vector<float>> SavedHeld(const DownlinkOptions& options,
                                                      const std::string& state_dir,
                                                      const std::string& name, uint64_t version);

  // The model clients hold at version() (what they train on, and what a mode's reference
  // is): float32 values.
  std::vector<float> Held() const;
  uint64_t version() const;
  const std::string& codec() const { return codec_spec_; }

 private:
  Downlink(DownlinkOptions options, std::string state_dir, std::string prefix,
           std::unique_ptr<codecs::BroadcastEncoder> encoder);
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetBlobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DownlinkOptions options_;
  const std::string state_dir_;
  const std::string prefix_;  // of its state files: <prefix>-<version>.bin
  const std::string codec_spec_;
  mutable absl::Mutex mu_;
  std::unique_ptr<codecs::BroadcastEncoder> encoder_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelBlob> full_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<const ModelBlob>> past_ ABSL_GUARDED_BY(mu_);  // keep_versions
  // Chains of the current version by the version they start from.
  std::map<uint64_t, std::shared_ptr<const ModelBlob>> chains_ ABSL_GUARDED_BY(mu_);
  uint32_t true_crc_ ABSL_GUARDED_BY(mu_) = 0;  // of the true model at version()
  std::optional<uint64_t> saved_ ABSL_GUARDED_BY(mu_);  // the version whose state is on disk
};

// The broadcasts of a job by blob name, opened when first used. Thread-safe.
class Downlinks {
 public:
  // INVALID_ARGUMENT for a codec a broadcast cannot use.
  static absl::StatusOr<std::unique_ptr<Downlinks>> Create(DownlinkOptions options,
                                                           std::string state_dir);
  // The broadcast of `name` brought to `version` (Downlink::Open, then Publish); `model`
  // gives the true model of that version, called only when the broadcast is opened or
  // advanced.
  absl::StatusOr<Downlink*> At(const std::string& name, uint64_t version,
                               const std::function<std::vector<float>()>& model);
  // The global model's broadcast, once opened (nullptr before).
  Downlink* global() const;
  const std::string& codec() const { return codec_spec_; }

 private:
  Downlinks(DownlinkOptions options, std::string state_dir, std::string codec_spec)
      : options_(std::move(options)),
        state_dir_(std::move(state_dir)),
        codec_spec_(std::move(codec_spec)) {}

  const DownlinkOptions options_;
  const std::string state_dir_;
  const std::string codec_spec_;  // canonical
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Downlink>> by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_DOWNLINK_H_
