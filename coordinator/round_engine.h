// The round engine: the state of the federation between gRPC and the model. It opens a
// round for its participants with the collection strategy the mode's driver picks
// (collector.h), admits, decodes and collects chunks as they arrive, knows which chunks
// of which update it holds (each counts at most once), and closes the round by applying
// the driver's aggregate, bumping the model version and writing receipts.
//
// Thread-safe. No gRPC or protobuf here: the service translates messages.
#ifndef FEDLGC_COORDINATOR_ROUND_ENGINE_H_
#define FEDLGC_COORDINATOR_ROUND_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "coordinator/collector.h"
#include "coordinator/live_round.h"
#include "coordinator/roster.h"
#include "coordinator/round_terms.h"
#include "core/clock.h"

namespace fedlgc::coordinator {

struct EngineOptions {
  RoundPlan plan;
  // The largest share of a round's total weight one client may hold (1: no cap). A
  // client's weight is its sample count at Join; the largest are lowered to a common level
  // until none holds more than this share. With 1 / max_client_weight participants or
  // fewer no weighting meets it, and they all weigh the same (the nearest it can come).
  double max_client_weight = 0.25;
  uint64_t max_chunks_per_update = 1 << 16;
  codecs::FrameLimits frame_limits;
  uint64_t seed = 1;
  // The model's layout, for codecs that work per tensor (empty: none can be used).
  codecs::ModelLayout layout;
  // What the engine reads a round's opening and length from (not owned).
  Clock* clock = Clock::Real();
  // How many superseded model versions stay downloadable at most (ModelAt): buffered rounds
  // ask clients to train from the version current when they were asked, which a commit may
  // supersede before their download is done. Versions no participant still training was
  // asked from go at once.
  size_t keep_versions = 0;
  // When set, each participant is asked with the codec this picks for it (not the plan's)
  // and its chunks decode with that codec: a round takes mixed codecs. Only with plans
  // whose codec is the same in every round (no warm-up, no round protocol), and with no
  // UseCodec in force.
  std::shared_ptr<const CodecChooser> codec_chooser;
};

// Server SGD with momentum, applied to a round's mean update (lr 1, momentum 0: FedAvg).
struct ServerOptimizer {
  float lr = 1.0f;
  float momentum = 0.0f;
};

// A blob served by DownloadModel: the global model (little-endian float32), or one a
// mode serves.
struct ModelBlob {
  uint64_t version = 0;
  std::string bytes;
  uint32_t crc32c = 0;
  // A chain of broadcast deltas from version `from` (downlink.h), not the model.
  bool chain = false;
  uint64_t from = 0;
  // What the download stands for in float32 bytes (the model it rebuilds); 0: its size.
  uint64_t raw_bytes = 0;
};
// A blob of `bytes` with its CRC32C.
std::shared_ptr<const ModelBlob> MakeBlob(uint64_t version, std::string bytes);

struct Receipt {
  uint64_t round = 0;  // the round the client was asked in (what its chunks name)
  uint64_t update_id = 0;
  uint32_t chunk_count = 0;
  std::vector<uint32_t> counted;
  // The model version the commit that settled the update made (0: not recorded, a
  // checkpoint of before buffered rounds). In a buffered round it may be several versions
  // past the one the client trained from.
  uint64_t version = 0;

  bool operator==(const Receipt&) const = default;
};

struct CommitResult {
  uint64_t round = 0;
  int participants = 0;  // clients with at least one chunk counted
  int stragglers = 0;    // planned participants whose update was not complete
  double seconds = 0;
  std::map<std::string, Receipt> receipts;
  // The codec each settled participant was asked to send with (under a codec ladder its
  // own, else the round's).
  std::map<std::string, std::string> codecs;
};

// Everything that survives a restart (see checkpoint.h).
struct EngineState {
  uint64_t next_round = 1;
  uint64_t model_version = 0;
  std::vector<float> model;
  std::vector<float> momentum;              // of the server optimizer
  std::map<std::string, uint64_t> clients;  // id -> samples
  // Clients barred from the rest of the job (the model guard found their updates broke
  // the model): id -> why.
  std::map<std::string, std::string> quarantined;
  // Recent receipts per client (oldest first), for clients that sent something in the
  // round. A reconnecting client is sent them all and applies the one for its update in
  // flight, so a receipt lost with a connection never makes it resend or re-absorb a
  // counted update.
  std::map<std::string, std::vector<Receipt>> receipts;
  // The last round whose batch normalisation statistics were re-estimated and committed
  // as a version of their own (coordinator/statistics_phase.h); 0: none.
  uint64_t statistics_round = 0;
  // The job's instance (JoinReply.job_instance): drawn when the job starts afresh, kept in
  // the checkpoints.
  uint64_t job_instance = 0;

