// Messages as gRPC byte buffers. The coordinator's calls read and write raw bytes (raw
// callback methods) so that bytes that are not a message get INVALID_ARGUMENT and a count,
// and a message over --max-message-bytes RESOURCE_EXHAUSTED and a count, on every call,
// instead of gRPC's own answers (UNIMPLEMENTED for a unary call, the end of the stream
// for a streaming one). Internal to coordinator/.
#ifndef FEDLGC_COORDINATOR_WIRE_H_
#define FEDLGC_COORDINATOR_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace fedlgc::coordinator {

// Parses `in` into *m: RESOURCE_EXHAUSTED over `max_bytes`, INVALID_ARGUMENT for bytes
// that are not such a message (tagged malformed).
absl::Status ParseMessage(const grpc::ByteBuffer& in, uint64_t max_bytes,
                          google::protobuf::MessageLite* m);
// *out = the serialized message; a valid buffer even when the message is empty.
void SerializeMessage(const google::protobuf::MessageLite& m, grpc::ByteBuffer* out);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_WIRE_H_
