// Batch normalisation statistics re-estimated after each commit (see statistics_phase.h).
#include "coordinator/statistics_phase.h"

#include <chrono>
#include <cmath>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/str.h"
#include "coordinator/checkpoint.h"
#include "coordinator/downlink.h"
#include "coordinator/options.h"
#include "coordinator/round_driver.h"
#include "coordinator/round_engine.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {
namespace {

// More examples than any client holds: refused (and sums of counts cannot overflow).
constexpr uint64_t kMaxExamples = uint64_t{1} << 40;

absl::Status CheckReport(const protos::StatisticsReport& r, uint64_t channels) {
  if (r.examples() < 2 || r.examples() > kMaxExamples || r.batches() == 0) {
    return absl::InvalidArgumentError(StrCat("statistics of ", r.examples(), " examples in ",
                                             r.batches(), " batches: send declined instead"));
  }
  if (static_cast<uint64_t>(r.mean_size()) != channels ||
      static_cast<uint64_t>(r.var_size()) != channels) {
    return absl::InvalidArgumentError(StrCat("statistics of ", r.mean_size(), " means and ",
                                             r.var_size(), " variances for a model of ", channels,
                                             " channels"));
  }
  for (int c = 0; c < r.mean_size(); ++c) {
    if (!std::isfinite(r.mean(c)) || !std::isfinite(r.var(c)) || r.var(c) < 0) {
      return absl::InvalidArgumentError(
          StrCat("channel ", c, ": mean ", r.mean(c), ", variance ", r.var(c)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void StatsBook::Ask(const protos::StatisticsStart& ask, const std::set<std::string>& clients) {
  absl::MutexLock lock(&mu_);
  open_ = true;
  ask_ = ask;
  asked_ = clients;
  answers_ = Answers{};
  answers_.asked = clients.size();
  answered_.clear();
}

void StatsBook::Withdraw(const std::string& client) {
  absl::MutexLock lock(&mu_);
  if (!answered_.count(client)) asked_.erase(client);
}

absl::Status StatsBook::Accept(const std::string& client, const protos::StatisticsReport& r) {
  absl::MutexLock lock(&mu_);
  if (!open_ || r.round() != ask_.round() || r.model_version() != ask_.model_version() ||
      !asked_.count(client)) {
    return absl::FailedPreconditionError(StrCat("no statistics of round ", r.round(), " (version ",
                                                r.model_version(), ") were asked of ", client));
  }
  if (answered_.count(client)) {
    return absl::FailedPreconditionError(StrCat(client, " has answered already"));
  }
  if (r.declined().empty()) {
    if (absl::Status st = CheckReport(r, channels_); !st.ok()) return st;
    Answer& a = answers_.estimates[client];
    a.examples = r.examples();
    a.mean.assign(r.mean().begin(), r.mean().end());
    a.var.assign(r.var().begin(), r.var().end());
    a.skipped.assign(r.skipped().begin(), r.skipped().end());
  } else {
    ++answers_.declined;
  }
  answered_.insert(client);
  return absl::OkStatus();
}

std::optional<protos::ServerEvent> StatsBook::AskFor(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  if (!open_ || !asked_.count(client) || answered_.count(client)) return std::nullopt;
  protos::ServerEvent e;
  *e.mutable_statistics() = ask_;
  return e;
}

std::set<std::string> StatsBook::Waiting() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> waiting;
  for (const std::string& c : asked_) {
    if (!answered_.count(c)) waiting.insert(c);
  }
  return waiting;
}

StatsBook::Answers StatsBook::Take() {
  absl::MutexLock lock(&mu_);
  open_ = false;
  return std::move(answers_);
}

bool StatisticsAutomatic(const CoordinatorOptions& o, const ModeTraits& traits,
                         bool driver_allows) {
  const std::string name = o.plan.codec.substr(0, o.plan.codec.find('('));
  const bool compressed =
      !o.codec_ladder.empty() || (name != "fp32" && name != "fp16" && name != "bf16");
  return compressed && traits.summed && !o.has_parent() && driver_allows;
}

std::unique_ptr<StatisticsPhase> StatisticsPhase::Create(const CoordinatorOptions& o,
                                                         const codecs::ModelLayout& layout,
                                                         bool median, bool automatic,
                                                         StatisticsPersist persist) {
  if (o.bn_stats == "off" || (o.bn_stats == "auto" && !automatic)) return nullptr;
  std::vector<core::StatisticsPair> pairs = core::StatisticsPairs(layout);
  if (pairs.empty()) {
    if (o.bn_stats == "on") {
      log::Info("coordinator",
                "--bn-stats on: the model has no batch normalisation statistics "
                "in its flat vector; nothing to re-estimate");
    }
    return nullptr;
  }
  if (o.bn_stats == "auto") {
    log::Info("coordinator",
              "--bn-stats auto: codec %s moves the model's batch normalisation statistics "
              "apart from its weights, so the round's clients re-estimate them after each "
              "commit (--bn-stats off to skip)",
              o.codec_ladder.empty() ? o.plan.codec : "ladder");
  }
  return std::unique_ptr<StatisticsPhase>(
      new StatisticsPhase(o, std::move(pairs), median, std::move(persist)));
}

StatisticsPhase::StatisticsPhase(const CoordinatorOptions& o,
                                 std::vector<core::StatisticsPair> pairs, bool median,
                                 StatisticsPersist persist)
    : options_(o),
      pairs_(std::move(pairs)),
      median_(median),
      persist_(std::move(persist)),
      book_(core::StatisticsChannels(pairs_)) {}

bool StatisticsPhase::Pending(RoundEngine& engine) {
  const EngineState s = engine.Snapshot();
  return s.next_round > 1 && s.statistics_round + 1 < s.next_round;
}

bool StatisticsPhase::Pool(const StatsBook::Answers& answers, std::vector<float>* model) const {
  if (answers.estimates.empty()) return false;
  std::map<std::string, uint64_t> examples;
  for (const auto& [client, a] : answers.estimates) examples[client] = a.examples;
  const std::map<std::string, double> weights = CappedWeights(examples, options_.max_client_weight);
  std::vector<core::StatisticsEstimate> in;
  std::set<uint32_t> skipped;  // a pair any client could not estimate keeps its values
  for (const auto& [client, a] : answers.estimates) {
    in.push_back({weights.at(client), a.mean, a.var});
    skipped.insert(a.skipped.begin(), a.skipped.end());
  }
  std::vector<float> mean, var;
  if (!core::PoolStatistics(in, median_, &mean, &var).ok()) return false;  // checked at Accept
  const std::vector<uint32_t> skip(skipped.begin(), skipped.end());
  return core::WriteStatistics(pairs_, mean, var, skip, *model).ok();
}

absl::Status StatisticsPhase::Run(uint64_t round, const std::vector<std::string>& clients,
                                  RoundHost& host, RoundReport* rep) {
  RoundEngine& engine = host.engine();
  const auto started = options_.clock->Now();
  const uint64_t version = engine.model()->version;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.bn_stats_timeout_s));
  protos::ServerEvent event;
  protos::StatisticsStart* s = event.mutable_statistics();
  s->set_round(round);
  s->set_model_version(version);
  s->set_deadline_unix_ms(core::UnixMs(options_.clock->WallNow() + timeout));
  s->set_batches(options_.bn_stats_batches);
  s->set_batch_size(options_.bn_stats_batch);
  s->set_seed(options_.seed * 1000003 + round);
  // Booked before it is sent: a quick answer must find its round asked.
  book_.Ask(*s, std::set<std::string>(clients.begin(), clients.end()));
  for (const std::string& c : clients) {
    if (!host.Push(c, event)) book_.Withdraw(c);  // gone meanwhile
  }
  Failpoint("statistics-asked", round);
  host.WaitUntil(
      started + timeout, [this] { return book_.Waiting().empty(); },
      [&] {
        for (const std::string& c : host.Vanished(book_.Waiting(), started)) book_.Withdraw(c);
      });
  const StatsBook::Answers answers = book_.Take();
  rep->figures["bn_stats_asked"] = static_cast<double>(answers.asked);
  rep->figures["bn_stats_answers"] = static_cast<double>(answers.estimates.size());
  rep->figures["bn_stats_declined"] = static_cast<double>(answers.declined);
  uint64_t examples = 0;
  for (const auto& [client, a] : answers.estimates) examples += a.examples;
  rep->figures["bn_stats_examples"] = static_cast<double>(examples);
  std::vector<float> model = engine.ModelVector();
  if (host.stopped() || !Pool(answers, &model)) {
    rep->labels["bn_stats"] = "none";
    return absl::OkStatus();
  }
  auto verdict = host.CheckModel(model);
  if (!verdict.ok()) return verdict.status();
  if (!verdict->passed()) {
    rep->labels["bn_stats"] = StrCat("refused:", GuardCheckName(verdict->check));
    return absl::OkStatus();
  }
  RebaseOptions keep{.keep_momentum = true, .from_version = version, .statistics_round = round};
  if (absl::Status st = engine.Rebase(engine.current_round(), std::move(model), keep); !st.ok()) {
    return st;
  }
  // The next round's downloads, saved before the checkpoint that names the version.
  if (persist_.downlinks != nullptr) {
    auto global = persist_.downlinks->At("", engine.model()->version,
                                         [&engine] { return engine.ModelVector(); });
    if (!global.ok()) return global.status();
  }
  Failpoint("statistics-pooled", round);
  if (absl::Status st = WriteCheckpoint(persist_.state_dir, persist_.job_key, engine.Snapshot());
      !st.ok()) {
    return st;
  }
  rep->labels["bn_stats"] = "committed";
  rep->figures["bn_stats_seconds"] = core::SecondsSince(*options_.clock, started);
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
