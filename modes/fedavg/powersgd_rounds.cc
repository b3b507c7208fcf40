// Two-phase PowerSGD rounds at the coordinator (see powersgd_rounds.h).
#include "modes/fedavg/powersgd_rounds.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "coordinator/collectors.h"
#include "core/float_bytes.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_state.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

absl::StatusOr<std::unique_ptr<PowerSgdRounds>> PowerSgdRounds::Create(
    const std::string& spec, const codecs::ModelLayout& layout, std::string state_dir,
    uint64_t committed_round) {
  auto math = codecs::PowerSgdTwoPhase::Create(spec, layout);
  if (!math.ok()) return math.status();
  std::unique_ptr<PowerSgdRounds> r(new PowerSgdRounds(*std::move(math), std::move(state_dir)));
  if (committed_round > 0) {
    if (absl::Status st = r->Load(committed_round); !st.ok()) return st;
  }
  return r;
}

absl::Status PowerSgdRounds::Save(uint64_t round) const {
  return SavePowerSgdQuery(state_dir_, round, next_query_);
}

absl::Status PowerSgdRounds::Load(uint64_t round) {
  auto q = LoadPowerSgdQuery(state_dir_, round);
  if (absl::IsNotFound(q.status())) {
    log::Warning("coordinator",
                 "no PowerSGD query beside the checkpoint of round %llu: the next round draws one",
                 static_cast<unsigned long long>(round));
    return absl::OkStatus();
  }
  if (!q.ok()) return q.status();
  if (!q->empty() && q->size() != math_.query_floats()) {
    return absl::DataLossError(StrCat(PowerSgdQueryPath(state_dir_, round), ": a query of ",
                                      q->size(), " floats; the codec's has ",
                                      math_.query_floats()));
  }
  for (float v : *q) {
    if (!std::isfinite(v)) {
      return absl::DataLossError(
          StrCat(PowerSgdQueryPath(state_dir_, round), ": a non-finite query"));
    }
  }
  next_query_ = *std::move(q);
  return absl::OkStatus();
}

void PowerSgdRounds::Decorate(protos::RoundStart* start) {
  protos::PowerSgdRound* psgd = start->mutable_fedavg()->mutable_powersgd();
  absl::MutexLock lock(&mu_);
  if (open_.round != start->round()) return;
  psgd->set_query(core::FloatsToBytes(open_.query));
  psgd->set_factor(core::FloatsToBytes(open_.factor));
}

absl::Status PowerSgdRounds::Validate(uint64_t round, std::string_view spec,
                                      std::span<const uint8_t> body) {
  uint32_t tag = 0;
  uint64_t floats = 0;
  {
    absl::MutexLock lock(&mu_);
    if (open_.round != round) {
      return absl::FailedPreconditionError(StrCat("round ", round, " is closed"));
    }
    if (spec == codecs::kPowerSgdProjectionSpec) {
      tag = open_.query_tag;
      floats = math_.projection_floats();
    } else if (spec == codecs::kPowerSgdMessageSpec) {
      if (open_.factor.empty()) {
        return absl::FailedPreconditionError(
            "a two-phase PowerSGD Q before the round's factor went out (a factor of before a "
            "coordinator restart?)");
      }
      tag = open_.factor_tag;
      floats = math_.message_floats();
    } else {
      return codecs::WrongCodecError(
          StrCat("the round takes two-phase PowerSGD payloads, not ", std::string(spec)));
    }
  }
  absl::Status st = codecs::PowerSgdTwoPhase::ReadBody(body, tag, floats).status();
  if (codecs::InputErrorOf(st) == codecs::InputError::kWrongCodec) {
    return absl::FailedPreconditionError(StrCat(
        std::string(st.message()), ": the round moved on (its RoundStart names the current one)"));
  }
  return st;
}

std::vector<float> PowerSgdRounds::ClippedMean(const std::vector<std::span<const float>>& values,
                                               const std::vector<double>& weights, double clip) {
  if (values.empty()) return {};
  std::vector<double> norms;
  for (const auto& v : values) norms.push_back(coordinator::L2Norm(v));
  // As ClipByMedian: with a multiplier, nothing exceeds it x the lower median (0 included).
  const double bound = clip * coordinator::LowerMedian(norms);
  std::vector<double> sum(values[0].size(), 0.0);
  double total = 0;
  for (size_t c = 0; c < values.size(); ++c) {
    const double f = clip > 0 && norms[c] > bound ? bound / norms[c] : 1.0;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += weights[c] * f * values[c][i];
    total += weights[c];
  }
  if (!(total > 0)) return {};
  std::vector<float> mean(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / total);
  return mean;
}

