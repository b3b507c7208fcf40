// LSGD (Teng et al. 2019; docs/modes.md) at the coordinator. Every client keeps
// its own model and trains a local period per round, then reports its running loss. The
// coordinator elects in each group the client with the lowest loss; each such leader
// uploads its model minus its group's reference (the group's last leader model) through
// the job's codec, and the reference moves by what arrived. The next round's RoundStart
// tells every other member to pull towards its group's reference,
// x <- (1 - c) x + c x_leader, and, every global period, towards the reference of the
// global leader's group (the best of all). The run's model is the global leader's.
//
// Groups come from the job's configuration, or are formed from the round trips the
// clients measure (consecutive by latency), or are one group of everyone; with one group
// there are only global pulls, every global period.
//
// A round: every participant trains and reports (ProgressReport.lsgd); after all reports,
// or half the round's time, the leaders are elected and asked to upload (LsgdLead); a
// leader that vanishes before its upload is complete is replaced by the next best of its
// group. Report label: lsgd_leader (the global leader); per client: lsgd_loss (the running
// loss each reported).
//
// Thread-safe.
#ifndef FEDLGC_MODES_LSGD_LSGD_DRIVER_H_
#define FEDLGC_MODES_LSGD_LSGD_DRIVER_H_

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/collectors.h"
#include "coordinator/round_driver.h"
#include "modes/lsgd/lsgd_groups.h"
#include "modes/lsgd/lsgd_state.h"
#include "monitoring/metrics_fwd.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

using coordinator::ModelBlob;

struct LsgdOptions {
  double pull = 0.1;             // c1, towards the group leader
  double global_pull = 0.1;      // c2, towards the global leader
  uint32_t period = 64;          // local steps between group pulls
  uint32_t global_period = 128;  // local steps between global pulls (a multiple of period)
  std::vector<std::vector<std::string>> groups;  // from configuration
  uint32_t group_size = 0;  // > 0: groups of this size formed by measured latency

  absl::Status Validate() const;
  bool operator==(const LsgdOptions&) const = default;
  bool multi_group() const { return groups.size() > 1 || group_size > 0; }
  // Local steps of one round: the period with groups, else the global period.
  uint32_t steps_per_round() const { return multi_group() ? period : global_period; }
};

class LsgdDriver final : public coordinator::RoundDriver {
 public:
  using Clock = coordinator::Clock;
  using Updates = std::map<std::string, coordinator::PerClientCollector::Update>;

  // What this mode answers about itself (coordinator/mode_traits.h).
  static const coordinator::ModeTraits& Traits();
  // `initial`: the job's initial model, every group's first reference. Loads the state
  // of `committed_round` from `state_dir` when it is > 0.
  static absl::StatusOr<std::unique_ptr<LsgdDriver>> Create(
      LsgdOptions options, std::vector<float> initial, std::string state_dir,
      uint64_t committed_round, const coordinator::AggregatorOptions& robust = {},
      monitoring::Metrics* metrics = nullptr);

  // RoundDriver.
  Mode mode() const override { return Mode::kLsgd; }
  void AdjustPlan(coordinator::RoundPlan* plan) const override {
    plan->local_steps = options_.steps_per_round();
  }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override;
  // The pulls the last commit asks of the client, and the lead request when it leads the
  // open round (a leader that reconnects learns it again).
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  // "group:<g>" at its current version.
  bool Broadcasts(const std::string& name) const override { return name.rfind("group:", 0) == 0; }
  absl::StatusOr<std::shared_ptr<const ModelBlob>> Blob(const std::string& client,
                                                        const std::string& name,
                                                        uint64_t version) override;
  // A participant's running loss (finite) and measured round trip (ms, >= 0).
  absl::Status AcceptReport(const std::string& client,
                            const protos::ProgressReport& report) override;
  absl::Status Save(uint64_t round) override;

  const LsgdOptions& options() const { return options_; }
  bool IsGlobalRound(uint64_t round) const;

  // Starts collecting the reports of `round` from `participants`.
  void BeginRound(uint64_t round, const std::vector<std::string>& participants);
  bool AllReported() const;
  size_t reports() const;

