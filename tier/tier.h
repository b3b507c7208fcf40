// The aggregator tier (docs/scale.md). A coordinator started with --parent is also an edge
// client of its parent. Tier runs that client, the upstream client (an EdgeClient with the
// FedAvg mode), on a thread of its own, with a LocalTrainer that, in place of training on a
// shard, hands the parent's round to the local coordinator as a RoundOrder and waits for
// the model that the local round commits. The FedAvg client then sends the difference up
// through the round's codec with its own error feedback, and uploads, resumes and reads
// receipts as any client does: chunks the parent did not count go back into the
// aggregator's residual.
//
// What survives a restart: the local coordinator's checkpoint, the upstream client's state
// (its update in flight and residual, under <state>/parent), and <state>/tier.result
// (KeptRound): what the local rounds committed that has not gone up yet, written before
// each local checkpoint. A restart whose checkpoint holds the kept round sends it up
// instead of running the round again; one whose parent has moved on adds it to the next
// round's update. So the updates its clients were told counted reach the parent once: a
// crash between handing them to the upstream client and its state write loses them
// rather than sending them twice.
#ifndef FEDLGC_TIER_TIER_H_
#define FEDLGC_TIER_TIER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"
#include "coordinator/options.h"
#include "coordinator/round_source.h"
#include "edge_client/client_mode.h"
#include "edge_client/edge_client.h"

namespace fedlgc::tier {

// The upstream client's options from the coordinator's --parent flags: its id, the parent's
// addresses, its certificate, and <state_dir>/parent for its state.
edge_client::EdgeClientOptions UpstreamOptions(const coordinator::CoordinatorOptions& o);

// What an aggregator has committed and not yet handed to its upstream client
// (tier.result): the update of its last committed round (the model it committed minus the
// parent's model it started from), with the parent's round and model version it answers,
// and what earlier rounds committed that never went up (their parent's round closed
// first). Rewritten with `handed` set when it goes up.
struct KeptRound {
  uint64_t round = 0;          // the parent's round
  uint64_t model_version = 0;  // the parent's model version it started from
  bool handed = false;         // given to the upstream client
  std::vector<float> delta;    // the round's update
  std::vector<float> carry;    // earlier rounds' updates that did not go up (or empty)

  bool operator==(const KeptRound&) const = default;
};
absl::Status SaveKeptRound(const std::string& path, const KeptRound& kept);
// nullopt when there is no file.
absl::StatusOr<std::optional<KeptRound>> LoadKeptRound(const std::string& path);

// Thread-safe.
class Tier final : public coordinator::RoundSource, private edge_client::LocalTrainer {
 public:
  // `local` runs the rounds and must outlive the tier; `min_clients` of its clients must be
  // connected before the tier joins the parent (the join carries their samples as the
  // aggregator's weight); `reserve` is the share of the time left in a parent's round kept
  // for the upload up.
  static absl::StatusOr<std::unique_ptr<Tier>> Create(edge_client::EdgeClientOptions upstream,
                                                      coordinator::Coordinator* local,
                                                      const std::string& state_dir,
                                                      uint32_t min_clients, double reserve);
  ~Tier() override;

  // Starts the upstream client on its own thread.
  void Start();
  // The upstream client (its metrics, its state), for tests.
  edge_client::EdgeClient& upstream() { return *client_; }

  // RoundSource.
  absl::StatusOr<std::optional<coordinator::RoundOrder>> Next() override;
  absl::Status Keep(uint64_t round, std::span<const float> model) override;
  void Finish(absl::StatusOr<std::vector<float>> model) override;
  void Stop() override;

 private:
  Tier(coordinator::Coordinator* local, std::string state_dir, uint32_t min_clients,
       double reserve);

  // LocalTrainer: the samples of the local clients, and a local round.
  uint64_t NumSamples() override;
  // What tier.result holds that the local coordinator committed (rounds up to
  // `committed`) and never handed up, as `dim` values (empty: nothing); *kept_round and
  // *kept_version: the parent's round and version of its last round when that round is
  // among them (0: it is not).
  std::vector<float> Unhanded(size_t dim, uint64_t committed, uint64_t* kept_round,
                              uint64_t* kept_version);
  // Marks tier.result as handed up.
  void MarkHanded();
  // Runs the parent's round with the local clients: the model they committed, or why not.
  absl::StatusOr<std::vector<float>> RunLocalRound(const protos::RoundStart& start,
                                                   const std::vector<float>& model);
  absl::StatusOr<double> Train(const protos::RoundStart& start,
                               std::vector<float>* weights) override;
  // The parent started its job afresh: tier.result belongs to the earlier run, and none of
  // it goes up.
  void OnJobStartedOver() override;
  // The upstream thread: waits for the local quorum, then runs the client until the job is
  // over.
  void RunUpstream();
  std::string KeptPath() const { return state_dir_ + "/tier.result"; }

  coordinator::Coordinator* const local_;
  const std::string state_dir_;
  const uint32_t min_clients_;
  const double reserve_;
  std::unique_ptr<edge_client::EdgeClient> client_;
  std::thread thread_;

  absl::Mutex mu_;
  std::optional<coordinator::RoundOrder> order_ ABSL_GUARDED_BY(mu_);  // for Next
  // The parent's model version and model of the order in progress (for Keep).
  uint64_t order_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> order_base_ ABSL_GUARDED_BY(mu_);
  uint64_t order_committed_ ABSL_GUARDED_BY(mu_) = 0;  // the local checkpoint's round then
  std::optional<absl::StatusOr<std::vector<float>>> outcome_ ABSL_GUARDED_BY(mu_);  // for Train
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool over_ ABSL_GUARDED_BY(mu_) = false;  // the upstream client returned
  absl::Status upstream_result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::tier

#endif  // FEDLGC_TIER_TIER_H_
