// LSGD at the coordinator (see lsgd_driver.h).
#include "modes/lsgd/lsgd_driver.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/log.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "core/float_bytes.h"
#include "modes/mode_rules.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
absl::Status LsgdOptions::Validate() const {
  if (!(pull > 0 && pull <= 1) || !(global_pull > 0 && global_pull <= 1)) {
    return absl::InvalidArgumentError("--lsgd-pull and --lsgd-global-pull must be in (0, 1]");
  }
  if (period == 0 || global_period == 0 || global_period % period != 0) {
    return absl::InvalidArgumentError("--lsgd-period must be > 0 and divide --lsgd-global-period");
  }
  if (!groups.empty() && group_size > 0) {
    return absl::InvalidArgumentError("give --lsgd-groups or --lsgd-group-size, not both");
  }
  return absl::OkStatus();
}

LsgdDriver::LsgdDriver(LsgdOptions options, std::vector<float> initial, std::string state_dir,
                       coordinator::AggregatorOptions robust)
    : options_(std::move(options)),
      robust_(std::move(robust)),
      initial_(std::move(initial)),
      state_dir_(std::move(state_dir)) {}

namespace {
// LSGD pulls clients towards a leader's model with its own protocol: the plain codecs of
// the job, none of FedAvg's round protocols.
absl::Status CheckLsgdCodecs(const coordinator::RoundPlan& plan,
                             const codecs::ModelLayout& layout) {
  return CheckOwnProtocolCodecs(plan, layout, Mode::kLsgd);
}

// What `leader` is asked to upload against in `round`: its group's reference as it stands
// in `state` (the driver's, read with its lock held).
protos::LsgdLead LeadOf(const LsgdState& state, uint64_t round, const std::string& leader) {
  protos::LsgdLead lead;
  lead.set_round(round);
  auto it = state.group_of.find(leader);
  const size_t g = it == state.group_of.end() ? 0 : it->second;
  lead.set_reference_blob(StrCat("group:", g));
  lead.set_reference_version(g < state.ref_versions.size() ? state.ref_versions[g] : 0);
  return lead;
}

// A pull towards `group`'s reference at its current version in `state`.
void AddPull(const LsgdState& state, size_t group, double strength, protos::LsgdRound* s) {
  protos::Pull* p = s->add_pulls();
  p->set_blob(StrCat("group:", group));
  p->set_version(state.ref_versions[group]);
  p->set_strength(static_cast<float>(strength));
}
}  // namespace

const coordinator::ModeTraits& LsgdDriver::Traits() {
  // One leader's update per group: nothing to take a median of.
  static const coordinator::ModeTraits traits{
      .mode = Mode::kLsgd,
      .check_codecs = &CheckLsgdCodecs,
      .report_key = "lsgd_leader",
      .report_heading = "leader",
  };
  return traits;
}

absl::StatusOr<std::unique_ptr<LsgdDriver>> LsgdDriver::Create(
    LsgdOptions options, std::vector<float> initial, std::string state_dir,
    uint64_t committed_round, const coordinator::AggregatorOptions& robust,
    monitoring::Metrics* metrics) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::unique_ptr<LsgdDriver> d(new LsgdDriver(std::move(options), std::move(initial),
                                               std::move(state_dir), robust));
  if (metrics != nullptr) {
    d->metrics_ = metrics;
    d->leader_gauge_ = &metrics->GaugeFamily(
        "fedlgc_lsgd_leader", "LSGD: 1 for the global leader (whose model is the run's), else 0");
  }
  if (committed_round > 0) {
    if (absl::Status st = d->Load(committed_round); !st.ok()) return st;
  } else {
    absl::MutexLock lock(&d->mu_);
    if (!d->options_.groups.empty()) {
      d->FormGroupsLocked(d->options_.groups);
    } else if (d->options_.group_size == 0) {
      d->FormGroupsLocked({{}});  // one group of everyone
    }
  }
  return d;
}

bool LsgdDriver::IsGlobalRound(uint64_t round) const {
  if (!options_.multi_group()) return true;
  return round % (options_.global_period / options_.period) == 0;
}

