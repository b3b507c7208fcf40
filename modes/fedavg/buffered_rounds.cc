// Buffered asynchronous FedAvg (see buffered_rounds.h).
#include "modes/fedavg/buffered_rounds.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "base/log.h"
#include "base/spec.h"
#include "base/str.h"
#include "modes/fedavg/fedavg_driver.h"

namespace fedlgc::modes {

using coordinator::Clock;
using coordinator::RoundEngine;

uint32_t BufferedOptions::MaxStaleness() const {
  if (max_staleness > 0) return max_staleness;
  return 4 * ((concurrency + k - 1) / std::max<uint32_t>(k, 1));
}

double BufferedOptions::Scale(uint64_t tau) const {
  return staleness_exp == 0 ? 1.0 : std::pow(1.0 + static_cast<double>(tau), -staleness_exp);
}

namespace {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("--rounds-mode: ", what,
             " (sync, or buffered(k=K, concurrency=C, staleness=poly(A)|none, "
             "max_staleness=M, refill=arrival|commit))"));
}

// A whole number in [1, 1e6].
bool Count(const SpecArg& a, uint32_t* out) {
  if (!a.is_number || !(a.number >= 1 && a.number <= 1e6) || a.number != std::floor(a.number))
    return false;
  *out = static_cast<uint32_t>(a.number);
  return true;
}

absl::Status ParseStaleness(const SpecArg& a, double* exp) {
  if (a.is_number || a.node == nullptr) return Bad("staleness= takes poly(A) or none");
  const SpecNode& n = *a.node;
  if (n.name == "none" && n.IsWord()) {
    *exp = 0;
    return absl::OkStatus();
  }
  if (n.name == "poly" && n.args.size() == 1 && n.args[0].is_number &&
      (n.args[0].key.empty() || n.args[0].key == "a") && n.args[0].number >= 0 &&
      n.args[0].number <= 16) {
    *exp = n.args[0].number;
    return absl::OkStatus();
  }
  return Bad(StrCat("staleness=", FormatSpec(n), " is not poly(A) with A in [0, 16], or none"));
}

}  // namespace

absl::StatusOr<std::optional<BufferedOptions>> ParseRoundsMode(const std::string& spec) {
  auto node = ParseSpec(spec);
  if (!node.ok()) return Bad(std::string(node.status().message()));
  if (node->name == "sync" && node->IsWord()) return std::nullopt;
  if (node->name != "buffered") return Bad(StrCat("unknown rounds mode ", node->name));
  BufferedOptions o;
  std::set<std::string> seen;
  for (const SpecArg& a : node->args) {
    if (a.key.empty()) return Bad("buffered(...) takes named arguments only");
    if (!seen.insert(a.key).second) return Bad(StrCat(a.key, "= given twice"));
    if (a.key == "k") {
      if (!Count(a, &o.k)) return Bad("k= takes a whole number >= 1");
    } else if (a.key == "concurrency") {
      if (!Count(a, &o.concurrency)) return Bad("concurrency= takes a whole number >= 1");
    } else if (a.key == "max_staleness") {
      if (!Count(a, &o.max_staleness) || o.max_staleness > 1000) {
        return Bad("max_staleness= takes a whole number in [1, 1000]");
      }
    } else if (a.key == "refill") {
      if (a.is_number || a.node == nullptr || !a.node->IsWord() ||
          (a.node->name != "arrival" && a.node->name != "commit")) {
        return Bad("refill= takes arrival or commit");
      }
      o.refill_at_commit = a.node->name == "commit";
    } else if (a.key == "staleness") {
      if (absl::Status st = ParseStaleness(a, &o.staleness_exp); !st.ok()) return st;
    } else {
      return Bad(StrCat("buffered(...) has no argument ", a.key));
    }
  }
  if (o.k > o.concurrency) {
    return Bad(StrCat("k=", o.k, " exceeds concurrency=", o.concurrency,
                      ": a commit would wait for more updates than are ever in flight"));
  }
  return std::optional<BufferedOptions>(o);
}

std::string FormatRoundsMode(const std::optional<BufferedOptions>& o) {
  if (!o) return "sync";
  return StrCat("buffered(k=", o->k, ",concurrency=", o->concurrency, ",staleness=",
                o->staleness_exp == 0 ? std::string("none")
                                      : StrCat("poly(", FormatSpecNumber(o->staleness_exp), ")"),
                ",max_staleness=", o->MaxStaleness(), o->refill_at_commit ? ",refill=commit" : "",
                ")");
}

std::vector<std::string> BufferedRounds::Idle(
    coordinator::RoundHost& host, const std::vector<std::string>& candidates,
    const std::map<std::string, RoundEngine::Asked>& asked, size_t want) const {
  RoundEngine& engine = host.engine();
  std::vector<std::string> connected = host.Connected();
  std::sort(connected.begin(), connected.end());
  // The coordinator's sample first (the clients a synchronous round would ask), then the
  // others in an order seeded by the round.
  std::vector<std::string> rest;
  const std::set<std::string> first(candidates.begin(), candidates.end());
  for (const std::string& c : connected) {
    if (!first.count(c)) rest.push_back(c);
  }
  std::mt19937_64 rng(engine.terms().SharedSeed(engine.current_round()));
  std::shuffle(rest.begin(), rest.end(), rng);
  const std::set<std::string> live(connected.begin(), connected.end());
  std::vector<std::string> out;
  std::set<std::string> taken;
  const auto consider = [&](const std::string& c) {
    if (out.size() >= want || asked.count(c) || taken.count(c) || !live.count(c) ||
        engine.roster().IsQuarantined(c)) {
      return;
    }
    out.push_back(c);
    taken.insert(c);
  };
  for (const std::string& c : candidates) consider(c);
  for (const std::string& c : rest) consider(c);
  return out;
}

