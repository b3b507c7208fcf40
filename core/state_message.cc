// Protobuf bodies of state files (see state_message.h).
#include "core/state_message.h"

#include <climits>
#include <string>

#include "base/str.h"
#include "google/protobuf/message_lite.h"

namespace fedlgc::core {

absl::StatusOr<std::string> SerializeMessage(const google::protobuf::MessageLite& message,
                                             std::string_view what) {
  const size_t size = message.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        StrCat(what, ": a state of ", size, " bytes passes protobuf's 2 GiB limit on a message"));
  }
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InternalError(StrCat(what, ": the state did not serialize"));
  }
  return bytes;
}

absl::Status AppendMessage(const google::protobuf::MessageLite& message, StateWriter* w,
                           std::string_view what) {
  auto bytes = SerializeMessage(message, what);
  if (!bytes.ok()) return bytes.status();
  w->Tail(*bytes);
  return absl::OkStatus();
}

absl::Status SaveRoundMessage(const std::string& dir, std::string_view prefix, uint64_t round,
                              uint32_t magic, uint32_t version,
                              const google::protobuf::MessageLite& message) {
  StateWriter w = BeginRoundState(magic, version, round);
  if (absl::Status st = AppendMessage(message, &w, RoundStatePath(dir, prefix, round)); !st.ok())
    return st;
  return SaveRoundState(dir, prefix, round, w.Finish());
}

absl::Status ParseMessage(StateReader& r, google::protobuf::MessageLite* message,
                          std::string_view what) {
  const std::string_view body = r.Rest();
  if (body.size() > static_cast<size_t>(INT_MAX) ||
      !message->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::DataLossError(StrCat(what, ": the state does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::core
