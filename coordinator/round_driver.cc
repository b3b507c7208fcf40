// Defaults of the RoundDriver interface (see round_driver.h).
#include "coordinator/round_driver.h"

#include <algorithm>
#include <cstdio>

#include "base/str.h"

namespace fedlgc::coordinator {

absl::StatusOr<std::shared_ptr<const ModelBlob>> RoundDriver::Blob(const std::string&,
                                                                   const std::string& name,
                                                                   uint64_t) {
  return absl::InvalidArgumentError(
      StrCat("unknown blob '", name, "' (mode ", ModeName(mode()), ")"));
}

absl::Status RoundDriver::AcceptReport(const std::string&, const protos::ProgressReport&) {
  return absl::FailedPreconditionError(
      StrCat("this job (mode ", ModeName(mode()), ") takes no progress reports"));
}

absl::StatusOr<GuardedChoice> ChooseUnderGuard(RoundHost& host,
                                               const std::vector<std::string>& suspects,
                                               size_t max_excluded, const CandidateFn& candidate,
                                               RoundReport* report) {
  GuardedChoice choice;
  std::set<std::string> excluded;
  for (size_t k = 0; k <= std::min(max_excluded, suspects.size()); ++k) {
    if (k > 0) excluded.insert(suspects[k - 1]);
    auto model = candidate(excluded);
    if (!model.ok()) return model.status();
    auto verdict = host.CheckModel(*model);
    if (!verdict.ok()) return verdict.status();
    if (k == 0) choice.first = *verdict;
    choice.last = *verdict;
    if (verdict->passed()) {
      choice.model = *std::move(model);
      choice.excluded = excluded;
      break;
    }
  }
  report->labels["guard"] = choice.first.passed()
                                ? "passed"
                                : StrCat("refused:", GuardCheckName(choice.first.check));
  report->figures["guard_step"] = choice.last.step;
  report->figures["guard_growth"] = choice.last.growth;
  if (choice.last.loss >= 0) report->figures["guard_loss"] = choice.last.loss;
  report->figures["guard_excluded"] = static_cast<double>(choice.excluded.size());
  return choice;
}

std::vector<std::string> ByNormDescending(const std::map<std::string, double>& norms) {
  std::vector<std::string> out;
  for (const auto& [client, n] : norms) out.push_back(client);
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return norms.at(a) > norms.at(b);
  });
  return out;
}

void QuarantineExcluded(RoundHost& host, uint64_t round, const GuardedChoice& choice) {
  if (choice.excluded.empty()) return;
  host.Quarantine(choice.excluded, StrCat("round ", round, ": the model guard refused the "
                                          "round with its update (", choice.first.detail, ")"));
}

}  // namespace fedlgc::coordinator
