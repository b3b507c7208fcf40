// SCAFFOLD's server control variate (Karimireddy et al. 2020, option II; docs/algorithms.md)
// at the coordinator. Every client i keeps a control variate c_i (scaffold_client.h) and
// the coordinator keeps their weighted sum S = sum_i w_i c_i, w_i the client's sample count
// (fixed the first time its change counts), over every client that ever joined; the
// control variate the clients correct with is c = S / W_all, W_all the weights of all of
// them (the roster's), made once per commit and served as blob "scaffold-control" at the
// model version of that commit (compressed like the model under --downlink-codec:
// RoundProtocol::Broadcasts).
//
// A SCAFFOLD round is the plain summed round whose collector is a PartCollector of two
// parts: part 0 the model update, collected as the job's aggregator collects it; part 1
// each client's change of its control variate, delta c_i = c_i+ - c_i, kept per client as
// the frames that arrived (PerClientCollector, compact) and never clipped. After the
// commit, S moves by w_i delta c_i of exactly the clients whose receipt counts chunks (the
// engine counts every chunk it holds of those: round_engine.cc CloseLocked), decoded from
// the chunks that arrived; a client puts what was not counted back into the residual of
// its changes, so that, at every commit,
//   S + sum_i w_i r_i = sum_i w_i c_i      (r_i: client i's residual of part 1),
// and S = sum_i w_i c_i whenever nothing is left in a residual (fp32, or everything sent).
//
// S, the weights, c and its version are saved beside each checkpoint
// (<state_dir>/scaffold-<round>.bin, fedavg_state.h) and read back on a restart.
//
// Thread-safety: BeginRound, Wrap, Commit, Drop and Save run on the round loop's thread;
// Decorate and Blob on gRPC threads, concurrently with them.
#ifndef FEDLGC_MODES_FEDAVG_SCAFFOLD_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_SCAFFOLD_ROUNDS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/collectors.h"
#include "coordinator/round_engine.h"
#include "core/round_report.h"
#include "modes/fedavg/fedavg_state.h"

namespace fedlgc::protos {
class RoundStart;
}

namespace fedlgc::modes {

class ScaffoldRounds {
 public:
  // Reads the state saved beside the checkpoint of `committed_round` (> 0); a job without
  // one (its first round, or a checkpoint of before --algorithm scaffold) starts with
  // c = 0 at the model version of its first round.
  static absl::StatusOr<std::unique_ptr<ScaffoldRounds>> Create(uint64_t dim, std::string state_dir,
                                                                uint64_t committed_round);

  // Before a round opens: c is served at the model version the round trains from (a
  // version no commit changed c at, the first round's or one after a restart, serves the
  // same values under that version).
  void BeginRound(const coordinator::RoundEngine& engine);
  // The round's collector: `model_part` (the aggregator's) as part 0, and a fresh
  // collector of the control variates' changes as part 1.
  std::shared_ptr<coordinator::Collector> Wrap(std::shared_ptr<coordinator::Collector> model_part);
  // After the round committed `commit` (engine's model at its new version): S moves by the
  // counted clients' changes, c = S / W_all is made and served at the new version. Report
  // figures "scaffold_control_norm", "scaffold_counted", "scaffold_total_weight"; per
  // client "scaffold_change_norm".
  absl::Status Commit(const coordinator::CommitResult& commit,
                      const coordinator::RoundEngine& engine, RoundReport* report);
  // The round ended without a commit (stopped, failed): its changes are dropped (their
  // clients' receipts, empty, put them back into their residuals).
  void Drop();

  // RoundStart.objective.scaffold: the version of c to download.
  void Decorate(protos::RoundStart* start) const;
  // c at `version` as a blob; NOT_FOUND for any other version.
  absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> Blob(uint64_t version) const;
  absl::Status Save(uint64_t round) const;

  // What Save writes (for tests and tools).
  ScaffoldControl Snapshot() const;

 private:
  ScaffoldRounds(uint64_t dim, std::string state_dir)
      : dim_(dim), state_dir_(std::move(state_dir)) {}
  // c from S over `total_weight`, served at `version`.
  void PublishLocked(uint64_t version, double total_weight) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t dim_;
  const std::string state_dir_;
  // The round loop's: the open round's collector of part 1 (null between rounds).
  std::shared_ptr<coordinator::PerClientCollector> changes_;
  mutable absl::Mutex mu_;
  // S (double: a sum of many small changes), the weights it holds, c and its blob.
  std::vector<double> sum_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> weights_ ABSL_GUARDED_BY(mu_);
  std::vector<float> control_ ABSL_GUARDED_BY(mu_);
  double total_weight_ ABSL_GUARDED_BY(mu_) = 0;
  bool served_ ABSL_GUARDED_BY(mu_) = false;  // blob_ holds c at version_
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const coordinator::ModelBlob> blob_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SCAFFOLD_ROUNDS_H_