std::vector<float> PowerSgdRounds::Factor(const coordinator::PayloadCollector& payloads,
                                          double clip, int* used) const {
  uint32_t tag;
  {
    absl::MutexLock lock(&mu_);
    tag = open_.query_tag;
  }
  std::vector<std::vector<float>> ps;
  std::vector<double> weights;
  for (const auto& [client, p] : payloads.Payloads()) {
    if (p.spec != codecs::kPowerSgdProjectionSpec) continue;
    auto v = codecs::PowerSgdTwoPhase::ReadBody(Bytes(p.body), tag, math_.projection_floats());
    if (!v.ok()) continue;  // validated on arrival: cannot happen
    weights.push_back(p.weight);
    ps.push_back(*std::move(v));
  }
  *used = static_cast<int>(ps.size());
  const std::vector<float> mean =
      ClippedMean(std::vector<std::span<const float>>(ps.begin(), ps.end()), weights, clip);
  if (mean.empty()) return {};
  return math_.Orthonormalize(mean);
}

absl::Status PowerSgdRounds::CommitSummed(coordinator::RoundHost& host,
                                          const std::vector<Message>& messages,
                                          std::span<const float> factor,
                                          const coordinator::ServerOptimizer& optimizer,
                                          const coordinator::AggregatorOptions& robust,
                                          coordinator::CommitResult* commit, RoundReport* report,
                                          std::set<std::string>* counted) const {
  coordinator::RoundEngine& engine = host.engine();
  std::vector<std::span<const float>> values;
  std::vector<double> weights, norms;
  for (const Message& m : messages) {
    values.push_back(m.values);
    weights.push_back(m.weight);
    norms.push_back(coordinator::L2Norm(m.values));
    report->per_client["update_norm"][m.client] = norms.back();
  }
  const double bound = robust.clip * coordinator::LowerMedian(norms);
  report->figures["clip_bound"] = bound;
  report->figures["clipped"] = static_cast<double>(std::count_if(
      norms.begin(), norms.end(), [&](double n) { return robust.clip > 0 && n > bound; }));
  report->figures["summed_code_floats"] = static_cast<double>(math_.message_floats());
  const std::vector<float> mean = ClippedMean(values, weights, robust.clip);
  std::vector<float> delta(engine.dim(), 0.0f);
  if (!mean.empty()) math_.AddRebuilt(factor, mean, 1.0, delta);
  // A sum cannot leave one client out: the guard judges the round as it is.
  auto choice = coordinator::ChooseUnderGuard(
      host, {}, 0, [&](const std::set<std::string>&) { return engine.Preview(delta, optimizer); },
      report);
  if (!choice.ok()) return choice.status();
  absl::StatusOr<coordinator::CommitResult> committed;
  if (choice->model.empty()) {
    committed = engine.CommitModel(engine.ModelVector(), {});
  } else {
    for (const Message& m : messages) counted->insert(m.client);
    committed = engine.CommitDelta(delta, optimizer, counted);
  }
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  return absl::OkStatus();
}

absl::Status PowerSgdRounds::RunRound(coordinator::RoundHost& host,
                                      const std::vector<std::string>& participants,
                                      coordinator::Clock::time_point deadline,
                                      const coordinator::ServerOptimizer& optimizer,
                                      const coordinator::AggregatorOptions& robust,
                                      coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  const bool warm = math_.warm() && !next_query_.empty();
  {
    absl::MutexLock lock(&mu_);
    open_ = Open{};
    open_.round = round;
    open_.query = warm ? next_query_ : math_.DrawQuery(engine.terms().SharedSeed(round));
    open_.query_tag = codecs::PowerSgdTwoPhase::Tag(open_.query);
  }
  report->figures["powersgd_warm"] = warm ? 1 : 0;
  auto payloads = std::make_shared<coordinator::PayloadCollector>(
      [this, round](std::string_view spec, std::span<const uint8_t> body) {
        return Validate(round, spec, body);
      });
  if (absl::Status st = host.StartRound(participants, deadline, payloads); !st.ok()) return st;
  WaitForMessages(host, round, participants, deadline, robust.clip, *payloads, report);
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = payloads->Count(codecs::kPowerSgdMessageSpec) < participants.size();
  engine.Freeze();
  std::vector<float> factor;
  uint32_t tag;
  {
    absl::MutexLock lock(&mu_);
    factor = open_.factor;
    tag = open_.factor_tag;
  }
  std::vector<Message> messages = ReadMessages(*payloads, factor, tag);
  std::set<std::string> counted;
  if (robust.buffered()) {
    if (absl::Status st =
            CommitBuffered(host, messages, factor, optimizer, robust, commit, report, &counted);
        !st.ok()) {
      return st;
    }
  } else if (absl::Status st =
                 CommitSummed(host, messages, factor, optimizer, robust, commit, report, &counted);
             !st.ok()) {
    return st;
  }
  // The next query: the counted clients' mean Q, clipped as the P's were.
  std::vector<std::span<const float>> kept;
  std::vector<double> weights;
  for (const Message& m : messages) {
    if (!counted.count(m.client)) continue;
    kept.push_back(m.values);
    weights.push_back(m.weight);
  }
  const std::vector<float> mean = ClippedMean(kept, weights, robust.clip);
  if (!mean.empty()) next_query_ = math_.NextQuery(mean, engine.terms().SharedSeed(round + 1));
  return absl::OkStatus();
}

