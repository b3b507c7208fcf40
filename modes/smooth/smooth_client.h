// The smooth mode at the edge (smooth_driver.h): trains FedAvg's local period, folds the
// update into the client's average and sends the average, bias-corrected, through the
// job's codec (no error feedback). The average moves on only when the receipt says the
// whole update counted; until then the next average is kept with the update in flight.
// Both live in the slot "smooth" of the client state file, so a restart neither loses
// the average nor folds an update in twice.
#ifndef FEDLGC_MODES_SMOOTH_SMOOTH_CLIENT_H_
#define FEDLGC_MODES_SMOOTH_SMOOTH_CLIENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "edge_client/client_mode.h"
#include "modes/in_flight.h"
#include "modes/local_model.h"

namespace fedlgc::modes {

class SmoothClient final : public edge_client::ClientMode {
 public:
  explicit SmoothClient(edge_client::ClientEnv& env) : env_(env) {}

  absl::Status OnRoundStart(const protos::RoundStart& start) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;

  struct Average {
    std::vector<float> values;  // empty: no update counted yet
    uint64_t folded = 0;        // the updates it folds in
    bool operator==(const Average&) const = default;
  };
  const Average& average() const { return average_; }

 private:
  edge_client::ClientEnv& env_;  // outlives this mode
  PlainCodec codec_;
  Average average_;
  InFlight<Average> next_;  // what average_ becomes when the update in flight counts
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SMOOTH_SMOOTH_CLIENT_H_