  bool operator==(const EngineState&) const = default;
};

// How RoundEngine::Rebase makes its version.
struct RebaseOptions {
  bool keep_momentum = false;  // the server optimizer's momentum goes on
  // FAILED_PRECONDITION unless the model is at this version (nullopt: any).
  std::optional<uint64_t> from_version;
  // EngineState::statistics_round after it (0: unchanged).
  uint64_t statistics_round = 0;
};

// How many receipts per client survive (in memory and in checkpoints).
inline constexpr size_t kReceiptHistory = 16;

// What a participant needs to start the open round, read under one lock.
struct RoundInfo {
  uint64_t round = 0;  // the round the client was asked in
  uint64_t model_version = 0;
  Clock::time_point deadline;
  uint64_t seed = 0;
  uint64_t next_seed = 0;  // the client's seed of the next round (SGP overlap)
  std::string codec;       // the round's codec spec
  LocalTraining training;  // the plan's, or what UseTraining set
};

// The weights of clients with these sample counts (0: unknown, weight 0) when none may
// hold more than `cap` of their total (see EngineOptions::max_client_weight): every count
// above a level t becomes t, the largest t that meets the cap; equal weights when no t
// can (n x cap <= 1 for n known clients).
std::map<std::string, double> CappedWeights(const std::map<std::string, uint64_t>& samples,
                                            double cap);

// Thread-safe. Lock order: the engine's, then its terms' and its roster's (neither calls
// back).
class RoundEngine {
 public:
  RoundEngine(EngineOptions options, EngineState state);
  RoundEngine(const RoundEngine&) = delete;
  RoundEngine& operator=(const RoundEngine&) = delete;

  // What rounds ask of their participants: the plan, codec overrides, seeds.
  RoundTerms& terms() const { return *terms_; }
  // Who joined (Register) and who is barred (Quarantine).
  Roster& roster() const { return *roster_; }

  // Opens round next_round with `participants`, closing at `deadline`, collecting with
  // `collector`. REQUIRES: no round is open.
  //
  // A rolling round (buffered asynchronous rounds, docs/modes.md) never closes: each
  // commit settles the updates a driver chose (Settle), bumps the round number and the
  // model version, and the round stays open for the participants still training, whose
  // chunks keep naming the round they were asked in. Clients join it (AddParticipants)
  // and leave it (Release) while it runs; each is asked from the version current then.
  absl::Status OpenRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                         std::shared_ptr<Collector> collector, bool rolling = false);
  // A rolling round: asks `clients` (not participants now) to train from the current
  // version, each uploading by `deadline`; FAILED_PRECONDITION unless a rolling round is
  // open. Returns the clients added. A rolling round's updates weigh their sample counts
  // uncapped (ChunkIn::weight): its driver caps them among each commit's updates.
  absl::StatusOr<std::vector<std::string>> AddParticipants(const std::vector<std::string>& clients,
                                                           Clock::time_point deadline);
  // A rolling round: `clients` stop being participants (gone, late, too stale); what they
  // sent is dropped unreceipted (their client restores it into its residual) and their
  // chunks are refused from now on.
  void Release(const std::set<std::string>& clients);
  // A rolling round: the next commit settles the updates of `clients` (their receipts;
  // counted when the commit counts them) and no others. Their chunks are refused from now
  // on (they are complete). Clients that are not participants are ignored.
  void Settle(const std::set<std::string>& clients);
  // A participant of the open round, as asked.
  using Asked = AskedParticipant;
  // The open round's participants as asked (for a round that is not rolling, all asked
  // in it, at its opening); empty when no round is open.
  std::map<std::string, Asked> Participants() const;
  // When `client` was asked to take part in the open round; nullopt when it is not a
  // participant.
  std::optional<Clock::time_point> AskedAt(const std::string& client) const;
  // The participants whose updates the round waits for (default: all of them). Others'
  // chunks are refused. LSGD: only the leaders upload.
  void SetUploaders(const std::set<std::string>& uploaders);
  uint64_t current_round() const;  // open round, or the next one to open
  // The open round as `client_id` should start it; nullopt when no round is open or the
  // client does not take part. The seed (codec randomness, data order) is per client.
  std::optional<RoundInfo> OpenRoundFor(const std::string& client_id) const;
  // An aggregator's next round (docs/scale.md): the model becomes `model`, its parent's,
  // under a new version, and the next round opened takes the number `round`, its
  // parent's, so that a round has one number (and one client seed) at every tier.
  // FAILED_PRECONDITION while a round is open or for a round below the next one;
  // INVALID_ARGUMENT for a model of another size. Server momentum starts afresh, unless
  // `options` keep it: a version that changes the model between rounds without a round
  // (re-estimated statistics) and commits only if the model is still `from_version`.
  absl::Status Rebase(uint64_t round, std::vector<float> model, const RebaseOptions& options = {});