  struct Election {
    std::map<size_t, std::string> leaders;  // group -> its leader this round
    std::string best;                       // the lowest loss of all: the global leader
    bool global = false;                    // a global round
  };
  // Per group, the reporter with the lowest loss among `live` clients not in `exclude`
  // (ties: the smaller id); they are the round's leaders (Decorate tells them so). With
  // --lsgd-group-size, (re)forms the latency groups whenever the clients with a measured
  // round trip would make more groups than there are (a new group starts from the run's
  // model).
  Election Elect(uint64_t round, const std::set<std::string>& live,
                 const std::set<std::string>& exclude);
  // What `leader` is asked to upload against.
  protos::LsgdLead LeadFor(uint64_t round, const std::string& leader) const;
  // How a commit takes the leaders' updates: the leaders left out (the model guard), and
  // each one's factor (clipping; 1 when absent).
  struct Scaling {
    std::set<std::string> excluded;
    std::map<std::string, double> factors;
  };
  // Moves each group's reference by its leader's decoded update, times its factor, when
  // it is complete and not excluded; those leaders go into *counted. Returns the run's
  // model: the reference of the global leader's group.
  std::vector<float> Commit(uint64_t round, const Election& election, const Updates& updates,
                            std::set<std::string>* counted, const Scaling& scaling = {});
  // The model Commit would return, changing nothing.
  std::vector<float> Preview(const Election& election, const Updates& updates,
                             const Scaling& scaling) const;

  std::map<std::string, double> Losses() const;  // of the round being collected
  size_t group_count() const;
  std::map<std::string, size_t> Groups() const;  // client -> group

 private:
  // Waits for the participants' reports: all, or what arrived by half the round's time
  // (and then for the first one, until the deadline). False when none came.
  bool CollectReports(coordinator::RoundHost& host, Clock::time_point opened,
                      Clock::time_point deadline);
  // Elects and asks the leaders, waits for their uploads, re-electing for leaders that
  // vanish (no event stream or call for 3 s since the round opened at the earliest); the
  // round's final election.
  Election RunLeaders(coordinator::RoundHost& host, uint64_t round, Clock::time_point opened,
                      Clock::time_point deadline, const coordinator::PerClientCollector& collector);
  LsgdDriver(LsgdOptions options, std::vector<float> initial, std::string state_dir,
             coordinator::AggregatorOptions robust);
  absl::Status Load(uint64_t round);
  // The group of `client`, assigning one to a newcomer. REQUIRES: groups formed.
  size_t GroupOfLocked(const std::string& client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormGroupsLocked(const std::vector<std::vector<std::string>>& groups)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked(size_t group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Clips the elected leaders' complete updates against --clip-multiplier x the lower
  // median of recent leaders' norms, and commits under the model guard (a leader whose
  // update the guard refuses is quarantined, its group's reference left as it was).
  absl::Status CommitGuarded(coordinator::RoundHost& host, uint64_t round,
                             const Election& election, const Updates& updates,
                             coordinator::CommitResult* commit, RoundReport* report);

  const LsgdOptions options_;
  const coordinator::AggregatorOptions robust_;
  const std::vector<float> initial_;
  const std::string state_dir_;
  std::deque<double> leader_norms_;  // of recent counted leaders; the round loop's only
  // fedlgc_lsgd_leader{client}: 1 for the global leader, whose model is the run's (nullptr
  // without metrics).
  monitoring::Metrics* metrics_ = nullptr;
  prometheus::Family<prometheus::Gauge>* leader_gauge_ = nullptr;
  mutable absl::Mutex mu_;
  LsgdState state_ ABSL_GUARDED_BY(mu_);  // what a restart keeps (lsgd_state.h)
  std::vector<std::shared_ptr<const ModelBlob>> blobs_ ABSL_GUARDED_BY(mu_);  // of state_.refs
  // The round being collected.
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> participants_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> losses_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> leaders_ ABSL_GUARDED_BY(mu_);  // of the open round
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LSGD_LSGD_DRIVER_H_