void PowerSgdRounds::WaitForMessages(coordinator::RoundHost& host, uint64_t round,
                                     const std::vector<std::string>& participants,
                                     coordinator::Clock::time_point deadline, double clip,
                                     const coordinator::PayloadCollector& payloads,
                                     RoundReport* report) {
  using Clock = coordinator::Clock;
  const Clock::time_point start = host.Now();
  const Clock::time_point half = start + (deadline - start) / 2;
  const size_t n = participants.size();
  bool factored = false;
  host.WaitUntil(
      deadline, [&] { return factored && payloads.Count(codecs::kPowerSgdMessageSpec) >= n; },
      [&] {
        if (factored) return;
        const size_t in = payloads.Count(codecs::kPowerSgdProjectionSpec);
        if (in == 0 || (in < n && host.Now() < half)) return;
        int used = 0;
        std::vector<float> factor = Factor(payloads, clip, &used);
        if (factor.empty()) return;
        protos::ServerEvent e;
        protos::PowerSgdFactor* f = e.mutable_mode()->mutable_powersgd_factor();
        f->set_round(round);
        f->set_factor(core::FloatsToBytes(factor));
        {
          absl::MutexLock lock(&mu_);
          open_.factor_tag = codecs::PowerSgdTwoPhase::Tag(factor);
          open_.factor = std::move(factor);
        }
        factored = true;
        report->figures["powersgd_p_in"] = used;
        report->figures["powersgd_factor_s"] =
            std::chrono::duration<double>(host.Now() - start).count();
        for (const std::string& p : participants) host.Push(p, e);
      });
}

std::vector<PowerSgdRounds::Message> PowerSgdRounds::ReadMessages(
    const coordinator::PayloadCollector& payloads, std::span<const float> factor,
    uint32_t tag) const {
  std::vector<Message> messages;
  if (factor.empty()) return messages;
  for (auto& [client, p] : payloads.Payloads()) {
    if (p.spec != codecs::kPowerSgdMessageSpec) continue;
    auto v = codecs::PowerSgdTwoPhase::ReadBody(Bytes(p.body), tag, math_.message_floats());
    if (!v.ok()) continue;  // validated on arrival: cannot happen
    // Q columns facing a zero column of P^ rebuild to nothing: dropped, so a message's
    // norm is its update's.
    math_.DropDeadColumns(factor, *v);
    messages.push_back({client, p.weight, *std::move(v), {}});
  }
  return messages;
}

absl::Status PowerSgdRounds::CommitBuffered(
    coordinator::RoundHost& host, std::vector<Message>& messages, std::span<const float> factor,
    const coordinator::ServerOptimizer& optimizer, const coordinator::AggregatorOptions& robust,
    coordinator::CommitResult* commit, RoundReport* report, std::set<std::string>* counted) const {
  const uint64_t dim = host.engine().dim();
  const bool compact = robust.takes_partial();  // the means take compact contributions
  const std::vector<coordinator::Range> whole = {{0, dim}};
  std::vector<coordinator::Contribution> all;
  for (Message& m : messages) {
    coordinator::Contribution c{m.client, m.weight, {}, whole, true};
    if (compact) {
      c.fill = [this, factor, &m](std::span<float> dense) {
        std::fill(dense.begin(), dense.end(), 0.0f);
        math_.AddRebuilt(factor, m.values, 1.0, dense);
        return absl::OkStatus();
      };
      c.norm = coordinator::L2Norm(m.values);
    } else {
      m.rebuilt.assign(dim, 0.0f);
      math_.AddRebuilt(factor, m.values, 1.0, m.rebuilt);
      c.values = m.rebuilt;
    }
    all.push_back(std::move(c));
  }
  return AggregateAndCommit(host, all, optimizer, robust, commit, report, counted);
}

}  // namespace fedlgc::modes
