// The seam of FedAvg's round protocols at the edge (the coordinator's half is
// round_protocol.h): a round whose codec or RoundStart asks for more than "train, encode,
// upload" is run by a ClientProtocol. FedAvgClient keeps what every round shares (the
// round's codec, its error-feedback residual, the update in flight) and hands a round to
// the first protocol that Runs it; events, receipts and restores go to the protocol they
// belong to. The protocols are listed in client_protocols.cc, each in a file of its own:
// two-phase PowerSGD (powersgd_client.h), secure aggregation (secagg_client.h),
// shared-scale TernGrad (shared_scale_client.h) and SCAFFOLD (scaffold_client.h). The
// coordinator-only protocols (a round seed, GradiVeQ's bases, --dp, buffered rounds) need
// nothing here: their RoundStart names the codec or the basis the client uses.
//
// Not thread-safe: the event loop calls every method, as it calls FedAvgClient.
#ifndef FEDLGC_MODES_FEDAVG_CLIENT_PROTOCOL_H_
#define FEDLGC_MODES_FEDAVG_CLIENT_PROTOCOL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "codecs/round_kind.h"
#include "edge_client/client_mode.h"

namespace fedlgc::protos {
class ModeEvent;
class RoundReceipt;
class RoundStart;
}  // namespace fedlgc::protos
namespace fedlgc::modes::pb {
class FedAvgClientState;
}

namespace fedlgc::modes {

// What a protocol may use of the FedAvg client it runs in.
class FedAvgClientCore {
 public:
  virtual ~FedAvgClientCore() = default;
  virtual edge_client::ClientEnv& env() = 0;
  // The round codec's error-feedback residual (what the client owes the model).
  virtual std::span<const float> residual() const = 0;
  // The state's residual changed: the codec's follows.
  virtual void ResidualChanged() = 0;
  // Encodes `update` plus the residual with the round's codec (with TernGrad's agreed
  // `shared_scale`; 0: none) as the round's update, persists and uploads it. The round's
  // encode time counts from `encode_began` (a protocol that encoded a part of its own
  // before: SCAFFOLD).
  virtual absl::Status EncodeAndUpload(const protos::RoundStart& start,
                                       std::span<const float> update, float shared_scale,
                                       core::Clock::time_point encode_began) = 0;
  // Puts the frames of `p` at `chunks` (frames of the model update, part 0) back into the
  // residual and keeps it in the state, as a receipt's uncounted chunks go back (a frame
  // coded against a GradiVeQ basis no longer held is dropped, counted "dropped"). For a
  // protocol that owns an update of several parts (SCAFFOLD) and restores its other parts
  // itself.
  virtual absl::Status RestoreFrames(const edge_client::PendingUpdate& p,
                                     std::span<const uint32_t> chunks) = 0;
};

class ClientProtocol {
 public:
  virtual ~ClientProtocol() = default;

  // Whether this protocol runs the round of `start`, whose codec needs `kind`.
  virtual bool Runs(const protos::RoundStart& start, const codecs::RoundKind& kind) const = 0;
  // Whether the round's codec is made (its basis fetched, the residual loaded) before the
  // protocol runs the round; false for one that sends frames of its own.
  virtual bool UsesRoundCodec() const { return true; }
  // Whether an update in flight of the same round and model that is not this protocol's
  // goes out again as it is; false: it goes back into the residual (a secure round sends
  // only its own masked code).
  virtual bool ResendsOthers() const { return true; }
  // The client's part of the round; `trained`: the round's update is in the residual
  // already (an update of this round in flight went back there).
  virtual absl::Status OnRoundStart(const protos::RoundStart& start, bool trained) = 0;
  // An event of this protocol's; nullopt for another's.
  virtual std::optional<absl::Status> OnModeEvent(const protos::ModeEvent& /*event*/) {
    return std::nullopt;
  }

  // Whether the update in flight is one of this protocol's: its receipt and its restore
  // are the protocol's then.
  virtual bool Owns(const edge_client::ClientState& /*state*/) const { return false; }
  virtual absl::Status OnReceipt(const protos::RoundReceipt& /*receipt*/) {
    return absl::InternalError("this round protocol has no updates of its own");
  }
  // Puts what update `p` sent back into the residual (it did not count).
  virtual absl::Status Restore(const edge_client::PendingUpdate& /*p*/) {
    return absl::InternalError("this round protocol has no updates of its own");
  }
  // An update was just encoded into the upload in flight, before it is persisted.
  virtual void OnEncoded() {}

  // Its part of FedAvgClient's slot "fedavg": read from `slot`, or from the legacy
  // fields of a state saved before the slot existed (`slot` null).
  virtual absl::Status Load(const pb::FedAvgClientState* /*slot*/,
                            const edge_client::ClientState& /*state*/) {
    return absl::OkStatus();
  }
  virtual void Save(const edge_client::ClientState& /*state*/,
                    pb::FedAvgClientState* /*slot*/) const {}
};

// The protocols of a FedAvg client, in the order a round asks them whether they run it.
std::vector<std::unique_ptr<ClientProtocol>> MakeClientProtocols(FedAvgClientCore& core);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_CLIENT_PROTOCOL_H_
