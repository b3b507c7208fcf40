// The model a job hands over (docs/your-model.md, "The trained model"): three files that
// need nothing of fedlgc to read.
//   model.pt    TorchScript (Model::TorchScriptBytes): torch.jit.load(path) in plain
//               PyTorch, on the CPU, in eval mode; the job's own module with the committed
//               weights, or a built-in scripted. Its extra file "fedlgc.json" is model.json.
//   model.npz   every parameter and buffer by its state_dict() name (numpy.load), for tools
//               without TorchScript.
//   model.json  what the files hold: the job, the round, its evaluation.
// Each is replaced atomically (base/file.h): a reader never sees half a file, though for a
// moment the three may hold neighbouring rounds (each says its round).
#ifndef FEDLGC_CORE_EXPORT_H_
#define FEDLGC_CORE_EXPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/model.h"

namespace fedlgc::core {

struct ExportFiles {
  std::string pt, npz, json;

  // From the TorchScript file's path: "out/model.pt" gives out/model.npz and
  // out/model.json beside it ("out/model" the same with .pt added). A path ending in .npz
  // or .json, or naming a folder, is INVALID_ARGUMENT.
  static absl::StatusOr<ExportFiles> For(const std::string& path);
};

// Whether the files can be written: makes their folder and writes and removes a probe
// there. The error names the path and what failed, before a job starts.
absl::Status PrepareExport(const ExportFiles& files);

// Writes `model` with its current weights. `metadata`: a JSON object's text, stored as
// model.json and inside model.pt.
absl::Status WriteExport(const Model& model, const ExportFiles& files, const std::string& metadata);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_EXPORT_H_
