// SGP at the edge (docs/modes.md): the client holds (x, w) and trains on z = x / w. Each
// round it adds the shares relayed to it (its inbox), reports the mail added and its
// distance to the network mean, trains its local period, and pushes the share p (x, w)
// to its out-peer through the coordinator (Gossip). The share leaves x and w when it is
// made and comes back if its receipt says it was not delivered, so push-sum's mass is
// conserved. With overlap 1 the next local period trains while the share uploads.
#ifndef FEDLGC_MODES_SGP_SGP_CLIENT_H_
#define FEDLGC_MODES_SGP_SGP_CLIENT_H_

#include <map>
#include <string>
#include <thread>

#include "edge_client/client_mode.h"
#include "modes/local_model.h"
#include "monitoring/metrics_fwd.h"

namespace fedlgc::modes {

class SgpClient final : public edge_client::ClientMode {
 public:
  explicit SgpClient(edge_client::ClientEnv& env);
  ~SgpClient() override { Settle(); }

  absl::Status OnRoundStart(const protos::RoundStart& start) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  // Waits for the share upload running beside training.
  void Settle() override;
  // Mail added just before the job ended may never have been acknowledged: the relay
  // would keep a copy of mass that is already in this model.
  absl::Status OnJobOver() override;
  // Its model and the share in flight, in the slot "sgp".
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;
  const LocalModel& local() const { return local_; }

 private:
  // Adds the shares relayed to this client in earlier rounds, each once.
  absl::Status ApplyInbox(const protos::RoundStart& start);
  // The round's report, local period and share (when this client sends one); false when
  // the round moved on first.
  absl::StatusOr<bool> TrainAndShare(const protos::RoundStart& start);
  // One local period on x / w, recorded as `round`'s.
  absl::Status TrainPeriod(const protos::RoundStart& start, uint64_t round, uint64_t seed);
  // Uploads the share, or with overlap starts its upload and trains the next period.
  absl::Status SendShare(const protos::RoundStart& start);
  // The mail added and the distance to the network mean; a diverged model reports only
  // its mail.
  absl::Status Report(uint64_t round, edge_client::SystemTime deadline, double distance_sq);
  // The share in flight was not delivered: back into x and w.
  void Reabsorb();

  edge_client::ClientEnv& env_;  // outlives this mode
  PlainCodec codec_;
  LocalModel local_;
  // With overlap, the share's upload running while the next period trains. Until it is
  // joined the mode leaves the pending share and the transport to it.
  std::thread upload_;
  uint64_t upload_round_ = 0;
  // fedlgc_sgp_overlapped_periods_total{client}: local periods trained while the last
  // share uploaded.
  prometheus::Family<prometheus::Counter>& overlapped_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_SGP_CLIENT_H_