void BufferedRounds::Refill(coordinator::RoundHost& host,
                            const std::vector<std::string>& candidates) {
  RoundEngine& engine = host.engine();
  const auto now = host.Now();
  const uint64_t version = engine.model()->version;
  auto asked = engine.Participants();
  std::set<std::string> drop;
  for (const auto& [client, a] : asked) {
    if (a.complete) continue;
    if (now > a.deadline || version - a.version > options_.MaxStaleness() ||
        !host.Vanished({client}, a.at).empty()) {
      drop.insert(client);
    }
  }
  if (!drop.empty()) {
    engine.Release(drop);
    released_ += drop.size();
    for (const std::string& c : drop) asked.erase(c);
  }
  // A complete update holds its client's place until a commit takes it under refill=commit.
  size_t training = 0;
  for (const auto& [client, a] : asked) {
    training += a.complete && !options_.refill_at_commit ? 0 : 1;
  }
  if (training >= options_.concurrency) return;
  const std::vector<std::string> more =
      Idle(host, candidates, asked, options_.concurrency - training);
  if (more.empty()) return;
  if (auto added = host.AskMore(more, now + timeout_); !added.ok()) {
    log::Warning("coordinator", "buffered rounds: asking clients: %s",
                 added.status().ToString().c_str());
  }
}

void BufferedRounds::Gather(RoundEngine& engine, const std::set<std::string>& settle, bool compact,
                            Commit* c) const {
  const uint64_t version = engine.model()->version;
  const auto asked = engine.Participants();
  c->updates = collector_->UpdatesOf(settle);
  // No client holds more than --max-client-weight of the commit's weight.
  std::map<std::string, uint64_t> samples;
  for (const auto& [client, u] : c->updates) samples[client] = std::llround(u.weight);
  const std::map<std::string, double> weights =
      coordinator::CappedWeights(samples, engine.terms().max_client_weight());
  // Stale updates weigh less: each is scaled by s(tau) before clipping and aggregation, so
  // that the commit moves the model by sum_i n_i s(tau_i) x_i / sum_i n_i (FedBuff).
  for (const auto& [client, u] : c->updates) {
    auto a = asked.find(client);
    if (a == asked.end()) continue;
    const uint64_t tau = version - a->second.version;
    c->staleness[client] = static_cast<double>(tau);
    const float s = static_cast<float>(options_.Scale(tau));
    coordinator::Contribution one{client, weights.at(client), {}, u.ranges, u.complete};
    if (compact) {
      const auto* held = &u;
      one.fill = [this, held, s](std::span<float> dense) {
        if (absl::Status st = collector_->Fill(*held, dense); !st.ok()) return st;
        for (float& x : dense) x *= s;
        return absl::OkStatus();
      };
      one.norm = u.Norm() * s;
    } else {
      std::vector<float>& v = c->scaled[client];
      v = u.values;
      for (float& x : v) x *= s;
      one.values = v;
    }
    c->all.push_back(std::move(one));
  }
}

absl::Status BufferedRounds::RunRound(coordinator::RoundHost& host,
                                      const std::vector<std::string>& candidates,
                                      Clock::time_point deadline,
                                      const coordinator::ServerOptimizer& optimizer,
                                      const coordinator::AggregatorOptions& robust,
                                      coordinator::CommitResult* commit, RoundReport* report) {
  RoundEngine& engine = host.engine();
  timeout_ = deadline - host.Now();
  if (collector_ == nullptr) {
    // The mean takes updates one at a time: they wait as the frames that arrived.
    const bool compact = robust.kind == coordinator::AggregatorKind::kMean;
    auto collector = std::make_shared<coordinator::PerClientCollector>(compact);
    const std::vector<std::string> first = Idle(host, candidates, {}, options_.concurrency);
    if (absl::Status st = host.StartRollingRound(first, deadline, collector); !st.ok()) return st;
    collector_ = std::move(collector);
  }
  Refill(host, candidates);
  const size_t k = options_.k;
  host.WaitUntil(
      deadline, [&] { return collector_->CompleteCount() >= k; },
      [&] { Refill(host, candidates); });
  if (host.stopped()) return absl::OkStatus();
  // The commit takes the first k updates that completed (at the deadline, those there are);
  // any others complete already wait for the next.
  const std::set<std::string> settle = collector_->EarliestComplete(k);
  report->hit_deadline = settle.size() < k;
  engine.Settle(settle);
  Commit c;
  Gather(engine, settle, robust.kind == coordinator::AggregatorKind::kMean, &c);
  report->figures["buffered_k"] = static_cast<double>(k);
  report->figures["released"] = static_cast<double>(released_);
  released_ = 0;
  double sum = 0, worst = 0;
  for (const auto& [client, tau] : c.staleness) {
    sum += tau;
    worst = std::max(worst, tau);
  }
  report->figures["staleness_mean"] = c.staleness.empty() ? 0 : sum / c.staleness.size();
  report->figures["staleness_max"] = worst;
  report->per_client["staleness"] = c.staleness;
  absl::Status st = AggregateAndCommit(host, c.all, optimizer, robust, commit, report, nullptr);
  report->figures["in_flight"] = static_cast<double>(engine.Participants().size());
  return st;
}

}  // namespace fedlgc::modes
