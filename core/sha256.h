// SHA-256 (OpenSSL) of bytes and of files, as lowercase hex: how the coordinator names the
// model file it serves and how a client tells whether the file it holds is that one.
#ifndef FEDLGC_CORE_SHA256_H_
#define FEDLGC_CORE_SHA256_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::core {

std::string Sha256Hex(std::string_view bytes);
// NOT_FOUND naming the path when it cannot be read.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_SHA256_H_
