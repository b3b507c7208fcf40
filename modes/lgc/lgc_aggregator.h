// The arithmetic of an LGC job at the coordinator (modes/lgc/lgc_plan.h, docs/lgc.md):
// validation and exact rebuilds of the clients' payloads, their aggregation, the
// autoencoder and its online training (train > 0), and the state that survives a restart
// (lgc-<round>.bin in the state folder, written before the round's checkpoint; the one of
// the checkpoint's round is loaded on restart). The round protocol around it (leaders,
// promotion, the push of the leader's payload) is LgcDriver's.
#ifndef FEDLGC_MODES_LGC_LGC_AGGREGATOR_H_
#define FEDLGC_MODES_LGC_LGC_AGGREGATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "autoencoder/autoencoder.h"
#include "codecs/dense_codec.h"
#include "coordinator/collectors.h"
#include "coordinator/robust.h"
#include "coordinator/round_engine.h"
#include "modes/lgc/ae_trainer.h"
#include "modes/lgc/lgc_plan.h"

namespace fedlgc::modes {

using coordinator::ModelBlob;
using coordinator::PayloadCollector;
using lgc::LgcStage;

// Thread-safety: Decoder, Validate, EncoderBytes and LeaderPayloadBytes may run on RPC
// threads while the round loop runs the rest. With train > 0 the autoencoder trains on a
// thread of its own until the switch (AeTrainer, ae_trainer.h): the round loop hands it
// batches and never waits for a step (but with ae_wait, at the switch). Lock order: the
// trainer takes ae_mu_ for each step and each copy of the weights, never under its own
// lock; the round loop stops and awaits the trainer without ae_mu_.
class LgcAggregator {
 public:
  // `warmup`: the job's warm-up rounds (none are needed). Loads the state of
  // `committed_round` when it is > 0.
  static absl::StatusOr<std::unique_ptr<LgcAggregator>> Create(lgc::LgcPlan plan, uint64_t warmup,
                                                               uint64_t dim, std::string state_dir,
                                                               uint64_t committed_round,
                                                               uint64_t seed, std::string device,
                                                               int nice = 10);

  ~LgcAggregator();

  // The stage `round` is in, once the round loop has opened it (BeginRound).
  LgcStage Stage(uint64_t round) const {
    return lgc::StageOf(plan_, round, warmup_, switch_round_.load());
  }
  // The round loop opens `round` (before its RoundStart goes out) and learns its stage.
  // The first round past the training rounds that finds the trainer done (with ae_wait:
  // that waits for it) is the switch: the autoencoder is frozen and the switch is written
  // into the state of the round before, with the weights it codes with, so that a
  // coordinator killed from here on codes with the same ones.
  absl::StatusOr<LgcStage> BeginRound(uint64_t round);
  // The first stage-3 round (0: not yet).
  uint64_t switch_round() const { return switch_round_.load(); }
  // Whether the trainer has trained every batch it was given (true without one).
  bool TrainingDone() const;
  // Until it has, or its training failed, or it was stopped.
  void AwaitTraining() const;
  // Stage 3 has begun: the autoencoder stops training, decoders may be served, and a CPU
  // copy of it rebuilds the clients' predictions (see Aggregate).
  void Freeze();
  uint64_t k() const { return k_; }
  // The support size of `round` (wider in the ramp; the plan's in stage 3).
  uint64_t KAt(uint64_t round) const {
    return Stage(round) == LgcStage::kAutoencoder
               ? k_
               : plan_.SupportSizeAt(dim_, round > warmup_ ? round - warmup_ : 0);
  }
  static constexpr uint64_t kEncoderVersion = 1;
  // The frozen encoder for stage 3 (version kEncoderVersion); empty with train=0.
  std::string EncoderBytes() const;
  // `client`'s decoder (blob "lgc-decoder", version kEncoderVersion), made once per
  // driver after Freeze(); nullptr before. Thread-safe.
  std::shared_ptr<const ModelBlob> Decoder(const std::string& client);
  // A leader payload of `round` as the coordinator pushes it (LgcLatent): in stage 2 its
  // body itself (`cells`), in stage 3 its support (u32 little-endian) and latent (float32).
  struct LeaderBytes {
    std::string support, latent, cells;
  };
  absl::StatusOr<LeaderBytes> LeaderPayloadBytes(uint64_t round,
                                                 std::span<const uint8_t> leader_body) const;

  // Checks a payload of `round`: structure, sizes, finite values.
  absl::Status Validate(uint64_t round, std::string_view spec, std::span<const uint8_t> body) const;