void LsgdDriver::FormGroupsLocked(const std::vector<std::vector<std::string>>& groups) {
  state_.refs.assign(groups.size(), initial_);
  state_.ref_versions.assign(groups.size(), 0);
  blobs_.assign(groups.size(), nullptr);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const std::string& c : groups[g]) state_.group_of[c] = g;
    PublishLocked(g);
  }
}

void LsgdDriver::PublishLocked(size_t g) {
  blobs_[g] = coordinator::MakeBlob(state_.ref_versions[g], core::FloatsToBytes(state_.refs[g]));
}

size_t LsgdDriver::GroupOfLocked(const std::string& client) {
  if (auto it = state_.group_of.find(client); it != state_.group_of.end()) return it->second;
  // A newcomer: the group whose mean round trip is nearest its own, else the smallest.
  std::vector<double> sum(state_.refs.size(), 0.0);
  std::vector<size_t> count(state_.refs.size(), 0), known(state_.refs.size(), 0);
  for (const auto& [c, g] : state_.group_of) {
    ++count[g];
    if (auto r = state_.rtt_ms.find(c); r != state_.rtt_ms.end()) {
      sum[g] += r->second;
      ++known[g];
    }
  }
  size_t best = 0;
  const auto mine = state_.rtt_ms.find(client);
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < state_.refs.size(); ++g) {
    const double score = mine != state_.rtt_ms.end() && known[g] > 0
                             ? std::fabs(sum[g] / known[g] - mine->second)
                             : static_cast<double>(count[g]);
    if (score < best_score) {
      best_score = score;
      best = g;
    }
  }
  state_.group_of[client] = best;
  return best;
}

void LsgdDriver::BeginRound(uint64_t round, const std::vector<std::string>& participants) {
  absl::MutexLock lock(&mu_);
  round_ = round;
  participants_ = std::set<std::string>(participants.begin(), participants.end());
  losses_.clear();
  leaders_.clear();
}

absl::Status LsgdDriver::AcceptReport(const std::string& client,
                                      const protos::ProgressReport& report) {
  if (!report.has_lsgd()) {
    return absl::InvalidArgumentError(
        StrCat("report of ", client, ": an LSGD job's report carries its loss (LsgdProgress)"));
  }
  const double loss = report.lsgd().loss();
  if (!std::isfinite(loss) || !(report.rtt_ms() >= 0) || !std::isfinite(report.rtt_ms())) {
    return codecs::NonFiniteError(StrCat("report of ", client, ": loss ", loss, " and rtt ",
                                         report.rtt_ms(), " ms must be finite (rtt >= 0)"));
  }
  absl::MutexLock lock(&mu_);
  if (report.round() != round_ || !participants_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("round ", report.round(), " takes no report from ", client));
  }
  losses_[client] = loss;
  if (report.rtt_ms() > 0) {
    auto [it, fresh] = state_.rtt_ms.try_emplace(client, report.rtt_ms());
    if (!fresh) it->second = std::min(it->second, report.rtt_ms());
  }
  return absl::OkStatus();
}

bool LsgdDriver::AllReported() const {
  absl::MutexLock lock(&mu_);
  return losses_.size() == participants_.size();
}

size_t LsgdDriver::reports() const {
  absl::MutexLock lock(&mu_);
  return losses_.size();
}

std::map<std::string, double> LsgdDriver::Losses() const {
  absl::MutexLock lock(&mu_);
  return losses_;
}

size_t LsgdDriver::group_count() const {
  absl::MutexLock lock(&mu_);
  return state_.refs.size();
}

std::map<std::string, size_t> LsgdDriver::Groups() const {
  absl::MutexLock lock(&mu_);
  return state_.group_of;
}

