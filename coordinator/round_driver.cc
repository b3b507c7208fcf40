// Defaults of the RoundDriver interface (see round_driver.h).
#include "coordinator/round_driver.h"

#include "codecs/str.h"

namespace fedlgc::coordinator {

absl::StatusOr<std::shared_ptr<const ModelBlob>> RoundDriver::Blob(const std::string&,
                                                                   const std::string& name,
                                                                   uint64_t) {
  return absl::InvalidArgumentError(
      StrCat("unknown blob '", name, "' (mode ", ModeName(mode()), ")"));
}

absl::Status RoundDriver::AcceptReport(const std::string&, const protos::ProgressReport&) {
  return absl::FailedPreconditionError(
      StrCat("this job (mode ", ModeName(mode()), ") takes no progress reports"));
}

}  // namespace fedlgc::coordinator
