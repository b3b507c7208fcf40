// The edge client's one conversion from grpc::Status to absl::Status.
#ifndef FEDLGC_EDGE_CLIENT_GRPC_STATUS_H_
#define FEDLGC_EDGE_CLIENT_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string_view>

#include "absl/status/status.h"
#include "base/str.h"

namespace fedlgc::edge_client {

// The codes are numbered alike; `what` names the call in the message.
inline absl::Status FromGrpc(const grpc::Status& st, std::string_view what) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      StrCat(what, ": ", st.error_message()));
}

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_GRPC_STATUS_H_
