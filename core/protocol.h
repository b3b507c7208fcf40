// What the coordinator and its edge clients agree on before anything else: the version of
// the wire protocol (protos/fedlgc.proto) and the aggregation mode of the job, named on
// the wire (JoinReply.mode) and in configuration by ModeName.
#ifndef FEDLGC_CORE_PROTOCOL_H_
#define FEDLGC_CORE_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace fedlgc {

// Bumped whenever a message changes meaning. 1: the first release (per-mode fields flat
// in RoundStart); 2: per-mode messages (RoundStart.mode, ModeEvent, ProgressReport.mode);
// 3: federated evaluation (EvalStart, ProgressReport.eval, JoinReply.eval_fraction) and
// the final model (JobDone.model_version, JoinRequest.wants_final_model); 4: the local
// objective (RoundStart.objective: FedProx's term), which a client of 3 would ignore, and
// update parts (UpdateChunk.part), which a coordinator of 3 would add into the model; 5:
// SCAFFOLD (RoundStart.objective.scaffold, blob "scaffold-control", part 1 of an update),
// which a client of 4 would ignore, training plain FedAvg and sending no control variate;
// 6: batch normalisation statistics re-estimated after a commit (StatisticsStart,
// ProgressReport.statistics), which a client of 5 would leave unanswered.
inline constexpr uint32_t kProtocolVersion = 6;

// Where a coordinator listens and an edge client dials when neither is told (--listen,
// --server): a bare coordinator and a bare client on one host meet.
inline constexpr char kDefaultAddress[] = "127.0.0.1:50051";

// The blob (ModelRequest.blob, version 1) under which a coordinator serves the job's
// TorchScript file to clients that do not hold it (JoinReply.model_sha256).
inline constexpr char kModelFileBlob[] = "torchscript";

// How a job aggregates (docs/modes.md). A mode is a RoundDriver at the coordinator and a
// ClientMode at each client (modes/), chosen by one factory each.
enum class Mode {
  kFedAvg,  // weighted mean of the clients' updates, server optimizer
  kLgc,     // FedAvg with learned gradient compression (codec "lgc(...)")
  kLsgd,    // leader-based: clients are pulled towards the best client
  kSgp,     // push-sum gossip through the coordinator's relay
  kSmooth,  // FedAvg whose clients send a running average of their updates
};

struct ModeInfo {
  Mode mode;
  std::string_view name;     // on the wire (JoinReply.mode), in --mode and in reports
  std::string_view summary;  // a few words for --help
};
// Every mode, its name and what it is: a new mode adds a line here.
inline constexpr ModeInfo kModes[] = {
    {Mode::kFedAvg, "fedavg", "weighted mean of the updates"},
    {Mode::kLgc, "lgc", "FedAvg with an lgc(...) codec"},
    {Mode::kLsgd, "lsgd", "leader pull"},
    {Mode::kSgp, "sgp", "push-sum gossip"},
    {Mode::kSmooth, "smooth", "clients send a running average of their updates"},
};

inline constexpr std::string_view ModeName(Mode mode) {
  for (const ModeInfo& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  return "unknown";
}

// nullopt for a name no mode has.
inline constexpr std::optional<Mode> ParseMode(std::string_view name) {
  for (const ModeInfo& m : kModes) {
    if (m.name == name) return m.mode;
  }
  return std::nullopt;
}

}  // namespace fedlgc

#endif  // FEDLGC_CORE_PROTOCOL_H_
