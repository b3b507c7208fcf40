// The links of a population: each client's link (fault_proxy.h LinkSpec) drawn from a
// profile, so that a simulated edge fleet has the spread of a real one, from 0.5 to
// 50 Mbit/s, with clients that come and go.
//
// A profile is a link spec whose values may be distributions, drawn per client:
//   rate=lognormal(median=5mbit,sigma=1),delay=uniform(20ms,200ms),cut=0.02,offline=0.2
//     lognormal(median=M,sigma=S)  M·exp(S·z), z standard normal (S the log's sd)
//     uniform(A,B)                 uniform on [A, B]
//     a plain value                every client alike
// or a CSV trace, one row per client (trace:PATH): a header naming some of
//   client, rate, delay, jitter, cut, join, offline, offline_mean, down
// where `down` lists the client's offline windows as from-to seconds separated by ';'
// ("30-90;200-260"); a client without a row gets the link of the row of client "*", or
// none.
//
// Availability (keys of a link spec): join (the link comes up this long after the start),
// offline (the share of the time after joining that it is down, in stretches whose mean
// length is offline_mean; up and down stretches alternate, exponentially distributed) and
// explicit down windows. While down, the fault proxy cuts what is open and refuses new
// connections (LinkSchedule says when).
#ifndef FEDLGC_SIM_LINK_PROFILE_H_
#define FEDLGC_SIM_LINK_PROFILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/fault_proxy.h"

namespace fedlgc::sim {

// Values of a link spec: "50ms", "0.2s" or "2" (seconds); "10mbit", "500kbit" (bytes per
// second out); "950k", "2m" (bytes). False on anything else or a negative value.
bool ParseDuration(const std::string& text, double* seconds);
bool ParseRate(const std::string& text, double* bytes_per_s);
bool ParseBytes(const std::string& text, uint64_t* bytes);

// When a link is up. Not thread-safe (the proxy's acceptor asks it alone).
class LinkSchedule {
 public:
  LinkSchedule(const LinkSpec& spec, uint64_t seed);
  // Whether the link is up `t` seconds after the start (t never decreasing between calls
  // is cheapest; any t is answered).
  bool Up(double t);
  // Whether the link can ever be down.
  bool ever_down() const { return ever_down_; }

 private:
  void ExtendTo(double t);

  const LinkSpec spec_;
  const bool ever_down_;
  uint64_t state_;                                    // the generator of stretches
  std::vector<std::pair<double, double>> stretches_;  // drawn down stretches, in order
  double drawn_to_ = 0;                               // stretches are known up to here
  bool started_ = false;
  bool next_down_ = false;  // the stretch that starts at drawn_to_
};

class LinkProfile {
 public:
  // A spec with distributions, "trace:PATH", or "" / "none" (no proxy).
  static absl::StatusOr<LinkProfile> Parse(const std::string& text);

  // Client `index`'s link (named `id` in a trace), the same for the same seed.
  LinkSpec Draw(uint32_t index, const std::string& id, uint64_t seed) const;
  // No client's link does anything: the clients need no proxy.
  bool trivial() const;
  const std::string& text() const { return text_; }

 private:
  // One key's value: a constant (b == 0, kind kConstant) or a distribution.
  struct Value {
    enum Kind { kConstant, kUniform, kLogNormal } kind = kConstant;
    double a = 0, b = 0;  // constant: a; uniform: [a, b]; lognormal: median a, sigma b
    double Draw(uint64_t* state) const;
  };
  static absl::StatusOr<LinkProfile> ParseSpec(const std::string& text);
  static absl::StatusOr<LinkProfile> ParseTrace(const std::string& path);

  std::string text_;
  std::map<std::string, Value> values_;    // key -> value, of a spec
  LinkSpec fixed_;                         // what is not drawn (cut_after)
  std::map<std::string, LinkSpec> trace_;  // client id -> link, of a trace
};

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_LINK_PROFILE_H_
