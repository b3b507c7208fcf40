// The records a run writes one JSON line at a time, with their one reader and writer:
//   RoundReport        the coordinator's rounds.jsonl, one line per committed round (what
//                      fedlgc-sim follows and reports, and what the tests read)
//   ClientRoundRecord  an edge client's <id>.rounds.jsonl (local training and encode
//                      seconds, LGC reconstruction errors)
// Common fields are typed; a mode adds its own figures (numbers) and labels (strings)
// under names its driver documents, written flat beside them, and per-client figures as
// objects of client -> number. Non-finite numbers are
// written as null and read back as NaN.
#ifndef FEDLGC_CORE_ROUND_REPORT_H_
#define FEDLGC_CORE_ROUND_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc {

// Federated evaluation of a round's model (--eval clients|both): what the clients asked
// to evaluate it on their own held-out data reported, weighed by their examples. Of the
// `asked`, `clients` reported, `declined` had nothing to evaluate on and `missing` never
// answered before the deadline.
struct FederatedEval {
  int asked = 0, clients = 0, declined = 0, missing = 0;
  uint64_t examples = 0;
  double loss = -1, accuracy = -1;  // -1: no report; accuracy NaN for float targets
  bool operator==(const FederatedEval&) const = default;
};

struct RoundReport {
  uint64_t round = 0;
  std::string mode;                 // core/protocol.h ModeName
  double accuracy = -1, loss = -1;  // -1: not evaluated this round
  uint64_t uplink_bytes = 0, raw_uplink_bytes = 0, downlink_bytes = 0;
  uint64_t raw_downlink_bytes = 0;  // what the downloads stand for in float32 bytes
  double seconds = 0;
  int participants = 0, stragglers = 0;
  bool hit_deadline = false;
  // The mode's figures and labels (e.g. LGC "lgc_stage", LSGD "lsgd_leader"), and its
  // figures per client (LSGD "lsgd_loss": client -> the running loss it reported).
  std::map<std::string, double> figures;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::map<std::string, double>> per_client;
  std::optional<FederatedEval> federated_eval;  // JSON "federated_eval": {...}

  // A figure, or `missing` when the round has none of that name.
  double Figure(const std::string& name, double missing = 0) const;
  std::string Label(const std::string& name) const;
};

// One line of JSON (no newline).
std::string ToJson(const RoundReport& report);
absl::StatusOr<RoundReport> RoundReportFromJson(std::string_view line);

// An edge client's record of one round.
struct ClientRoundRecord {
  uint64_t round = 0;
  std::map<std::string, double> figures;  // "train_seconds", "encode_seconds", ...
};
std::string ToJson(const ClientRoundRecord& record);
absl::StatusOr<ClientRoundRecord> ClientRoundRecordFromJson(std::string_view line);

// Appends `line` and a newline to `path` (creating it and its folder).
absl::Status AppendLine(const std::string& path, std::string_view line);
// Every line of a JSON-lines file through `parse`; an empty list when it does not exist.
// A line that does not parse is an error naming the file and line.
absl::StatusOr<std::vector<RoundReport>> ReadRoundLog(const std::string& path);
absl::StatusOr<std::vector<ClientRoundRecord>> ReadClientRoundLog(const std::string& path);

}  // namespace fedlgc

#endif  // FEDLGC_CORE_ROUND_REPORT_H_
