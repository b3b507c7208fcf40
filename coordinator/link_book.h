// What the coordinator has measured of each client's link: its downlink rate (from whole
// model downloads), its uplink rate (from uploads) and how long it was busy before its
// upload began (download and training, from being asked to its first chunk). The codec
// ladder (codec_ladder.h) reads it to pick each participant's codec; the round report
// carries the rates (per_client uplink_bps and downlink_bps).
//
// Thread-safe: the service's reactors record, the round engine reads.
#ifndef FEDLGC_COORDINATOR_LINK_BOOK_H_
#define FEDLGC_COORDINATOR_LINK_BOOK_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fedlgc::coordinator {

// One client's link as measured; 0: not measured yet. A rate falls at once to a slower
// measurement (a link that dropped is planned for in the next round) and climbs halfway to
// a faster one; the busy time is half the last, half what was known.
struct LinkEstimate {
  double down_bps = 0;      // bytes per second
  // The downlink rate averaged both ways (half the last measurement, half what was known):
  // steadier than down_bps, for choices that should not follow every dip (LGC's leader).
  double down_bps_mean = 0;
  double up_bps = 0;        // bytes per second
  double busy_seconds = 0;  // from being asked to the first byte of its upload
  bool busy_known = false;

  // The uplink rate to plan with: the slower of the two directions measured (a link that
  // dropped shows in the download that starts the next round, before any upload), or the
  // one that is.
  double PlanningUpBps() const {
    if (up_bps > 0 && down_bps > 0) return std::min(up_bps, down_bps);
    return std::max(up_bps, down_bps);
  }
};

class LinkBook {
 public:
  // Fewer bytes than this measure latency more than rate, and measure nothing.
  static constexpr uint64_t kMinMeasured = 32 * 1024;

  // A whole model download of `bytes` took `seconds`.
  void RecordDownload(const std::string& client, uint64_t bytes, double seconds);
  // An upload call carried `bytes` in `seconds` (timed between chunk arrivals, so that
  // the link's delay does not count), whole or cut.
  void RecordUpload(const std::string& client, uint64_t bytes, double seconds);
  // An upload still going has carried `bytes` in `seconds` so far: lowers the uplink
  // estimate when that is slower (a link that drops mid-upload is known before its round
  // ends), never raises it. Needs 4 x kMinMeasured.
  void NoteUploadSoFar(const std::string& client, uint64_t bytes, double seconds);
  // The client began its upload `seconds` after it was asked.
  void RecordBusy(const std::string& client, double seconds);
  // What is known of `client` (every figure 0 when nothing is).
  LinkEstimate Estimate(const std::string& client) const;
  // A client of this population that nothing has measured yet, as the measured ones go:
  // the planning rate three in four of them reach (the 25th percentile) as its uplink, and
  // their median busy time. Every figure 0 when no client is measured.
  LinkEstimate Typical() const;
  // Every client measured so far.
  std::map<std::string, LinkEstimate> All() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, LinkEstimate> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_LINK_BOOK_H_
