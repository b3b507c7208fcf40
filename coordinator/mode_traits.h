// What the coordinator, an aggregator and the tools ask of a job's mode before and around
// its rounds, answered by the mode itself: each mode fills its ModeTraits in its own folder
// (modes/<mode>/*_driver.cc) and modes/drivers.h resolves a job's mode to them once. Code
// outside modes/ asks these questions; it never compares a Mode.
#ifndef FEDLGC_COORDINATOR_MODE_TRAITS_H_
#define FEDLGC_COORDINATOR_MODE_TRAITS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/protocol.h"

namespace fedlgc::codecs {
class ModelLayout;
}
namespace fedlgc::core {
struct ModelOptions;
}

namespace fedlgc::coordinator {

struct RoundPlan;

// A finished run of fedlgc-sim, as a mode's end-of-run check reads it.
struct FinishedRun {
  std::string dir;  // the run folder: coordinator/ and clients/client-<i>.state
  uint32_t clients = 0;
  uint32_t rounds = 0;
  const core::ModelOptions* model = nullptr;
  uint64_t init_seed = 1;
};

// What a mode's end-of-run check found: its figures and verdict go into the simulator's
// report under `name` (the verdict as `verdict`: true when it passed), and a failed one
// makes the simulator exit 1.
struct RunCheck {
  std::string name;
  std::map<std::string, double> figures;
  std::string verdict;
  bool passed = false;
};

struct ModeTraits {
  Mode mode{};  // each mode sets its own
  // The fewest counted updates a round of this mode can commit (SGP: a share needs a
  // peer), before the aggregator's own minimum.
  size_t min_participants = 1;
  // Whether the robust aggregators (median, trimmed mean) apply: the round sums a set of
  // updates. Clipping and the model guard apply to every mode.
  bool robust_aggregators = false;
  // Whether a round commits the weighted mean of its updates through the server optimizer
  // (--server-lr and --server-momentum apply, FedAvg's options are checked).
  bool summed = false;
  // Whether the job key of a checkpoint names the mode (FedAvg's and LGC's do not: their
  // checkpoints from before modes had names still load).
  bool mode_in_job_key = true;
  // Whether a client that uploads updates of the job codec and nothing else takes part:
  // an aggregator of a tree (--parent, tier/) and fedlgc-load's emulated clients are such
  // clients.
  bool plain_clients = false;
  // Whether its rounds take a codec per participant (--codec-ladder): every update is
  // decoded on its own, with the codec its client was asked for.
  bool codec_ladder = false;
  // Whether the clients build their codecs with the model's layout (LGC's do not).
  bool codecs_take_layout = true;
  // The job codec that makes a job of this mode whatever --mode says (lgc(...)): true for
  // `codec` when this mode claims it. Null: none.
  bool (*claims_codec)(std::string_view codec) = nullptr;
  // The mode's rules for the job's codecs (--codec and --codec-warmup): what it refuses,
  // with an error that says why. `layout`: the model's.
  absl::Status (*check_codecs)(const RoundPlan& plan, const codecs::ModelLayout& layout) = nullptr;
  // The report figure or label shown in fedlgc-sim's last column, and its heading (LSGD's
  // leader, SGP's consensus distance); empty: none.
  std::string_view report_key;
  std::string_view report_heading;
  // What fedlgc-sim checks at the end of a run of this mode (SGP: push-sum conserved its
  // mass), printing a line; an error when the check could not be made. Null: none.
  absl::StatusOr<RunCheck> (*end_of_run_check)(const FinishedRun& run) = nullptr;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_MODE_TRAITS_H_
