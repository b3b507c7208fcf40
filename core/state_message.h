// State files whose body is a protobuf message: the file keeps its envelope (magic,
// version, for a round's state the round, then the CRC32C of it all; atomic_file.h) and the
// message's bytes run from the header to the CRC. Fields are tagged, so a field added
// later is one more field, not one more version; float vectors travel as bytes fields of
// little-endian float32 (core/float_bytes.h). A message is at most 2 GiB (protobuf's
// limit): a state that would pass it is refused when written, with the sizes.
#ifndef FEDLGC_CORE_STATE_MESSAGE_H_
#define FEDLGC_CORE_STATE_MESSAGE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"
#include "core/state_file.h"

namespace google::protobuf {
class MessageLite;
}

namespace fedlgc::core {

// `message`'s bytes. INVALID_ARGUMENT, naming `what` and the size, past 2 GiB (protobuf
// would write nothing).
absl::StatusOr<std::string> SerializeMessage(const google::protobuf::MessageLite& message,
                                             std::string_view what);
// Appends `message` as the rest of the body. INVALID_ARGUMENT, naming `what`, past 2 GiB.
absl::Status AppendMessage(const google::protobuf::MessageLite& message, StateWriter* w,
                           std::string_view what);
// Writes `message` as the state of `round`, <dir>/<prefix>-<round>.bin (magic, version,
// round; SaveRoundState's pruning of older rounds' files).
absl::Status SaveRoundMessage(const std::string& dir, std::string_view prefix, uint64_t round,
                              uint32_t magic, uint32_t version,
                              const google::protobuf::MessageLite& message);
// Parses the rest of the body into `message`. DATA_LOSS, naming `what`, when it does not
// parse.
absl::Status ParseMessage(StateReader& r, google::protobuf::MessageLite* message,
                          std::string_view what);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_STATE_MESSAGE_H_
