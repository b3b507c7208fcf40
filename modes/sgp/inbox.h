// SGP: the byte form of a client's mailbox of one round (blob "inbox"), the sum of the
// push-sum shares relayed to it: f64 w, then dim f32 coordinates of x, little-endian.
// The relay encodes it (SgpDriver), the receiver decodes it (SgpClient), here.
#ifndef FEDLGC_MODES_SGP_INBOX_H_
#define FEDLGC_MODES_SGP_INBOX_H_

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/str.h"

namespace fedlgc::modes {

struct Inbox {
  double w = 0;
  std::vector<float> x;
};

// Refuses (in DecodeInbox) another size than dim coordinates and a weight that is not
// finite and > 0.
inline std::string EncodeInbox(double w, std::span<const float> x) {
  std::string bytes(8 + x.size() * 4, '\0');
  std::memcpy(bytes.data(), &w, 8);
  if (!x.empty()) std::memcpy(bytes.data() + 8, x.data(), x.size() * 4);
  return bytes;
}

inline absl::StatusOr<Inbox> DecodeInbox(std::string_view bytes, size_t dim) {
  if (bytes.size() != 8 + dim * 4) {
    return absl::DataLossError(
        StrCat("inbox: ", bytes.size(), " bytes for a weight and ", dim, " floats"));
  }
  Inbox in;
  std::memcpy(&in.w, bytes.data(), 8);
  if (!(in.w > 0) || !std::isfinite(in.w)) {
    return absl::DataLossError(StrCat("inbox weight ", in.w));
  }
  in.x.resize(dim);
  if (dim > 0) std::memcpy(in.x.data(), bytes.data() + 8, dim * 4);
  return in;
}

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_INBOX_H_
