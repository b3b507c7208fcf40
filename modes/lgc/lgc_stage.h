// An LGC round's stage (lgc::LgcStage) as the wire carries it (protos::LgcStage):
// the same numbers, checked here.
#ifndef FEDLGC_MODES_LGC_LGC_STAGE_H_
#define FEDLGC_MODES_LGC_LGC_STAGE_H_

#include <optional>

#include "modes/lgc/lgc_plan.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

using lgc::LgcStage;

static_assert(static_cast<int>(LgcStage::kWarmUp) == protos::LGC_STAGE_WARM_UP);
static_assert(static_cast<int>(LgcStage::kCells) == protos::LGC_STAGE_CELLS);
static_assert(static_cast<int>(LgcStage::kAutoencoder) == protos::LGC_STAGE_AUTOENCODER);

inline protos::LgcStage ToProto(LgcStage stage) { return static_cast<protos::LgcStage>(stage); }

// nullopt for a value no stage has (a newer coordinator's, or a damaged message).
inline std::optional<LgcStage> FromProto(int stage) {
  switch (stage) {
    case protos::LGC_STAGE_WARM_UP:
      return LgcStage::kWarmUp;
    case protos::LGC_STAGE_CELLS:
      return LgcStage::kCells;
    case protos::LGC_STAGE_AUTOENCODER:
      return LgcStage::kAutoencoder;
    default:
      return std::nullopt;
  }
}

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_LGC_STAGE_H_
