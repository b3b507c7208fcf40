// What a mode keeps about the update in flight beside ClientState::pending (two-phase
// PowerSGD's phase and factor, LGC's stage, support and values). It belongs to the update
// whose id it was made for: once the pending update is another or none (its receipt came,
// the edge client gave up an update made for another job) it is nothing. The mode saves it
// in its slot with the update id and sets it again at LoadState.
#ifndef FEDLGC_MODES_IN_FLIGHT_H_
#define FEDLGC_MODES_IN_FLIGHT_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "edge_client/client_state.h"

namespace fedlgc::modes {

template <typename T>
class InFlight {
 public:
  // The fields of `state`'s pending update; nullptr when they are another update's.
  T* Of(const edge_client::ClientState& state) {
    return value_ && state.pending && state.pending->update_id == update_id_ ? &*value_ : nullptr;
  }
  const T* Of(const edge_client::ClientState& state) const {
    return const_cast<InFlight*>(this)->Of(state);
  }
  // `value` belongs to the update of `update_id`.
  void Set(uint64_t update_id, T value) {
    update_id_ = update_id;
    value_ = std::move(value);
  }
  // The update was given a new id (it replaces the one the coordinator holds).
  void Rebind(uint64_t update_id) { update_id_ = update_id; }
  void Clear() { value_.reset(); }
  // For the mode's slot: the value held, whoever's it is, and its update's id.
  const std::optional<T>& held() const { return value_; }
  uint64_t update_id() const { return update_id_; }

 private:
  uint64_t update_id_ = 0;
  std::optional<T> value_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_IN_FLIGHT_H_
