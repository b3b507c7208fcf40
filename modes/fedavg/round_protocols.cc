// The table of FedAvg's round protocols (see round_protocols.h). A new protocol is its own
// file with its entry, and a line here (docs/adding-a-protocol.md).
#include "modes/fedavg/round_protocols.h"

#include <algorithm>

#include "base/str.h"
#include "modes/fedavg/fedavg_driver.h"

namespace fedlgc::modes {

// Each protocol's entry, defined in the protocol's own file.
const ProtocolEntry& RoundSeedProtocol();    // round_seed_protocol.cc
const ProtocolEntry& BasisProtocol();        // basis_protocol.cc
const ProtocolEntry& SharedScaleProtocol();  // shared_scale_protocol.cc
const ProtocolEntry& TwoPhaseProtocol();     // two_phase_protocol.cc
const ProtocolEntry& DpProtocol();           // dp_protocol.cc
const ProtocolEntry& SecAggProtocol();       // secagg_protocol.cc
const ProtocolEntry& BufferedProtocol();     // buffered_protocol.cc
const ProtocolEntry& FedProxProtocol();      // fedprox_protocol.cc
const ProtocolEntry& ScaffoldProtocol();     // scaffold_protocol.cc

const std::vector<const ProtocolEntry*>& ProtocolTable() {
  static const auto* const kTable = new std::vector<const ProtocolEntry*>{
      &RoundSeedProtocol(), &BasisProtocol(),   &SharedScaleProtocol(),
      &TwoPhaseProtocol(),  &DpProtocol(),      &SecAggProtocol(),
      &BufferedProtocol(),  &FedProxProtocol(), &ScaffoldProtocol(),
  };
  return *kTable;
}

const ProtocolEntry& EntryOf(ProtocolId id) {
  for (const ProtocolEntry* e : ProtocolTable()) {
    if (e->id == id) return *e;
  }
  std::abort();  // every id has its line in the table (round_protocols_test.cc)
}

absl::StatusOr<ProtocolJob> ProtocolJob::Read(const FedAvgOptions& options,
                                              const coordinator::DriverEnv& env) {
  ProtocolJob job;
  job.options = &options;
  job.env = &env;
  if (env.plan != nullptr) {
    job.codec = codecs::RoundKindOf(env.plan->codec);
    for (const std::string& spec : env.plan->warmup_codecs) {
      job.warmup_round_seed |= codecs::Present(codecs::RoundKindOf(spec).round_seed);
    }
  }
  auto buffered = ParseRoundsMode(options.rounds_mode);
  if (!buffered.ok()) return buffered.status();
  job.buffered = *buffered;
  auto dp = ParseDp(options.dp, options.dp_epsilon, options.dp_delta, options.dp_max_epsilon);
  if (!dp.ok()) return dp.status();
  job.dp = *dp;
  auto secagg = ParseSecAgg(options.secagg);
  if (!secagg.ok()) return secagg.status();
  job.secagg = *secagg;
  auto algorithm = Algorithm::Parse(options.algorithm);
  if (!algorithm.ok()) return algorithm.status();
  job.algorithm = *algorithm;
  return job;
}

namespace {

bool Applies(const ProtocolRule& rule, const ProtocolJob& job) {
  return rule.when == nullptr || rule.when(job);
}

}  // namespace

absl::StatusOr<std::vector<ProtocolId>> PlanProtocols(const ProtocolJob& job) {
  std::vector<const ProtocolEntry*> wanted;
  for (const ProtocolEntry* e : ProtocolTable()) {
    if (e->wanted(job)) wanted.push_back(e);
  }
  const auto is_wanted = [&](ProtocolId id) {
    return std::any_of(wanted.begin(), wanted.end(),
                       [id](const ProtocolEntry* e) { return e->id == id; });
  };
  for (const ProtocolEntry* e : wanted) {
    for (const ProtocolRule& r : e->conflicts) {
      if (is_wanted(r.other) && Applies(r, job)) {
        return absl::InvalidArgumentError(
            StrCat(e->name, " does not run with ", EntryOf(r.other).name, ": ", r.why));
      }
    }
    for (const ProtocolRule& r : e->needs) {
      if (!is_wanted(r.other) && Applies(r, job)) {
        return absl::InvalidArgumentError(
            StrCat(e->name, " needs ", EntryOf(r.other).name, ": ", r.why));
      }
    }
  }
  for (const ProtocolEntry* e : ProtocolTable()) {
    if (e->check == nullptr) continue;
    if (absl::Status st = e->check(job); !st.ok()) return st;
  }
  std::vector<ProtocolId> planned;
  for (const ProtocolEntry* e : wanted) {
    const bool absorbed = std::any_of(wanted.begin(), wanted.end(), [e](const ProtocolEntry* o) {
      return std::find(o->absorbs.begin(), o->absorbs.end(), e->id) != o->absorbs.end();
    });
    if (!absorbed) planned.push_back(e->id);
  }
  return planned;
}

absl::StatusOr<std::vector<std::unique_ptr<RoundProtocol>>> AssembleProtocols(
    const ProtocolJob& job) {
  auto planned = PlanProtocols(job);
  if (!planned.ok()) return planned.status();
  std::vector<std::unique_ptr<RoundProtocol>> out;
  for (ProtocolId id : *planned) {
    auto p = EntryOf(id).make(job);
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
  }
  return out;
}

}  // namespace fedlgc::modes
