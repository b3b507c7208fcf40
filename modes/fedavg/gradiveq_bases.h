// GradiVeQ's bases at the coordinator (codecs/gradiveq.h). The job's codec is
// gradiveq(dims, slice, refit); the bases that make it a code are fitted here:
//   - a round with no basis in force (the first, and one in every `refit` after a fit)
//     goes fp32 (the spec without basis=), and once it commits, the bases are fitted to
//     the model's step, which every client downloads anyway (SliceBasis::Fit);
//   - the rounds after it go out with the spec naming the basis (basis=v<round>h<hash>),
//     and clients download it once as blob "gradiveq-basis" at version <round>;
//   - the round's codes are summed without decoding (WeightedSumCollector with the codec
//     as its LinearCode) and decoded once.
// The basis in force is saved beside each checkpoint and read back on a restart, so a
// restarted coordinator names and serves the very basis its clients hold.
#ifndef FEDLGC_MODES_FEDAVG_GRADIVEQ_BASES_H_
#define FEDLGC_MODES_FEDAVG_GRADIVEQ_BASES_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codecs/gradiveq.h"
#include "coordinator/round_engine.h"
#include "core/round_report.h"

namespace fedlgc::modes {

// Thread-safety: BeginRound, EndRound and Save run on the round loop's thread; Blob on
// gRPC threads.
class GradiveqBases {
 public:
  // `codec`: the job's gradiveq spec. Reads the basis saved beside the checkpoint of
  // `committed_round` (> 0); a job without one starts with a fit round.
  static absl::StatusOr<std::unique_ptr<GradiveqBases>> Create(const std::string& codec,
                                                               const codecs::ModelLayout& layout,
                                                               std::string state_dir,
                                                               uint64_t committed_round);

  // Sets the codec of `round` (engine.UseCodec) and returns it as the code the round's
  // chunks are summed in; nullptr for a warm-up round of another codec (the plan's).
  const codecs::LinearCode* BeginRound(coordinator::RoundEngine& engine, uint64_t round);
  // Whether the round BeginRound set up goes fp32 for a fit (false for warm-up rounds).
  bool fitting() const { return fitting_; }
  // After `round` committed `step` (the model's change): fits the bases when it was a
  // fit round. Reports "gradiveq_basis" (the version in force) and "gradiveq_kept" (the
  // share of the step's slice energy the new bases keep).
  absl::Status EndRound(uint64_t round, std::span<const float> step, RoundReport* report);

  // The basis of `version` as a blob; NOT_FOUND for any other version.
  absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> Blob(uint64_t version) const;
  absl::Status Save(uint64_t round) const;

 private:
  GradiveqBases(std::shared_ptr<const codecs::GradiVeQ> plain, codecs::ModelLayout layout,
                std::string state_dir)
      : plain_(std::move(plain)), layout_(std::move(layout)), state_dir_(std::move(state_dir)) {}
  absl::Status Load(uint64_t round);
  absl::Status Use(std::shared_ptr<const codecs::SliceBasis> basis);

  const std::shared_ptr<const codecs::GradiVeQ> plain_;  // without a basis: fp32
  const codecs::ModelLayout layout_;
  const std::string state_dir_;
  // The round loop's.
  std::shared_ptr<const codecs::GradiVeQ> coded_;  // with the basis in force
  bool fitting_ = false;
  bool coded_round_ = false;  // the round is one of the job codec
  mutable absl::Mutex mu_;
  std::shared_ptr<const codecs::SliceBasis> basis_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const coordinator::ModelBlob> blob_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_GRADIVEQ_BASES_H_
