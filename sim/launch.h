// What fedlgc-sim and fedlgc-load share to run a coordinator of their own: where the
// binaries are, the coordinator's config file from its options, its start (waiting for
// its port file), the tail of a log, and rounds.jsonl as it grows.
#ifndef FEDLGC_SIM_LAUNCH_H_
#define FEDLGC_SIM_LAUNCH_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}
#include "coordinator/options.h"
#include "core/round_report.h"
#include "modes/mode_options.h"
#include "nlohmann/json_fwd.hpp"
#include "sim/process.h"

namespace fedlgc::core {
class Preflight;
}  // namespace fedlgc::core

namespace fedlgc::sim {

// The folder of the running executable ("." when it cannot be read).
std::string SelfDir();
// Files beside these binaries, in a build tree (build/bin) or an install (P/bin):
// scripts/gen-certs.sh, installed as P/share/fedlgc/scripts/gen-certs.sh; and the folder
// holding the Python package fedlgc/, build/python or P/lib/python3.X/dist-packages.
std::string CertsScript();
std::string PythonPackageDir(const std::string& bin_dir);

// The flags of the job a tool runs on a coordinator of its own: job, model guard and
// modes (the coordinator's own, coordinator/flags.h and modes/mode_options.h).
void AddJobFlags(CLI::App& app, coordinator::CoordinatorOptions* co, modes::ModeOptions* mo);

// `*run_dir`, or a new folder $TMPDIR/PREFIX-XXXXXX (/tmp without TMPDIR) when it is
// empty; made if missing.
absl::Status PrepareRunDir(const std::string& prefix, std::string* run_dir);

// After a run that succeeded in a folder PrepareRunDir made (no --run-dir): removes what
// the run worked with (state folders, certificates, configs, logs) and keeps the files of
// `keep` that lie in it (the report, the exported model, ...). Returns the kept files'
// names.
std::vector<std::string> RemoveWorkingFiles(const std::string& run_dir,
                                            const std::vector<std::string>& keep);

// --check's lines of a run that starts processes (fedlgc-sim, fedlgc-load): its folder
// (`run_dir`; empty: a temporary one), the `tools` of `bin_dir` it starts, and the
// certificate script unless `insecure`.
void CheckRunFiles(const std::string& run_dir, const std::string& bin_dir,
                   const std::vector<std::string>& tools, const std::string& certs_script,
                   bool insecure, core::Preflight* check);

// The coordinator's config file: every job, service and mode option.
std::string CoordinatorConfig(coordinator::CoordinatorOptions co, modes::ModeOptions mo);

// A coordinator of `bin_dir` with the config `co`/`mo` written to RUN_DIR/NAME.toml,
// logging to RUN_DIR/NAME.log; *port is the port it listens on once it wrote its port
// file. UNAVAILABLE with the log's tail when it exited first.
absl::StatusOr<std::unique_ptr<sim::ChildProcess>> StartCoordinator(
    const std::string& bin_dir, const std::string& run_dir,
    const coordinator::CoordinatorOptions& co, const modes::ModeOptions& mo, int* port,
    const std::string& name = "coordinator");

// The last `lines` lines of a log, each indented; "(empty)" when there are none.
std::string LogTail(const std::string& path, size_t lines);

// The complete lines of rounds.jsonl past the first `have`.
std::vector<RoundReport> NewRounds(const std::string& path, size_t have);

// One line kept up to date on a terminal (carriage return, erase line); does nothing when
// not enabled (output that is not a terminal gets plain lines only).
class TerminalLine {
 public:
  explicit TerminalLine(bool enabled) : enabled_(enabled) {}
  // Replaces the line when it changed ("" clears it).
  void Show(const std::string& line);
  // Erases the line before other output.
  void Clear();

 private:
  const bool enabled_;
  std::string shown_;
};

// One line of what a coordinator is doing, from its progress.json (coordinator/progress.h):
// the open round's downloads, training, uploads and bytes, or the clients connected while
// it waits; "" in other states.
std::string ProgressLine(const nlohmann::json& progress);
// ProgressLine of the progress.json in `coordinator_dir`; "" while it is missing or being
// replaced.
std::string ReadProgressLine(const std::string& coordinator_dir);

// The median (the upper one of an even count); -1 when empty.
double Median(std::vector<double> v);

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_LAUNCH_H_
