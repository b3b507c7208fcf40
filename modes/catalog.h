// What the modes answer about themselves, by Mode (their ModeTraits, coordinator/
// mode_traits.h), and the job's mode resolved from its options, once. The table behind it
// is the coordinator's table of modes (drivers.cc); this header is light enough for any
// folder that asks a mode a question (the tier, fedlgc-load, the simulator).
#ifndef FEDLGC_MODES_CATALOG_H_
#define FEDLGC_MODES_CATALOG_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/mode_traits.h"

namespace fedlgc::coordinator {
struct CoordinatorOptions;
}

namespace fedlgc::modes {

// The traits of `mode` (every Mode has a row).
const coordinator::ModeTraits& TraitsOf(Mode mode);

// The job's mode: --mode (`mode_flag`), or the mode that claims the job codec
// (ModeTraits::claims_codec: an lgc(...) codec makes an LGC job) when --mode is that mode
// or the default fedavg. INVALID_ARGUMENT names the modes for an unknown name, and says
// which mode a claimed codec needs.
absl::StatusOr<const coordinator::ModeTraits*> JobMode(std::string_view mode_flag,
                                                       std::string_view codec);
absl::StatusOr<const coordinator::ModeTraits*> JobMode(const coordinator::CoordinatorOptions& o);

// The coordinator's options checked against the job's mode (JobMode, then
// CoordinatorOptions::Validate): what fedlgc-coordinator refuses before it starts.
absl::Status ValidateJob(const coordinator::CoordinatorOptions& o);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_CATALOG_H_
