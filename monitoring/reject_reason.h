// Why the coordinator refused a chunk or a request: the label of
// fedlgc_rejected_total{reason} and the reason a hostile-input test asserts. Labels come
// from this enum only, never from an error's text.
#ifndef FEDLGC_MONITORING_REJECT_REASON_H_
#define FEDLGC_MONITORING_REJECT_REASON_H_

#include <string_view>

namespace fedlgc::monitoring {

enum class RejectReason {
  kNone,            // not refused
  kCrc,             // a frame's checksum does not match
  kOversized,       // a frame or message over the limits
  kRange,           // a coordinate range or offset outside the model
  kVersion,         // a frame format or codec wire version this build does not read
  kNonFinite,       // a value, norm, scale or weight that is not finite or out of bounds
  kMalformed,       // bytes that do not parse, or fields that contradict each other
  kCodec,           // a frame of another codec than the round's
  kWrongRound,      // a round that is not open (closed, not yet open, or moved on)
  kNotParticipant,  // a client the round does not take (this) input from
  kDuplicate,       // a chunk already held (idempotent: counted once)
  kUpdateConflict,  // a second update of one client in one round
  kBadChunkIndex,   // a chunk index or count out of range or inconsistent
  kOverlap,         // a chunk whose range overlaps one already held of the same update
  kIdentity,        // no certificate, or a client acting as another
  kProtocol,        // a peer speaking another protocol version
  kQuarantined,     // a client the model guard barred from the job
  kStreams,         // a client (or the coordinator) at its cap of open calls
  kModel,           // a client whose model file is not the one the job trains
  kPart,            // a chunk of an update part the round does not take
};

struct RejectReasonInfo {
  RejectReason reason;
  std::string_view label;
};
inline constexpr RejectReasonInfo kRejectReasons[] = {
    {RejectReason::kCrc, "crc"},
    {RejectReason::kOversized, "oversized"},
    {RejectReason::kRange, "range"},
    {RejectReason::kVersion, "version"},
    {RejectReason::kNonFinite, "nonfinite"},
    {RejectReason::kMalformed, "malformed"},
    {RejectReason::kCodec, "codec"},
    {RejectReason::kWrongRound, "wrong_round"},
    {RejectReason::kNotParticipant, "not_participant"},
    {RejectReason::kDuplicate, "duplicate"},
    {RejectReason::kUpdateConflict, "update_conflict"},
    {RejectReason::kBadChunkIndex, "bad_chunk_index"},
    {RejectReason::kOverlap, "overlap"},
    {RejectReason::kIdentity, "identity"},
    {RejectReason::kProtocol, "protocol"},
    {RejectReason::kQuarantined, "quarantined"},
    {RejectReason::kStreams, "streams"},
    {RejectReason::kModel, "model"},
    {RejectReason::kPart, "part"},
};

// The metric label; "" for kNone.
inline constexpr std::string_view ReasonLabel(RejectReason reason) {
  for (const RejectReasonInfo& r : kRejectReasons) {
    if (r.reason == reason) return r.label;
  }
  return "";
}

}  // namespace fedlgc::monitoring

#endif  // FEDLGC_MONITORING_REJECT_REASON_H_
