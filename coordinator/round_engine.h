// The round engine: the state of the federation between gRPC and the model. It opens
// rounds, validates and decodes chunks as they arrive into a weighted sum with a weight
// per coordinate (so a partial update counts for the ranges that arrived), knows which
// chunks it holds, and commits a round by averaging and applying the server optimizer
// (SGD with server lr and momentum; lr 1 without momentum is plain FedAvg).
//
// Thread-safe. No gRPC or protobuf here: the service translates messages.
#ifndef FEDLGC_COORDINATOR_ROUND_ENGINE_H_
#define FEDLGC_COORDINATOR_ROUND_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "codecs/codec.h"

namespace fedlgc::coordinator {

using Clock = std::chrono::steady_clock;

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

  const std::string& CodecFor(uint64_t round) const {
    return round >= 1 && round - 1 < warmup_codecs.size() ? warmup_codecs[round - 1] : codec;
  }
};

struct EngineOptions {
  RoundPlan plan;
  float server_lr = 1.0f;
  float server_momentum = 0.0f;
  uint64_t max_chunks_per_update = 1 << 16;
  codecs::FrameLimits frame_limits;
  uint64_t seed = 1;
};

// The global model as served for download.
struct ModelBlob {
  uint64_t version = 0;
  std::string bytes;  // little-endian float32
  uint32_t crc32c = 0;
};

struct ChunkIn {
  std::string client_id;
  uint64_t round = 0;
  uint64_t update_id = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 0;
  uint64_t num_samples = 0;
  std::string_view frame;  // empty: a query for the receipt
  float scale = 1;         // the decoded values are multiplied by this (in (0, 16])
  // SGP shares (Gossip): the push-sum weight share and the reference model version.
  bool gossip = false;
  double weight_share = 0;
  uint64_t reference_version = 0;
};

struct ChunkResult {
  absl::Status status;
  std::string reason;  // rejection reason label when !status.ok()
  bool duplicate = false;
  uint64_t coordinates = 0;    // carried by this chunk (for raw byte accounting)
  std::vector<uint32_t> held;  // all chunks of this update now held
  std::string codec;           // the round's codec spec (metric label)
};

struct Receipt {
  uint64_t round = 0;
  uint64_t update_id = 0;
  uint32_t chunk_count = 0;
  std::vector<uint32_t> counted;
};

struct CommitResult {
  uint64_t round = 0;
  int participants = 0;  // clients with at least one chunk counted
  int stragglers = 0;    // planned participants whose update was not complete
  double seconds = 0;
  std::map<std::string, Receipt> receipts;
};

// Everything that survives a restart (see checkpoint.h).
struct EngineState {
  uint64_t next_round = 1;
  uint64_t model_version = 0;
  std::vector<float> model;
  std::vector<float> momentum;
  std::map<std::string, uint64_t> clients;  // id -> samples
  // Recent receipts per client (oldest first), for clients that sent something in the
  // round. A reconnecting client is sent them all and applies the one for its update in
  // flight, so a receipt lost with a connection never makes it resend or re-absorb a
  // counted update.
  std::map<std::string, std::vector<Receipt>> receipts;
};

// How many receipts per client survive (in memory and in checkpoints).
inline constexpr size_t kReceiptHistory = 16;

// What a participant needs to start the open round, read under one lock.
struct RoundInfo {
  uint64_t round = 0;
  uint64_t model_version = 0;
  Clock::time_point deadline;
  uint64_t seed = 0;
  uint64_t next_seed = 0;  // the client's seed of the next round (SGP overlap)
  std::string codec;       // the round's codec spec
};

// How a round takes its updates (see RoundEngine::OpenRound).
using PayloadValidator = std::function<absl::Status(
    const std::string& client, std::string_view spec, std::span<const uint8_t> body)>;
struct RoundMode {
  PayloadValidator validator;
  bool separate = false;
  bool gossip = false;  // SGP: chunks come through Gossip with a push-sum weight share
};

class RoundEngine {
 public:
  using PayloadValidator = coordinator::PayloadValidator;
  RoundEngine(EngineOptions options, EngineState state);
  RoundEngine(const RoundEngine&) = delete;
  RoundEngine& operator=(const RoundEngine&) = delete;

  void Register(const std::string& client_id, uint64_t num_samples);

