// SGP (Assran et al. 2019; docs/modes.md) at the coordinator, which is the
// relay between clients that may all sit behind NAT. Every client holds (x, w) and trains
// on z = x / w. Each round the participants, in id order, push a share p (x, w) to their
// out-peer of the round's directed exponential graph (core/mixing.h) through Gossip; the
// coordinator decodes each share and, at commit, delivers the complete ones whose receiver
// is still connected into that receiver's mailbox (an "inbox" blob the receiver fetches
// before its next round). A share is delivered whole or not at all; its sender learns
// which from its receipt and gives up exactly the delivered share, so the sum of x and of
// w over clients and mailboxes never changes (exactly, up to float rounding).
//
// With `reference`, shares are coded relative to p w m, where m is the model the round
// serves (the weighted network mean of the last round's shares): the codec then loses a
// fraction of x - w m instead of one of x. The run's model is that network mean.
//
// A round: the senders upload their shares through Gossip (PushSumCollector: each share
// with its push-sum weight); a sender that vanishes is not waited for; at commit the complete
// shares go to receivers seen in the last 3 s. Report figure: sgp_consensus_distance.
//
// Thread-safe.
#ifndef FEDLGC_MODES_SGP_SGP_DRIVER_H_
#define FEDLGC_MODES_SGP_SGP_DRIVER_H_

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "modes/sgp/push_sum_collector.h"
#include "coordinator/round_driver.h"
#include "monitoring/metrics_fwd.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

using coordinator::ModelBlob;

struct SgpOptions {
  bool reference = true;  // code shares relative to the round's network mean
  bool overlap = false;   // clients train their next period while a share travels

  absl::Status Validate() const;
  bool operator==(const SgpOptions&) const = default;
};

class SgpDriver final : public coordinator::RoundDriver {
 public:
  using Clock = coordinator::Clock;
  using Shares = std::map<std::string, SgpShare>;

  // A receiver with this many rounds of mail it has not acknowledged gets no more: its
  // senders keep their shares (bounds what a client that never fetches can pin here).
  static constexpr size_t kMaxMailRounds = 8;

  // What this mode answers about itself (coordinator/mode_traits.h).
  static const coordinator::ModeTraits& Traits();
  // Loads the state of `committed_round` from `state_dir` when it is > 0.
  // `robust.clip`: a share whose sender model lies further than clip x the lower
  // median of the round's from the served model is withheld (its sender keeps it).
  static absl::StatusOr<std::unique_ptr<SgpDriver>> Create(
      const SgpOptions& options, size_t dim, std::string state_dir, uint64_t committed_round,
      const coordinator::AggregatorOptions& robust = {}, monitoring::Metrics* metrics = nullptr);

  // RoundDriver.
  Mode mode() const override { return Mode::kSgp; }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override;
  // The client's share and the rounds of its waiting mail.
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  // "inbox" of the round given as version.
  absl::StatusOr<std::shared_ptr<const ModelBlob>> Blob(const std::string& client,
                                                        const std::string& name,
                                                        uint64_t version) override;
  // A client's report: its mail added, and its squared distance to the round's model.
  absl::Status AcceptReport(const std::string& client,
                            const protos::ProgressReport& report) override;
  // A share's chunk says up to which round its sender has added its mail.
  void ObserveChunk(const std::string& client, const coordinator::ChunkIn& chunk) override;
  absl::Status Save(uint64_t round) override;

  // Assigns the out-peers of `round` over `participants` (any order; sorted here).
  void BeginRound(uint64_t round, std::vector<std::string> participants);
  // The participants that push a share this round (none when fewer than two).
  std::set<std::string> Senders() const;
  std::string PeerOf(const std::string& client) const;

  struct Outcome {
    std::vector<float> model;         // the run's model: the weighted mean of the complete shares
    std::set<std::string> delivered;  // senders whose share went into a mailbox
    double consensus_distance = -1;   // over the complete shares; -1 with fewer than two
  };
  // Delivers the complete shares whose receiver is in `live`, but those of `withheld`
  // (their senders keep them, as for a receiver that is gone). `reference`: the round's
  // served model (what shares were coded against). `preview`: the outcome's model only,
  // delivering nothing.
  Outcome Commit(uint64_t round, const Shares& shares, const std::set<std::string>& live,
                 std::span<const float> reference, const std::set<std::string>& withheld = {},
                 bool preview = false);
  // Each complete share's sender model z = x / w as far from `reference` (L2): what
  // clipping and the model guard judge.
  std::map<std::string, double> Deviations(const Shares& shares,
                                           std::span<const float> reference) const;

  // The "inbox" of `client` from `round`; nullptr when there is none.
  std::shared_ptr<const ModelBlob> Inbox(const std::string& client, uint64_t round) const;
  // The client has added its mail up to `round`: it is dropped here.
  void InboxApplied(const std::string& client, uint64_t round);
  // What the mailboxes hold: sum of x (as doubles) and of w. For conservation checks.
  std::pair<std::vector<double>, double> MailTotals() const;

 private:
  SgpDriver(const SgpOptions& options, size_t dim, std::string state_dir,
            const coordinator::AggregatorOptions& robust)
      : reference_(options.reference),
        overlap_(options.overlap),
        dim_(dim),
        state_dir_(std::move(state_dir)),
        robust_(robust) {}
  absl::Status Load(uint64_t round);
  struct Mail {
    double w = 0;
    std::vector<float> x;
    std::shared_ptr<const ModelBlob> blob;  // EncodeInbox(w, x)
  };
  static void Seal(uint64_t round, Mail* mail);

  const bool reference_;
  const bool overlap_;
  const size_t dim_;
  const std::string state_dir_;
  const coordinator::AggregatorOptions robust_;
  // fedlgc_sgp_consensus_distance (nullptr without metrics).
  prometheus::Family<prometheus::Gauge>* distance_gauge_ = nullptr;
  mutable absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> participants_ ABSL_GUARDED_BY(mu_);  // sorted
  std::map<std::string, std::string> peer_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> distance_sq_ ABSL_GUARDED_BY(mu_);  // this round's reports
  std::map<std::string, std::map<uint64_t, Mail>> mail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_SGP_DRIVER_H_
