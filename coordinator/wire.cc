// Messages as gRPC byte buffers (see wire.h).
#include "coordinator/wire.h"

#include <grpcpp/support/slice.h>

#include <string>
#include <vector>

#include "base/str.h"

namespace fedlgc::coordinator {

absl::Status ParseMessage(const grpc::ByteBuffer& in, uint64_t max_bytes,
                          google::protobuf::MessageLite* m) {
  const size_t n = in.Length();
  if (n > max_bytes) {
    return absl::ResourceExhaustedError(StrCat("a ", m->GetTypeName(), " of ", n,
                                               " bytes; the limit is ", max_bytes,
                                               " (--max-message-bytes)"));
  }
  std::vector<grpc::Slice> slices;
  bool parsed = false;
  if (in.Valid() && in.Dump(&slices).ok()) {
    if (slices.size() == 1) {
      parsed = m->ParseFromArray(slices[0].begin(), static_cast<int>(slices[0].size()));
    } else {
      std::string bytes;
      bytes.reserve(n);
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      parsed = m->ParseFromString(bytes);
    }
  }
  if (!parsed) {
    return absl::InvalidArgumentError(
        StrCat(n, " bytes that are not a ", m->GetTypeName(), " message"));
  }
  return absl::OkStatus();
}

void SerializeMessage(const google::protobuf::MessageLite& m, grpc::ByteBuffer* out) {
  const grpc::Slice slice(m.SerializeAsString());
  *out = grpc::ByteBuffer(&slice, 1);
}

}  // namespace fedlgc::coordinator