  struct Outcome {
    std::vector<float> delta;  // the mean update (zero off the support)
    std::set<std::string> counted;
    bool latent = false;                                // stage 3: a leader payload was there
    // Stage-2 rounds before the switch (train > 0): the losses of the newest batch the
    // trainer finished, on that batch before its first step (-1 before any), the round it
    // came from, and the batches still waiting for the trainer (-1 in other rounds).
    double ae_reconstruction = -1, ae_similarity = -1;
    uint64_t ae_trained_round = 0;
    int64_t ae_backlog = -1;
    // Stage 2: the mean cosine similarity of two clients' values on the support (-2 with
    // fewer than two clients): how much of one client's values another's latent can carry.
    double values_cosine = -2;
    // Rebuilds that differ from what the client computed (in stage 3: another libtorch
    // build or CPU kernel): counted, but that client's error feedback is off.
    int rebuild_mismatches = 0;
    // Each client's values' norm before clipping, the bound and how many were clipped.
    std::map<std::string, double> norms;
    double clip_bound = 0;
    int clipped = 0;
    std::set<std::string> excluded;  // left out by the chooser
  };
  // The delta (and who counts in it) of the round's decoded values without `excluded`.
  using Combine = std::function<absl::StatusOr<std::vector<float>>(
      const std::set<std::string>& excluded, std::set<std::string>* counted)>;
  // Picks the clients to leave out (the model guard, coordinator/round_driver.h
  // ChooseUnderGuard), given the values' norms and a way to combine without them.
  using Chooser = std::function<absl::StatusOr<std::set<std::string>>(
      const std::map<std::string, double>& norms, const Combine& combine)>;
  // Aggregates the payloads of a stage-2 or stage-3 round (leader: the round's leader
  // now); a training round's rebuilds go to the trainer as a batch, and it returns
  // without waiting for them to train. The values are
  // clipped and combined with `robust` (coordinator/robust.h) per support; `choose`
  // (when given) may leave clients out, who then neither count nor train the
  // autoencoder. Only leader payloads from `leaders` (nullptr: from `leader`) count and
  // can be named; a rebuild whose CRC32C differs from the client's is counted and
  // reported.
  absl::StatusOr<Outcome> Aggregate(
      uint64_t round, const std::string& leader,
      const std::map<std::string, PayloadCollector::Payload>& payloads,
      const std::set<std::string>* leaders = nullptr,
      const coordinator::AggregatorOptions& robust = {}, const Chooser& choose = nullptr);
  // The last LGC round each client led (the round loop's alone). Saved with the state, so
  // a restarted coordinator chooses as before: a leader payload a client sent to the
  // coordinator before the restart counts when it comes again.
  const std::map<std::string, uint64_t>& led() const { return led_; }
  void Led(const std::string& client, uint64_t round) { led_[client] = round; }

  // Writes lgc-<round>.bin atomically and removes states older than round - 1.
  absl::Status Save(uint64_t round) const;

 private:
  struct Item;
  struct Reference {
    std::vector<uint32_t> support;
    std::vector<float> latent;  // stage 3; in stage 2 the leader's decoded values
  };
  struct Decoded;

  LgcAggregator(lgc::LgcPlan plan, uint64_t warmup, uint64_t dim, std::string state_dir,
                autoencoder::AeOptions ae_options);
  // Restores the state of `round`; *ae_steps: the autoencoder's training steps in it.
  absl::Status Load(uint64_t round, uint64_t* ae_steps);
  // The payloads of a stage-2 or stage-3 round, decoded (Aggregate's first step).
  Decoded DecodePayloads(uint64_t round, LgcStage stage, const std::string& leader,
                         const std::map<std::string, PayloadCollector::Payload>& payloads,
                         const std::set<std::string>* leaders) const;
  void DecodeLeaderPayload(LgcStage stage, const std::string& client,
                           const PayloadCollector::Payload& p, const std::string& leader,
                           Decoded* d) const;
  void DecodeFollowerPayload(LgcStage stage, const std::string& client,
                             const PayloadCollector::Payload& p, Decoded* d) const;
  // Stage 3: each client's values rebuilt from the latent and its payload.
  absl::Status RebuildStage3(uint64_t round, Decoded* d, Outcome* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ae_mu_);
  // A rebuild (it.v) other than the one its client computed (its CRC32C): counted in *out
  // and logged.
  static void CountMismatch(uint64_t round, const Item& it, Outcome* out);
  // Stage 2: each follower's values rebuilt from the leader's and its correction; a
  // rebuild that is not finite does not count.
  void RebuildCorrections(uint64_t round, Decoded* d, Outcome* out) const;
  // The clients' values (but `excluded`'s) clipped and combined with `robust`, per
  // support, placed on their supports; who counted goes into *counted.
  absl::StatusOr<std::vector<float>> CombineValues(const Decoded& d,
                                             const coordinator::AggregatorOptions& robust,
                                             const std::set<std::string>& excluded,
                                             std::set<std::string>* counted) const;
  // The mean cosine similarity of two clients' values (-2 with no pair).
  double ValuesCosine(const std::vector<Item>& items) const;

  const lgc::LgcPlan plan_;
  const uint64_t warmup_, dim_, k_;
  const std::string state_dir_;
  const autoencoder::AeOptions ae_options_;
  std::unique_ptr<codecs::DenseCodec> latent_codec_;  // train > 0
  size_t latent_size_ = 0;
  // Guards the autoencoder (train > 0; null else): decoders are served from RPC threads.
  mutable absl::Mutex ae_mu_;
  std::unique_ptr<autoencoder::Autoencoder> ae_ ABSL_GUARDED_BY(ae_mu_);
  std::unique_ptr<autoencoder::Autoencoder> cpu_ae_ ABSL_GUARDED_BY(ae_mu_);
  std::map<std::string, std::shared_ptr<const ModelBlob>> decoders_ ABSL_GUARDED_BY(ae_mu_);
  std::atomic<bool> frozen_{false};  // set under ae_mu_
  // The round loop's alone: the last leader.
  std::map<std::string, uint64_t> led_;
  std::atomic<uint64_t> switch_round_{0};  // set by the round loop
  // The autoencoder's training (train > 0; null else), set by Create: its thread trains
  // ae_ until the switch, and its snapshot of the weights is what Save writes. Its steps
  // take ae_mu_; the destructor stops it before ae_ goes.
  std::unique_ptr<AeTrainer> trainer_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_LGC_AGGREGATOR_H_
