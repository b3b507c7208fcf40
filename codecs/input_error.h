// The kinds of bad input a decoder tells apart, carried in the absl::Status it returns so
// that a receiver can count a refusal by kind without reading the message. The status
// code says most of it (DATA_LOSS: checksum, RESOURCE_EXHAUSTED: over a limit,
// OUT_OF_RANGE: a range outside the vector, UNIMPLEMENTED: a version this build does not
// read); INVALID_ARGUMENT is split further by a payload:
//   kMalformed   bytes that do not parse or contradict themselves (no payload)
//   kNonFinite   a value, norm or scale that is not finite or out of its bounds
//   kWrongCodec  a frame of another codec than the receiver expects
#ifndef FEDLGC_CODECS_INPUT_ERROR_H_
#define FEDLGC_CODECS_INPUT_ERROR_H_

#include <string_view>

#include "absl/status/status.h"

namespace fedlgc::codecs {

enum class InputError { kMalformed, kNonFinite, kWrongCodec };

// INVALID_ARGUMENT with `message`, tagged with `kind`.
absl::Status InputErrorStatus(InputError kind, std::string_view message);
inline absl::Status NonFiniteError(std::string_view message) {
  return InputErrorStatus(InputError::kNonFinite, message);
}
inline absl::Status WrongCodecError(std::string_view message) {
  return InputErrorStatus(InputError::kWrongCodec, message);
}
// The tag of an INVALID_ARGUMENT status; kMalformed when it has none.
InputError InputErrorOf(const absl::Status& status);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_INPUT_ERROR_H_
