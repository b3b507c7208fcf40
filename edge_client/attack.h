// A client that lies, for robustness experiments (bench/robustness.sh, the hostile tests):
// --attack changes what local training produced before the mode encodes it, over the real
// protocol and with a valid certificate, as a compromised participant would. With x the
// model the round started from and y the trained one, the update d = y - x becomes
//
//   none                 d
//   scale(factor=100)    factor x d
//   signflip(factor=1)   -factor x d
//   noise(std=1)         Gaussian noise of that standard deviation per coordinate
//
// so every mode sends the changed update (FedAvg and LGC upload it, an LSGD leader its
// model, SGP its share). Not for production: an honest deployment leaves it at none.
#ifndef FEDLGC_EDGE_CLIENT_ATTACK_H_
#define FEDLGC_EDGE_CLIENT_ATTACK_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::edge_client {

struct Attack {
  enum class Kind { kNone, kScale, kSignFlip, kNoise };
  Kind kind = Kind::kNone;
  double factor = 1;  // scale, signflip
  double std = 1;     // noise

  static absl::StatusOr<Attack> Parse(std::string_view spec);
  std::string Spec() const;
  bool active() const { return kind != Kind::kNone; }
  // Rewrites `trained` (y) from `start` (x) as above; `seed` seeds the noise.
  void Apply(std::span<const float> start, std::span<float> trained, uint64_t seed) const;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_ATTACK_H_
