// Input error tags (see input_error.h).
#include "codecs/input_error.h"

#include "absl/strings/cord.h"

namespace fedlgc::codecs {
namespace {

// Debian's abseil has its own string_view: URLs and tags cross as absl::string_view.
constexpr absl::string_view kPayloadUrl = "type.fedlgc.dev/codecs.InputError";

absl::string_view TagOf(InputError kind) {
  switch (kind) {
    case InputError::kNonFinite:
      return "nonfinite";
    case InputError::kWrongCodec:
      return "codec";
    case InputError::kMalformed:
      break;
  }
  return "malformed";
}

}  // namespace

absl::Status InputErrorStatus(InputError kind, std::string_view message) {
  absl::Status st = absl::InvalidArgumentError(std::string(message));
  st.SetPayload(kPayloadUrl, absl::Cord(TagOf(kind)));
  return st;
}

InputError InputErrorOf(const absl::Status& status) {
  if (!absl::IsInvalidArgument(status)) return InputError::kMalformed;
  const auto tag = status.GetPayload(kPayloadUrl);
  if (!tag) return InputError::kMalformed;
  for (InputError kind : {InputError::kNonFinite, InputError::kWrongCodec}) {
    if (*tag == TagOf(kind)) return kind;
  }
  return InputError::kMalformed;
}

}  // namespace fedlgc::codecs