LsgdDriver::Election LsgdDriver::Elect(uint64_t round, const std::set<std::string>& live,
                                       const std::set<std::string>& exclude) {
  absl::MutexLock lock(&mu_);
  if (options_.group_size > 0) {
    std::map<std::string, double> rtt;
    for (const auto& [c, loss] : losses_) {
      auto it = state_.rtt_ms.find(c);
      rtt[c] = it == state_.rtt_ms.end() ? 0.0 : it->second;
    }
    for (const auto& [c, g] : state_.group_of) {
      if (auto it = state_.rtt_ms.find(c); it != state_.rtt_ms.end()) rtt[c] = it->second;
    }
    auto groups = GroupsByLatency(rtt, options_.group_size);
    if (groups.size() > state_.refs.size()) {
      // More clients than the groups were formed for: form them again. Every group
      // starts from the run's model (the last global leader's group reference).
      std::vector<float> start = initial_;
      if (auto it = state_.group_of.find(state_.global_leader); it != state_.group_of.end())
        start = state_.refs[it->second];
      state_.group_of.clear();
      FormGroupsLocked(groups);
      for (auto& ref : state_.refs) ref = start;
      for (size_t g = 0; g < state_.refs.size(); ++g) {
        // A new reference: new clients must not pull stale ones. Versions 2r - 1 (formed in
        // round r) and 2r (committed in round r) never name two models.
        state_.ref_versions[g] = 2 * round - 1;
        PublishLocked(g);
      }
      state_.pulled_leaders.clear();
      state_.pull_global = false;
    }
  }
  if (state_.refs.empty()) FormGroupsLocked({{}});
  Election e;
  e.global = IsGlobalRound(round);
  std::map<size_t, double> best_loss;
  double global_best = std::numeric_limits<double>::infinity();
  for (const auto& [client, loss] : losses_) {  // ordered by id: ties go to the smaller
    if (!live.count(client) || exclude.count(client)) continue;
    const size_t g = GroupOfLocked(client);
    auto it = best_loss.find(g);
    if (it == best_loss.end() || loss < it->second) {
      best_loss[g] = loss;
      e.leaders[g] = client;
    }
    if (loss < global_best) {
      global_best = loss;
      e.best = client;
    }
  }
  leaders_.clear();
  for (const auto& [g, leader] : e.leaders) leaders_.insert(leader);
  return e;
}

protos::LsgdLead LsgdDriver::LeadFor(uint64_t round, const std::string& leader) const {
  absl::MutexLock lock(&mu_);
  return LeadOf(state_, round, leader);
}

namespace {

// The factor of `leader`'s update under `scaling`, or 0 when it does not count.
double FactorOf(const LsgdDriver::Scaling& scaling, const LsgdDriver::Updates& updates,
                const std::string& leader) {
  auto it = updates.find(leader);
  if (it == updates.end() || !it->second.complete || scaling.excluded.count(leader)) return 0;
  auto f = scaling.factors.find(leader);
  return f == scaling.factors.end() ? 1.0 : f->second;
}

}  // namespace

std::vector<float> LsgdDriver::Preview(const Election& election, const Updates& updates,
                                       const Scaling& scaling) const {
  absl::MutexLock lock(&mu_);
  const std::string& global = election.best.empty() ? state_.global_leader : election.best;
  auto g = state_.group_of.find(global);
  if (g == state_.group_of.end() || g->second >= state_.refs.size()) {
    return state_.refs.empty() ? initial_ : state_.refs.front();
  }
  std::vector<float> model = state_.refs[g->second];
  auto leader = election.leaders.find(g->second);
  if (leader == election.leaders.end()) return model;
  const double f = FactorOf(scaling, updates, leader->second);
  if (f > 0) {
    const std::vector<float>& delta = updates.at(leader->second).values;
    for (size_t i = 0; i < model.size(); ++i) model[i] += static_cast<float>(f * delta[i]);
  }
  return model;
}

std::vector<float> LsgdDriver::Commit(uint64_t round, const Election& election,
                                      const Updates& updates, std::set<std::string>* counted,
                                      const Scaling& scaling) {
  absl::MutexLock lock(&mu_);
  state_.pulled_leaders.clear();
  for (const auto& [g, leader] : election.leaders) {
    const double f = FactorOf(scaling, updates, leader);
    if (!(f > 0) || g >= state_.refs.size()) continue;
    std::vector<float>& ref = state_.refs[g];
    const std::vector<float>& delta = updates.at(leader).values;
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += static_cast<float>(f * delta[i]);
    state_.ref_versions[g] = 2 * round;
    PublishLocked(g);
    state_.pulled_leaders[g] = leader;
    counted->insert(leader);
  }
  // The global pull goes to the best leader's group, whose reference just took its model.
  state_.pull_global = election.global && !election.best.empty() && counted->count(election.best);
  if (!election.best.empty()) state_.global_leader = election.best;
  auto g = state_.group_of.find(state_.global_leader);
  if (g != state_.group_of.end() && g->second < state_.refs.size()) return state_.refs[g->second];
  return state_.refs.empty() ? initial_ : state_.refs.front();
}

