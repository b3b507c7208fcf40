// Rounds of terngrad(shared=1) at the coordinator: TernGrad's scaler sharing (Wen et al.
// 2017), for FedAvg jobs whose codec it is. A round:
//   1. opens as any FedAvg round, decoding with a codecs::TernGradRoundCodec;
//   2. every participant trains and reports the scale it would use (ProgressReport.fedavg:
//      max |v| of its update plus residual after TernGrad's clipping);
//   3. once every participant has reported, or half of the round's time is gone and at
//      least one has, the round's scale is the largest reported, bounded by the clip
//      multiplier x their lower median (one client cannot blow every other client's
//      quantization up), and goes to the participants (ModeEvent.terngrad_scale;
//      RoundStart.fedavg.terngrad_scale from then on, for clients that reconnect);
//   4. clients send their ternary codes with that scale; every bucket of every chunk must
//      carry it (the decoder refuses others), so the codes are integer multiples of one
//      scale and add up: the streaming aggregator sums them and decodes once;
//   5. the round closes and commits as any FedAvg round (clipping, aggregator, guard).
// A client that reported and never got the scale keeps its update in its residual for its
// next round. Report figures: "terngrad_scale", "terngrad_reports", "terngrad_scale_s"
// (seconds from the round's start to the scale); per client "terngrad_local_scale".
#ifndef FEDLGC_MODES_FEDAVG_TERNGRAD_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_TERNGRAD_ROUNDS_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "codecs/terngrad.h"
#include "coordinator/round_driver.h"

namespace fedlgc::protos {
class ProgressReport;
class RoundStart;
}  // namespace fedlgc::protos

namespace fedlgc::modes {

// BeginRound, Tick and EndRound run on the round loop's thread; Accept and Decorate on
// gRPC threads.
class TernGradRounds {
 public:
  // `spec`: the job's terngrad(..., shared=1); `clip`: the job's clip multiplier (0: the
  // largest reported scale as it is).
  static absl::StatusOr<std::unique_ptr<TernGradRounds>> Create(const std::string& spec,
                                                                uint64_t dim, double clip);

  // Before round `round` opens (at `opened`, RoundHost::Now): its decoder, for
  // RoundEngine::UseCodec and the streaming aggregator's code.
  absl::StatusOr<std::shared_ptr<codecs::TernGradRoundCodec>> BeginRound(
      uint64_t round, const std::vector<std::string>& participants,
      coordinator::Clock::time_point opened, coordinator::Clock::time_point deadline);
  // While the round waits: sets the round's scale and sends it when it is due (at
  // host.Now()).
  void Tick(coordinator::RoundHost& host);
  // The round's figures; it is over.
  void EndRound(RoundReport* report);

  // A participant's scale report (FAILED_PRECONDITION: not for the open round, or from a
  // client that does not take part; INVALID_ARGUMENT: a scale that is not finite and > 0).
  absl::Status Accept(const std::string& client, const protos::ProgressReport& report);
  // Fills RoundStart.fedavg.terngrad_scale once the round's scale is set.
  void Decorate(protos::RoundStart* start);

 private:
  TernGradRounds(std::string spec, uint64_t dim, double clip)
      : spec_(std::move(spec)), dim_(dim), clip_(clip) {}

  const std::string spec_;
  const uint64_t dim_;
  const double clip_;
  mutable absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;  // open; 0: none
  std::set<std::string> participants_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> reported_ ABSL_GUARDED_BY(mu_);
  coordinator::Clock::time_point opened_ ABSL_GUARDED_BY(mu_), deadline_ ABSL_GUARDED_BY(mu_);
  float scale_ ABSL_GUARDED_BY(mu_) = 0;  // the round's; 0: not yet
  double scale_seconds_ ABSL_GUARDED_BY(mu_) = -1;
  std::shared_ptr<codecs::TernGradRoundCodec> decoder_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_TERNGRAD_ROUNDS_H_