  // Opens round next_round with `participants`, closing at `deadline`. REQUIRES: no
  // round is open. In payload mode (LGC rounds, `validator` set) chunks are not decoded:
  // each client sends one frame whose body `validator` checks and the engine keeps for the
  // driver, which aggregates them itself (CommitWith); a client's new update replaces its
  // earlier one. In separate mode (LSGD, SGP) each client's decoded update is kept apart
  // for the driver (Separate) instead of being summed.
  absl::Status OpenRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                         RoundMode mode = {});
  // The participants whose updates the round waits for (default: all of them). Others'
  // chunks are refused. LSGD: only the leaders upload.
  void SetUploaders(const std::set<std::string>& uploaders);
  uint64_t current_round() const;  // open round, or the next one to open
  // The open round as `client_id` should start it; nullopt when no round is open or the
  // client does not take part. The seed (codec randomness, data order) is per client.
  std::optional<RoundInfo> OpenRoundFor(const std::string& client_id) const;
  const RoundPlan& plan() const { return options_.plan; }

  // Validates, decodes and accumulates one chunk (or answers a query).
  ChunkResult AcceptChunk(const ChunkIn& chunk);
  // True when every participant has sent every chunk of its update.
  bool AllComplete() const;

  // Closes the open round: averages, applies the optimizer, bumps the model version.
  CommitResult Commit();

  // Payload mode: the frames held so far (client -> spec, body, FedAvg weight).
  struct Payload {
    std::string spec;
    std::string body;
    uint64_t num_samples = 0;
  };
  std::map<std::string, Payload> Payloads() const;
  // Payload mode: refuses further chunks of the open round (the driver aggregates now).
  void Freeze();
  // Payload mode: closes the round applying `delta` (the driver's aggregate) through the
  // optimizer; the updates of `counted` clients count, the others get empty receipts.
  CommitResult CommitWith(std::span<const float> delta, const std::set<std::string>& counted);

  // Separate mode: each client's decoded update so far.
  struct SeparateUpdate {
    std::vector<float> values;  // zero where no chunk arrived
    bool complete = false;
    uint64_t num_samples = 0;
    double weight_share = 0;  // SGP
    uint64_t reference_version = 0;
  };
  std::map<std::string, SeparateUpdate> Separate() const;
  // Separate mode: closes the round with `model` as the new model (no optimizer); the
  // updates of `counted` clients count, the others get empty receipts.
  CommitResult CommitModel(std::vector<float> model, const std::set<std::string>& counted);

  std::shared_ptr<const ModelBlob> model() const;
  std::vector<float> ModelVector() const;
  EngineState Snapshot() const;
  // Receipts made visible by PublishReceipts (after the checkpoint that holds them).
  std::vector<Receipt> ReceiptsFor(const std::string& client_id) const;
  void PublishReceipts();

 private:
  struct Update {
    uint64_t update_id = 0;
    uint32_t chunk_count = 0;
    std::vector<bool> held;
    uint32_t held_count = 0;
    Payload payload;          // payload mode
    SeparateUpdate separate;  // separate mode
  };
  struct Round {
    uint64_t number = 0;
    std::set<std::string> participants;
    std::map<std::string, Update> updates;
    std::vector<double> sum;
    std::vector<float> weight;
    Clock::time_point opened, deadline;
    PayloadValidator validator;  // set: payload mode
    bool separate = false, gossip = false;
    std::set<std::string> uploaders;
    bool frozen = false;
  };

  // A refused chunk, and the reason label of a frame that failed to parse or decode.
  static ChunkResult Reject(absl::Status st, std::string reason);
  static std::string ReasonFor(const absl::Status& st);
  void PublishModelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ChunkResult AcceptPayload(const ChunkIn& c);
  // A refusal for a non-participant, or the answer to a query (empty frame); nullopt
  // for a chunk to accept. REQUIRES: the round is open, mu_ held.
  std::optional<ChunkResult> ParticipantOrQuery(const ChunkIn& c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a mean update through the optimizer (or, with `set`, replaces the model by
  // *set), writes receipts (counted(client) says whether a held update counts) and closes
  // the round.
  CommitResult Close(std::span<const float> delta,
                     const std::function<bool(const std::string&)>& counted,
                     std::vector<float>* set = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::vector<uint32_t> HeldList(const Update& u);

  const EngineOptions options_;
  // One decoder per distinct codec of the plan (warm-up codecs, then the job codec);
  // Decode is const, so chunks decode outside the lock.
  const codecs::Codec* DecoderFor(uint64_t round) const;
  std::map<std::string, std::unique_ptr<codecs::Codec>> decoders_;
  mutable std::mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Round> round_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelBlob> blob_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Receipt>> published_receipts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_ENGINE_H_