void LsgdDriver::DecorateRoundStart(const std::string& client, protos::RoundStart* start) {
  protos::LsgdRound* s = start->mutable_lsgd();
  absl::MutexLock lock(&mu_);
  if (state_.refs.empty()) return;
  const size_t g = GroupOfLocked(client);
  if (options_.multi_group()) {
    auto it = state_.pulled_leaders.find(g);
    if (it != state_.pulled_leaders.end() && it->second != client)
      AddPull(state_, g, options_.pull, s);
  }
  if (state_.pull_global && client != state_.global_leader)
    AddPull(state_, state_.group_of.at(state_.global_leader), options_.global_pull, s);
  if (leaders_.count(client) && start->round() == round_)
    *s->mutable_lead() = LeadOf(state_, round_, client);
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> LsgdDriver::Blob(const std::string& client,
                                                                  const std::string& name,
                                                                  uint64_t version) {
  if (name.rfind("group:", 0) != 0) return RoundDriver::Blob(client, name, version);
  const std::string num = name.substr(6);
  const auto missing = absl::NotFoundError(StrCat(name, " ", version, " is not served"));
  // Canonical decimal only ("group:01" is not group 1): one name per group.
  if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos ||
      (num.size() > 1 && num[0] == '0'))
    return missing;
  const size_t g = std::stoul(num);
  absl::MutexLock lock(&mu_);
  if (g >= blobs_.size() || blobs_[g]->version != version) return missing;
  return blobs_[g];
}

bool LsgdDriver::CollectReports(coordinator::RoundHost& host, Clock::time_point opened,
                                Clock::time_point deadline) {
  // Reports: everyone, or what arrived by half the round's time.
  host.WaitUntil(opened + (deadline - opened) / 2, [&] { return AllReported(); });
  if (host.stopped()) return false;
  // Nobody trained in time: wait for the first report until the deadline.
  if (reports() == 0) host.WaitUntil(deadline, [&] { return reports() > 0; });
  return !host.stopped();
}

LsgdDriver::Election LsgdDriver::RunLeaders(coordinator::RoundHost& host, uint64_t round,
                                            Clock::time_point opened, Clock::time_point deadline,
                                            const coordinator::PerClientCollector& collector) {
  const std::vector<std::string> live_list = host.Connected();
  std::set<std::string> live(live_list.begin(), live_list.end());
  std::set<std::string> excluded;
  Election election = Elect(round, live, excluded);
  std::set<std::string> asked;
  const auto leaders_of = [](const Election& e) {
    std::set<std::string> leaders;
    for (const auto& [g, leader] : e.leaders) leaders.insert(leader);
    return leaders;
  };
  const auto ask = [&](const Election& e) {
    const std::set<std::string> leaders = leaders_of(e);
    host.engine().SetUploaders(leaders);
    for (const std::string& leader : leaders) {
      if (!asked.insert(leader).second) continue;
      protos::ServerEvent ev;
      *ev.mutable_mode()->mutable_lsgd_lead() = LeadFor(round, leader);
      host.Push(leader, ev);
    }
  };
  ask(election);
  // A leader whose event stream stays gone before its upload is complete is replaced by
  // the next best of its group.
  host.WaitUntil(
      deadline, [&] { return host.engine().AllComplete(); },
      [&] {
        const std::set<std::string> complete = collector.CompleteClients();
        std::set<std::string> gone;
        for (const std::string& c : host.Vanished(leaders_of(election), opened)) {
          if (!complete.count(c)) gone.insert(c);
        }
        if (gone.empty()) return;
        excluded.insert(gone.begin(), gone.end());
        for (const std::string& c : gone) live.erase(c);
        election = Elect(round, live, excluded);
        log::Warning("coordinator", "round %llu: %zu LSGD leader(s) gone; re-elected",
                     static_cast<unsigned long long>(round), gone.size());
        ask(election);
      });
  return election;
}

