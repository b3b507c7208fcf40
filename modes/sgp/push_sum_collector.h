// SGP's collector. The senders upload their shares through Gossip, each chunk with the
// push-sum weight share p w its sender keeps back (coordinator::PushSumShare). The
// collector keeps each sender's decoded share apart (a coordinator::PerClientCollector)
// beside its weight share, and refuses a weight share out of range, a share coded
// against another model than the round's, and a weight share that changes between the
// chunks of one update. The coordinator's collectors know nothing of push-sum.
#ifndef FEDLGC_MODES_SGP_PUSH_SUM_COLLECTOR_H_
#define FEDLGC_MODES_SGP_PUSH_SUM_COLLECTOR_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/collectors.h"

namespace fedlgc::modes {

// One sender's share of a round, as the relay aggregates it.
struct SgpShare {
  std::vector<float> values;  // decoded: p (x - w ref), zero where no chunk arrived
  bool complete = false;      // every chunk of the update arrived
  double weight_share = 0;    // p w
};

// Thread safety as coordinator::Collector's: Admit and Collect under the engine's lock,
// Decode from any thread; Shares takes the collector's own lock.
class PushSumCollector final : public coordinator::Collector {
 public:
  bool takes_shares() const override { return true; }
  std::optional<coordinator::Rejection> Admit(const coordinator::ChunkIn& chunk,
                                              const coordinator::HeldUpdate* held,
                                              const coordinator::RoundFacts& round) const override;
  absl::StatusOr<coordinator::DecodedChunk> Decode(
      const coordinator::ChunkIn& chunk, const coordinator::RoundFacts& round) const override;
  void Collect(const coordinator::ChunkIn& chunk, coordinator::DecodedChunk decoded, bool fresh,
               bool complete, const coordinator::RoundFacts& round) override;
  void Forget(const std::string& client) override;

  // Every sender's share so far, copied (each with the weight share of the same update).
  std::map<std::string, SgpShare> Shares() const;

 private:
  // Lock order: mu_, then the per-client collector's own.
  mutable absl::Mutex mu_;
  coordinator::PerClientCollector updates_{/*compact=*/false};
  std::map<std::string, double> weight_shares_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_PUSH_SUM_COLLECTOR_H_
