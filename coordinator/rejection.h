// A refusal of what a client sent: the status the client gets and the reason the metric
// counts (monitoring/reject_reason.h). The reason of a frame that failed to parse or
// decode comes from its status code and its codecs::InputError tag, never its text.
#ifndef FEDLGC_COORDINATOR_REJECTION_H_
#define FEDLGC_COORDINATOR_REJECTION_H_

#include <utility>

#include "absl/status/status.h"
#include "codecs/input_error.h"
#include "monitoring/reject_reason.h"

namespace fedlgc::coordinator {

using monitoring::RejectReason;

struct Rejection {
  RejectReason reason = RejectReason::kMalformed;
  absl::Status status;
};

// The reason of a frame, payload or message that failed to parse, validate or decode.
inline RejectReason ReasonOf(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kDataLoss:
      return RejectReason::kCrc;
    case absl::StatusCode::kResourceExhausted:
      return RejectReason::kOversized;
    case absl::StatusCode::kOutOfRange:
      return RejectReason::kRange;
    case absl::StatusCode::kUnimplemented:
      return RejectReason::kVersion;
    case absl::StatusCode::kFailedPrecondition:  // made against state the round moved past
      return RejectReason::kWrongRound;
    default:
      break;
  }
  switch (codecs::InputErrorOf(st)) {
    case codecs::InputError::kNonFinite:
      return RejectReason::kNonFinite;
    case codecs::InputError::kWrongCodec:
      return RejectReason::kCodec;
    case codecs::InputError::kMalformed:
      break;
  }
  return RejectReason::kMalformed;
}

inline Rejection Reject(RejectReason reason, absl::Status st) {
  return Rejection{reason, std::move(st)};
}
// A status that failed to parse or decode, with the reason its code and tag give.
inline Rejection RejectStatus(absl::Status st) {
  const RejectReason reason = ReasonOf(st);
  return Rejection{reason, std::move(st)};
}

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_REJECTION_H_