  // Admits, decodes and collects one chunk (or answers a query: an empty frame).
  ChunkResult AcceptChunk(const ChunkIn& chunk);
  // True when every uploader has sent every chunk of its update.
  bool AllComplete() const;
  // Refuses further chunks of the open round (its driver aggregates now).
  void Freeze();

  // Closes the open round, applying `delta` (the round's mean update) through `optimizer`.
  // The updates of the clients in `counted` count (nullptr: every update held); the others
  // get empty receipts. FAILED_PRECONDITION when no round is open, INTERNAL for a delta of
  // another size (a driver's bug): the round then stays open.
  absl::StatusOr<CommitResult> CommitDelta(std::span<const float> delta,
                                           const ServerOptimizer& optimizer,
                                           const std::set<std::string>* counted = nullptr);
  // Closes the open round with `model` as the new model (no optimizer); errors as above.
  absl::StatusOr<CommitResult> CommitModel(std::vector<float> model,
                                           const std::set<std::string>& counted);
  // The model CommitDelta(delta, optimizer) would make, committing nothing (for the
  // model guard). INTERNAL for a delta of another size.
  absl::StatusOr<std::vector<float>> Preview(std::span<const float> delta,
                                             const ServerOptimizer& optimizer) const;

  std::shared_ptr<const ModelBlob> model() const;
  // The model of `version`: the current one or one of the last keep_versions superseded
  // ones; nullptr when it is not kept.
  std::shared_ptr<const ModelBlob> ModelAt(uint64_t version) const;
  std::vector<float> ModelVector() const;
  uint64_t dim() const { return dim_; }
  // What a checkpoint holds: the engine's state with the roster's clients.
  EngineState Snapshot() const;
  // Receipts made visible by PublishReceipts (after the checkpoint that holds them).
  std::vector<Receipt> ReceiptsFor(const std::string& client_id) const;
  void PublishReceipts();

 private:
  void PublishModelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the collector may know of the open round, with the decoder of `client`'s codec.
  RoundFacts FactsLocked(const std::string& client) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a decoded chunk to the open round (or finds it is a duplicate by now).
  ChunkResult CollectLocked(const ChunkIn& c, DecodedChunk decoded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes receipts and closes the round; `set` replaces the model, else `delta` goes
  // through `optimizer`.
  CommitResult CloseLocked(std::span<const float> delta, const ServerOptimizer& optimizer,
                           const std::set<std::string>* counted, std::vector<float>* set)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineOptions options_;
  const uint64_t dim_;
  const std::unique_ptr<RoundTerms> terms_;
  const std::unique_ptr<Roster> roster_;
  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_);  // its clients and quarantined live in roster_
  std::unique_ptr<LiveRound> round_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelBlob> blob_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<const ModelBlob>> past_blobs_ ABSL_GUARDED_BY(mu_);  // keep_versions
  std::map<std::string, std::vector<Receipt>> published_receipts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_ENGINE_H_
