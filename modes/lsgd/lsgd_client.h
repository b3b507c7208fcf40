// LSGD at the edge (docs/modes.md): the client keeps its own model; each round it applies
// the pulls the round start asks for (x <- (1 - c) x + c x_leader, towards its group's and
// the global leader's models), trains its local period and reports its running loss. When
// elected (LsgdLead), it uploads its model minus its group's reference, without error
// feedback: the reference holds what the coordinator decoded, so the next upload carries
// what this one lost.
#ifndef FEDLGC_MODES_LSGD_LSGD_CLIENT_H_
#define FEDLGC_MODES_LSGD_LSGD_CLIENT_H_

#include <map>
#include <string>

#include "edge_client/client_mode.h"
#include "modes/local_model.h"

namespace fedlgc::protos {
class LsgdLead;
}

namespace fedlgc::modes {

class LsgdClient final : public edge_client::ClientMode {
 public:
  explicit LsgdClient(edge_client::ClientEnv& env) : env_(env) {}

  absl::Status OnRoundStart(const protos::RoundStart& start) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  absl::Status OnModeEvent(const protos::ModeEvent& event) override;
  // Its model, in the slot "lsgd".
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;
  const LocalModel& local() const { return local_; }

 private:
  // This client leads its group: upload its model minus the group's reference.
  absl::Status OnLead(const protos::LsgdLead& lead);
  absl::Status ApplyPulls(const protos::RoundStart& start);
  // The running loss, until the coordinator has it or the round is over. A diverged
  // model reports nothing to elect it by.
  absl::Status ReportLoss(uint64_t round, double loss);

  edge_client::ClientEnv& env_;  // outlives this mode
  PlainCodec codec_;
  LocalModel local_;
  // What a lead request needs from the round's start.
  struct Round {
    uint64_t round = 0, model_version = 0, seed = 0;
    std::string codec;
    uint32_t max_chunk_bytes = 0;
    edge_client::SystemTime deadline;
  };
  Round round_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LSGD_LSGD_CLIENT_H_
