// The codec ladder (see codec_ladder.h).
#include "coordinator/codec_ladder.h"

#include <chrono>

#include "base/str.h"
#include "codecs/registry.h"
#include "codecs/round_kind.h"

namespace fedlgc::coordinator {
namespace {

// Whether frames of `spec` decode differently from round to round (a round protocol, or a
// seed each round names), which a client's own decoder cannot follow.
bool VariesByRound(const std::string& spec) {
  return codecs::RoundKindOf(spec).VariesByRound();
}

}  // namespace

absl::StatusOr<std::shared_ptr<CodecLadder>> CodecLadder::Create(
    const std::vector<std::string>& specs, uint64_t dim, const codecs::ModelLayout* layout,
    const LinkBook* links) {
  if (specs.size() < 2) {
    return absl::InvalidArgumentError(
        "--codec-ladder: give two codecs or more, densest first (';'-separated)");
  }
  std::vector<LadderRung> rungs;
  for (const std::string& spec : specs) {
    if (VariesByRound(spec)) {
      return absl::InvalidArgumentError(
          StrCat("--codec-ladder: ", spec,
                 " is a round protocol or names each round's seed; a rung must decode the same "
                 "in every round"));
    }
    auto codec = codecs::MakeCodec(spec, layout);
    if (!codec.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--codec-ladder: ", std::string(codec.status().message())));
    }
    LadderRung rung{spec, (*codec)->MaxFrameBytes(dim)};
    if (!rungs.empty() && rung.bytes >= rungs.back().bytes) {
      return absl::InvalidArgumentError(
          StrCat("--codec-ladder: rungs go densest first, each cheaper than the one before; ", spec,
                 " costs ", rung.bytes, " bytes for ", dim, " coordinates, ", rungs.back().spec,
                 " ", rungs.back().bytes));
    }
    rungs.push_back(std::move(rung));
  }
  return std::shared_ptr<CodecLadder>(new CodecLadder(std::move(rungs), links));
}

size_t CodecLadder::RungFor(const LinkEstimate& link, double window_seconds) const {
  const double up = link.PlanningUpBps();
  if (!(up > 0)) return rungs_.size() - 1;
  const double budget = kFill * window_seconds - link.busy_seconds;
  for (size_t i = 0; i + 1 < rungs_.size(); ++i) {
    if (static_cast<double>(rungs_[i].bytes) / up <= budget) return i;
  }
  return rungs_.size() - 1;
}

size_t CodecLadder::RungOf(const std::string& spec) const {
  for (size_t i = 0; i < rungs_.size(); ++i) {
    if (rungs_[i].spec == spec) return i;
  }
  return rungs_.size();
}

std::string CodecLadder::Choose(const std::string& client, Clock::duration window) const {
  const double seconds = std::chrono::duration<double>(window).count();
  LinkEstimate link = links_->Estimate(client);
  // Not measured yet: planned as a typical client of those that are.
  if (!(link.PlanningUpBps() > 0)) link = links_->Typical();
  return rungs_[RungFor(link, seconds)].spec;
}

std::vector<std::string> CodecLadder::Specs() const {
  std::vector<std::string> specs;
  for (const LadderRung& r : rungs_) specs.push_back(r.spec);
  return specs;
}

}  // namespace fedlgc::coordinator
