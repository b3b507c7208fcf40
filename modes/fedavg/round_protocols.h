// The table of FedAvg's round protocols (round_protocol.h) and the assembly of a job's.
#ifndef FEDLGC_MODES_FEDAVG_ROUND_PROTOCOLS_H_
#define FEDLGC_MODES_FEDAVG_ROUND_PROTOCOLS_H_

#include <memory>
#include <vector>

#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {

// Every protocol's entry, in the order a round consults them.
const std::vector<const ProtocolEntry*>& ProtocolTable();
const ProtocolEntry& EntryOf(ProtocolId id);

// The protocols `job` runs, in table order: those it wants less those another stands in
// for. INVALID_ARGUMENT, naming both protocols, for the first pair that does not run
// together or a protocol without one it needs; an entry's own check's error otherwise.
absl::StatusOr<std::vector<ProtocolId>> PlanProtocols(const ProtocolJob& job);
// PlanProtocols, each made.
absl::StatusOr<std::vector<std::unique_ptr<RoundProtocol>>> AssembleProtocols(
    const ProtocolJob& job);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_ROUND_PROTOCOLS_H_
