// What a round asks of its participants, apart from who they are: the job's plan (codec,
// warm-up codecs, local training, chunk size), the codec each participant sends with
// (the plan's, a driver's override such as GradiVeQ's basis in force, or a codec ladder's
// choice per client), the decoders of those codecs, and the seeds (per client, and the one
// a round's clients share).
//
// Thread-safe. The round engine reads it while holding its own lock (lock order: engine,
// then terms); nothing here calls the engine.
#ifndef FEDLGC_COORDINATOR_ROUND_TERMS_H_
#define FEDLGC_COORDINATOR_ROUND_TERMS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "core/clock.h"

namespace fedlgc::coordinator {

using Clock = core::Clock;

// How a client trains in a round.
struct LocalTraining {
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;  // when > 0, overrides epochs
  float lr = 0.05f;
  uint32_t batch_size = 32;
  // FedProx's mu (RoundStart.objective). 0 at a root, whose --algorithm protocol adds it;
  // an aggregator's local round takes its parent's, so that its clients train as the
  // parent's would.
  float prox_mu = 0;
};

// What a client is asked to do in a round.
struct RoundPlan {
  std::string codec = "fp32";  // the job's codec spec (the client wraps it in ef())
  // Codecs for rounds 1, 2, ... before `codec` takes over (e.g. a denser top-k while the
  // model moves fast, as in DGC's sparsity warm-up). Residuals carry across the switch.
  std::vector<std::string> warmup_codecs;
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;
  float lr = 0.05f;
  uint32_t batch_size = 32;
  uint32_t max_chunk_bytes = 256 * 1024;
  // The order in which a client's chunks leave: index, layer or magnitude (P3).
  std::string upload_order = "index";

  LocalTraining training() const { return {local_epochs, local_steps, lr, batch_size}; }
  const std::string& CodecFor(uint64_t round) const {
    return round >= 1 && round - 1 < warmup_codecs.size() ? warmup_codecs[round - 1] : codec;
  }
};

// Picks each participant's codec when it is asked, among the codecs of Specs() (the
// codec ladder, codec_ladder.h). Thread-safe; the engine calls it with its lock held, so
// it must not call back into the engine.
class CodecChooser {
 public:
  virtual ~CodecChooser() = default;
  // The spec `client` sends its update with when it has `window` from being asked to its
  // deadline: one of Specs().
  virtual std::string Choose(const std::string& client, Clock::duration window) const = 0;
  // Every spec Choose may answer.
  virtual std::vector<std::string> Specs() const = 0;
};

// A round's codec and training, fixed when it opens.
struct RoundCodec {
  std::string spec;                                  // the spec participants are sent
  const codecs::Codec* decoder = nullptr;            // of that spec; null: none (refused)
  std::shared_ptr<const codecs::Codec> decoder_ref;  // owns it when UseCodec chose it
  LocalTraining training;
};

class RoundTerms {
 public:
  // `chooser` may be null (every participant sends with the round's codec); `layout`
  // serves the codecs that work per tensor.
  RoundTerms(RoundPlan plan, double max_client_weight, uint64_t seed,
             std::shared_ptr<const CodecChooser> chooser, const codecs::ModelLayout* layout);
  RoundTerms(const RoundTerms&) = delete;
  RoundTerms& operator=(const RoundTerms&) = delete;

  const RoundPlan& plan() const { return plan_; }
  // The largest share of a round's total weight one client may hold (1: no cap;
  // EngineOptions::max_client_weight). A rolling round's driver caps each commit's.
  double max_client_weight() const { return max_client_weight_; }
  // Rounds opened from now on send `spec` to their participants and decode with `decoder`
  // instead of the plan's codec for the round (GradiVeQ: the spec names the basis in
  // force); an empty spec goes back to the plan's. Metric labels keep the plan's spec.
  void UseCodec(std::string spec, std::shared_ptr<const codecs::Codec> decoder);
  // Rounds opened from now on ask their participants to train with `training` instead of
  // the plan's (an aggregator passes its parent's on); nullopt: the plan's again.
  void UseTraining(std::optional<LocalTraining> training);
  // The codec and training of round `round` opening now.
  RoundCodec ForRound(uint64_t round) const;
  // The spec `client`, asked now into a round that sends `round_spec`, with `window`
  // left to its deadline, sends with: the codec ladder's choice (when no UseCodec is in
  // force), or the round's.
  std::string CodecOf(const std::string& round_spec, const std::string& client,
                      Clock::duration window) const;
  // The decoder of `spec`, one of the plan's or the chooser's; null for another.
  const codecs::Codec* DecoderOf(const std::string& spec) const;
  // What a chunk of `client` under `asked_spec` counts as on the metrics: the plan's spec
  // for `round` (not a round's seeded one), or the client's own under a codec ladder.
  std::string MetricLabel(uint64_t round, const std::string& asked_spec) const;
  // The seed of `client` in `round` (codec randomness, data order).
  uint64_t ClientSeed(const std::string& client, uint64_t round) const;
  // The seed every client of `round` shares (randk(seed=round)), in [1, 2^52): from the
  // job's seed and the round, the same on every restart.
  uint64_t SharedSeed(uint64_t round) const;

 private:
  const RoundPlan plan_;
  const double max_client_weight_;
  const uint64_t seed_;
  const std::shared_ptr<const CodecChooser> chooser_;
  // One decoder per distinct codec of the plan (warm-up codecs, then the job codec) and
  // of the codec chooser; Decode is const, so chunks decode outside any lock.
  std::map<std::string, std::unique_ptr<codecs::Codec>> decoders_;
  mutable absl::Mutex mu_;
  // UseCodec's: the one in force. The open round and the facts of chunks decoding outside
  // the lock share it, so one a driver stops using goes once nothing decodes with it
  // (randk(seed=round) makes one per round).
  std::string codec_override_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const codecs::Codec> decoder_override_ ABSL_GUARDED_BY(mu_);
  std::optional<LocalTraining> training_override_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_TERMS_H_