absl::Status LsgdDriver::RunRound(coordinator::RoundHost& host,
                                  const std::vector<std::string>& participants,
                                  Clock::time_point deadline, coordinator::CommitResult* commit,
                                  RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  BeginRound(round, participants);
  auto collector = std::make_shared<coordinator::PerClientCollector>();
  const std::set<std::string> nobody;  // until elected
  if (absl::Status st = host.StartRound(participants, deadline, collector, &nobody); !st.ok())
    return st;
  const auto opened = host.Now();
  if (!CollectReports(host, opened, deadline)) return absl::OkStatus();
  const Election election = RunLeaders(host, round, opened, deadline, *collector);
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = !engine.AllComplete();
  if (absl::Status st = CommitGuarded(host, round, election, collector->Updates(), commit, report);
      !st.ok()) {
    return st;
  }
  report->labels["lsgd_leader"] = election.best;
  for (const std::string& c : participants) {
    if (leader_gauge_ != nullptr && metrics_->OwnSeries(c)) {
      leader_gauge_->Add({{"client", c}}).Set(c == election.best ? 1.0 : 0.0);
    }
  }
  for (const auto& [c, loss] : Losses()) {
    host.metrics().SetTrainLoss(c, loss);
    report->per_client["lsgd_loss"][c] = loss;
  }
  return absl::OkStatus();
}

absl::Status LsgdDriver::CommitGuarded(coordinator::RoundHost& host, uint64_t round,
                                       const Election& election, const Updates& updates,
                                       coordinator::CommitResult* commit, RoundReport* report) {
  // Each group has one leader: its update is clipped against the norms of recent
  // leaders' (the round's alone cannot give a median), and may be left out alone.
  Scaling scaling;
  std::map<std::string, double> norms;
  for (const auto& [g, leader] : election.leaders) {
    auto it = updates.find(leader);
    if (it != updates.end() && it->second.complete) {
      norms[leader] = coordinator::L2Norm(it->second.values);
    }
  }
  std::vector<double> recent(leader_norms_.begin(), leader_norms_.end());
  for (const auto& [leader, n] : norms) recent.push_back(n);
  const double bound = robust_.clip > 0 ? robust_.clip * coordinator::LowerMedian(recent) : 0;
  int clipped = 0;
  for (const auto& [leader, n] : norms) {
    if (bound > 0 && n > bound) {
      scaling.factors[leader] = bound / n;
      ++clipped;
    }
  }
  report->figures["clip_bound"] = bound;
  report->figures["clipped"] = clipped;
  report->per_client["update_norm"] = norms;
  auto choice = coordinator::ChooseUnderGuard(
      host, coordinator::ByNormDescending(norms), norms.size(),
      [&](const std::set<std::string>& excluded) -> absl::StatusOr<std::vector<float>> {
        Scaling s = scaling;
        s.excluded = excluded;
        return Preview(election, updates, s);
      },
      report);
  if (!choice.ok()) return choice.status();
  coordinator::QuarantineExcluded(host, round, *choice);
  coordinator::RoundEngine& engine = host.engine();
  std::set<std::string> counted;
  absl::StatusOr<coordinator::CommitResult> committed;
  if (choice->model.empty()) {
    committed = engine.CommitModel(engine.ModelVector(), {});
  } else {
    scaling.excluded = choice->excluded;
    committed = engine.CommitModel(Commit(round, election, updates, &counted, scaling), counted);
  }
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  for (const std::string& leader : counted) {
    leader_norms_.push_back(norms[leader]);
    if (leader_norms_.size() > 32) leader_norms_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status LsgdDriver::Save(uint64_t round) {
  absl::MutexLock lock(&mu_);
  return SaveLsgdState(state_dir_, round, state_);
}

absl::Status LsgdDriver::Load(uint64_t round) {
  auto loaded = LoadLsgdState(state_dir_, round, initial_.size());
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  state_ = *std::move(loaded);
  blobs_.assign(state_.refs.size(), nullptr);
  for (size_t g = 0; g < state_.refs.size(); ++g) PublishLocked(g);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
