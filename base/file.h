// Durable whole-file writes (write a temporary, fsync, rename, fsync the folder) and whole
// file reads. After a crash a file written with AtomicWriteFile holds either its old or its
// new contents, never a mix.
#ifndef FEDLGC_BASE_FILE_H_
#define FEDLGC_BASE_FILE_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc {

// kDurable: synced to disk before and after the rename. kVisible: readers see the old or
// the new contents, never a mix, but a crash may lose the write (files that say what is
// happening now, rewritten often).
enum class Durability { kDurable, kVisible };

// Replaces `path` with `bytes` atomically: after a crash the file holds either the old or
// the new contents, never a mix. Creates the parent folder if needed.
absl::Status AtomicWriteFile(const std::string& path, std::string_view bytes,
                             Durability durability = Durability::kDurable);
// The whole file; nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path);
// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace fedlgc

#endif  // FEDLGC_BASE_FILE_H_
