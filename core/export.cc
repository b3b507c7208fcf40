// The exported model's files (see export.h).
#include "core/export.h"

#include <unistd.h>

#include <filesystem>

#include "base/file.h"
#include "base/str.h"

namespace fedlgc::core {

namespace fs = std::filesystem;

absl::StatusOr<ExportFiles> ExportFiles::For(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("--export: an empty path");
  fs::path p(path);
  const std::string ext = p.extension().string();
  if (ext == ".npz" || ext == ".json") {
    return absl::InvalidArgumentError(
        StrCat("--export ", path,
               ": name the TorchScript file (model.pt); the .npz and .json "
               "files are written beside it"));
  }
  std::error_code ec;
  if (path.back() == '/' || fs::is_directory(p, ec)) {
    return absl::InvalidArgumentError(
        StrCat("--export ", path, ": a folder; name the file, e.g. ", (p / "model.pt").string()));
  }
  ExportFiles f;
  f.pt = ext == ".pt" ? path : path + ".pt";
  f.npz = fs::path(f.pt).replace_extension(".npz").string();
  f.json = fs::path(f.pt).replace_extension(".json").string();
  return f;
}

absl::Status PrepareExport(const ExportFiles& files) {
  const fs::path dir = fs::path(files.pt).parent_path();
  std::error_code ec;
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          StrCat("--export ", files.pt, ": cannot make its folder: ", ec.message()));
    }
  }
  const std::string probe = StrCat(files.pt, ".probe-", ::getpid());
  if (absl::Status st = fedlgc::AtomicWriteFile(probe, "", Durability::kVisible); !st.ok()) {
    return absl::FailedPreconditionError(
        StrCat("--export ", files.pt, ": cannot write there: ", st.message()));
  }
  fs::remove(probe, ec);
  return absl::OkStatus();
}

absl::Status WriteExport(const Model& model, const ExportFiles& files,
                         const std::string& metadata) {
  auto arrays = model.StateArrays();
  if (!arrays.ok()) return arrays.status();
  auto script = model.TorchScriptBytes({{"fedlgc.json", metadata}});
  if (!script.ok()) return script.status();
  if (absl::Status st = WriteNpz(files.npz, *arrays); !st.ok()) return st;
  if (absl::Status st = fedlgc::AtomicWriteFile(files.json, metadata + "\n"); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(files.pt, *script);
}

}  // namespace fedlgc::core
