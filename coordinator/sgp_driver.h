// SGP (Assran et al. 2019; ALGORITHMS.md section 3) at the coordinator, which is the
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
// Thread-safe.
#ifndef FEDLGC_COORDINATOR_SGP_DRIVER_H_
#define FEDLGC_COORDINATOR_SGP_DRIVER_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "coordinator/round_engine.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {

class SgpDriver {
 public:
  // A receiver with this many rounds of mail it has not acknowledged gets no more: its
  // senders keep their shares (bounds what a client that never fetches can pin here).
  static constexpr size_t kMaxMailRounds = 8;

  // Loads the state of `committed_round` from `state_dir` when it is > 0.
  // `overlap`: 0, or 1 to let clients train their next period while a share travels.
  static absl::StatusOr<std::unique_ptr<SgpDriver>> Create(bool reference, uint32_t overlap,
                                                           size_t dim, std::string state_dir,
                                                           uint64_t committed_round);

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
  // Delivers the complete shares whose receiver is in `live`. `reference`: the round's
  // served model (what shares were coded against).
  Outcome Commit(uint64_t round, const std::map<std::string, RoundEngine::SeparateUpdate>& shares,
                 const std::set<std::string>& live, std::span<const float> reference);

  // Mode fields of a client's RoundStart: its share and the rounds of its waiting mail.
  void Decorate(const std::string& client, protos::RoundStart* s) const;
  // The "inbox" of `client` from `round`; nullptr when there is none.
  std::shared_ptr<const ModelBlob> Inbox(const std::string& client, uint64_t round) const;
  // The client has added its mail up to `round`: it is dropped here.
  void InboxApplied(const std::string& client, uint64_t round);
  // A client's report: its mail added, and its squared distance to the round's model.
  absl::Status AcceptReport(const std::string& client, const protos::ProgressReport& report);
  // What the mailboxes hold: sum of x (as doubles) and of w. For conservation checks.
  std::pair<std::vector<double>, double> MailTotals() const;

  absl::Status Save(uint64_t round) const;

 private:
  SgpDriver(bool reference, uint32_t overlap, size_t dim, std::string state_dir)
      : reference_(reference), overlap_(overlap), dim_(dim), state_dir_(std::move(state_dir)) {}
  absl::Status Load(uint64_t round);
  struct Mail {
    double w = 0;
    std::vector<float> x;
    std::shared_ptr<const ModelBlob> blob;  // f64 w, then f32 x
  };
  static void Seal(uint64_t round, Mail* mail);

  const bool reference_;
  const uint32_t overlap_;
  const size_t dim_;
  const std::string state_dir_;
  mutable std::mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> participants_ ABSL_GUARDED_BY(mu_);  // sorted
  std::map<std::string, std::string> peer_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> distance_sq_ ABSL_GUARDED_BY(mu_);  // this round's reports
  std::map<std::string, std::map<uint64_t, Mail>> mail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_SGP_DRIVER_H_
