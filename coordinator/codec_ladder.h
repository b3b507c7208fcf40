// The codec ladder (--codec-ladder): each participant is asked to send with the densest
// codec of a list that its measured link can carry before its deadline.
//
// A rung's cost is the bytes of its frame for the whole model (Codec::MaxFrameBytes: exact
// for fixed-size codecs, a bound for the others); rungs are given densest first and each
// must cost fewer bytes than the one before. A client asked with `window` from being asked
// to its deadline gets the first rung i with
//
//     busy + bytes(i) / uplink  <=  fill x window
//
// where busy is how long it took last time from being asked to its first uploaded byte
// (download and training), uplink the slower of its measured upload and download rates
// (LinkEstimate::PlanningUpBps), both from the LinkBook, and fill (0.8) leaves room for the
// estimate to be off. A client whose link is not measured yet is planned as a typical one
// of those that are (LinkBook::Typical: the rate three in four of them reach); one that no
// rung fits, or any client before anyone is measured, gets the last rung: the cheapest. A
// client whose link drops moves down in its next round; one whose link recovers moves back
// up.
//
// Thread-safe (the LinkBook takes its own lock).
#ifndef FEDLGC_COORDINATOR_CODEC_LADDER_H_
#define FEDLGC_COORDINATOR_CODEC_LADDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "coordinator/link_book.h"
#include "coordinator/round_engine.h"

namespace fedlgc::coordinator {

struct LadderRung {
  std::string spec;    // as the clients are sent it
  uint64_t bytes = 0;  // of the frame of the whole model
};

class CodecLadder final : public CodecChooser {
 public:
  static constexpr double kFill = 0.8;

  // `specs` densest first; each must build (with `layout` when given), be a codec whose
  // frames decode the same in every round (no randk(seed=round), gradiveq, two-phase
  // powersgd or terngrad(shared=1)), and cost fewer bytes for `dim` coordinates than the
  // one before. `links` (not owned) must outlive the ladder.
  static absl::StatusOr<std::shared_ptr<CodecLadder>> Create(const std::vector<std::string>& specs,
                                                             uint64_t dim,
                                                             const codecs::ModelLayout* layout,
                                                             const LinkBook* links);

  // The rung for a link as measured, with `window_seconds` to the deadline.
  size_t RungFor(const LinkEstimate& link, double window_seconds) const;
  // The rung of `spec`, or size() when it is none of them.
  size_t RungOf(const std::string& spec) const;
  const std::vector<LadderRung>& rungs() const { return rungs_; }
  size_t size() const { return rungs_.size(); }

  std::string Choose(const std::string& client, Clock::duration window) const override;
  std::vector<std::string> Specs() const override;

 private:
  CodecLadder(std::vector<LadderRung> rungs, const LinkBook* links)
      : rungs_(std::move(rungs)), links_(links) {}

  const std::vector<LadderRung> rungs_;
  const LinkBook* const links_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_CODEC_LADDER_H_
