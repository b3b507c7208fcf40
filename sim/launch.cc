// Running a coordinator for fedlgc-sim and fedlgc-load (see launch.h).
#include "sim/launch.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "base/file.h"
#include "base/flags.h"
#include "base/str.h"
#include "coordinator/flags.h"
#include "core/preflight.h"
#include "nlohmann/json.hpp"

namespace fedlgc::sim {
namespace {

// Waits for the coordinator's port file; 0 when it exited or never wrote one.
int WaitForPort(sim::ChildProcess& coordinator, const std::string& port_file) {
  for (int i = 0; i < 600; ++i) {
    auto f = fedlgc::ReadFileIfExists(port_file);
    if (f.ok() && f->has_value()) {
      if (const int port = std::atoi((*f)->c_str()); port > 0) return port;
    }
    if (coordinator.Wait(std::chrono::milliseconds(50)) >= 0) return 0;
  }
  return 0;
}

}  // namespace

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

std::string CertsScript() {
  const std::string installed = SelfDir() + "/../share/fedlgc/scripts/gen-certs.sh";
  std::error_code ec;
  if (std::filesystem::exists(installed, ec)) return installed;
  return std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh";
}

std::string PythonPackageDir(const std::string& bin_dir) {
  const std::string installed = bin_dir + "/../" FEDLGC_INSTALL_PYTHONDIR;
  std::error_code ec;
  if (std::filesystem::exists(installed + "/fedlgc/sim.py", ec)) return installed;
  return bin_dir + "/../python";
}

void AddJobFlags(CLI::App& app, coordinator::CoordinatorOptions* co, modes::ModeOptions* mo) {
  coordinator::AddJobFlags(app, co);
  coordinator::AddGuardFlags(app, co);
  coordinator::AddExportFlags(app, co);
  coordinator::AddEvaluationFlags(app, co);
  modes::AddModeFlags(app, mo);
}

absl::Status PrepareRunDir(const std::string& prefix, std::string* run_dir) {
  if (run_dir->empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", prefix, "-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("cannot make a run folder");
    *run_dir = tmpl;
  }
  std::error_code ec;
  std::filesystem::create_directories(*run_dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot make ", *run_dir, ": ", ec.message()));
  return absl::OkStatus();
}

std::vector<std::string> RemoveWorkingFiles(const std::string& run_dir,
                                            const std::vector<std::string>& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(run_dir, ec);
  std::set<fs::path> kept_paths;
  for (const std::string& k : keep) {
    if (k.empty()) continue;
    const fs::path p = fs::weakly_canonical(k, ec);
    if (p.parent_path() == dir) kept_paths.insert(p);
  }
  std::vector<std::string> kept;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (kept_paths.count(e.path()) > 0) {
      kept.push_back(e.path().filename().string());
      continue;
    }
    fs::remove_all(e.path(), ec);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

void CheckRunFiles(const std::string& run_dir, const std::string& bin_dir,
                   const std::vector<std::string>& tools, const std::string& certs_script,
                   bool insecure, core::Preflight* p) {
  if (run_dir.empty()) {
    p->Report("run folder", absl::StatusOr<std::string>(
                                "a new folder under $TMPDIR (or /tmp); its working files are "
                                "removed after a run that succeeds"));
  } else {
    p->Report("run folder", core::CheckWritableFolder(run_dir));
  }
  for (const std::string& tool : tools) {
    const std::string path = StrCat(bin_dir, "/", tool);
    p->Report(tool,
              ::access(path.c_str(), X_OK) == 0
                  ? absl::StatusOr<std::string>(path)
                  : absl::NotFoundError(StrCat(path, ": not an executable here (--bin-dir)")));
  }
  if (insecure) {
    p->Skip("certificates", "none: plaintext (--insecure)");
  } else {
    p->Report("certificates",
              ::access(certs_script.c_str(), R_OK) == 0
                  ? absl::StatusOr<std::string>(StrCat("made for the run by ", certs_script))
                  : absl::NotFoundError(StrCat(certs_script, ": not found (--certs-script)")));
  }
}

std::string CoordinatorConfig(coordinator::CoordinatorOptions co, modes::ModeOptions mo) {
  CLI::App app;
  fedlgc::CaptureDefaults(app);
  coordinator::AddCoordinatorFlags(app, &co);
  modes::AddModeFlags(app, &mo);
  return fedlgc::ConfigText(app);
}

absl::StatusOr<std::unique_ptr<sim::ChildProcess>> StartCoordinator(
    const std::string& bin_dir, const std::string& run_dir,
    const coordinator::CoordinatorOptions& co, const modes::ModeOptions& mo, int* port,
    const std::string& name) {
  const std::string config = StrCat(run_dir, "/", name, ".toml");
  if (absl::Status st = fedlgc::AtomicWriteFile(config, CoordinatorConfig(co, mo)); !st.ok())
    return st;
  const std::string port_file = StrCat(run_dir, "/", name, ".port");
  // A port file left by an earlier run in this folder names a port nobody listens on.
  std::error_code ignored;
  std::filesystem::remove(port_file, ignored);
  const std::string log = StrCat(run_dir, "/", name, ".log");
  auto child = std::make_unique<sim::ChildProcess>(
      std::vector<std::string>{bin_dir + "/fedlgc-coordinator", "--config=" + config,
                               "--port-file=" + port_file},
      log);
  *port = WaitForPort(*child, port_file);
  if (*port == 0) {
    return absl::UnavailableError(StrCat(name == "coordinator" ? "the coordinator" : name,
                                         " did not start:\n", LogTail(log, 5), "(", log, ")"));
  }
  return child;
}

std::string LogTail(const std::string& path, size_t lines) {
  auto f = fedlgc::ReadFileIfExists(path);
  if (!f.ok() || !f->has_value() || (*f)->empty()) return "  (empty)\n";
  std::vector<std::string> all;
  std::istringstream in(**f);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) all.push_back(line);
  }
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out.empty() ? "  (empty)\n" : out;
}

std::vector<RoundReport> NewRounds(const std::string& path, size_t have) {
  std::vector<RoundReport> out;
  auto f = fedlgc::ReadFileIfExists(path);
  if (!f.ok() || !f->has_value()) return out;
  const std::string& text = **f;
  size_t n = 0;
  for (size_t begin = 0, end; (end = text.find('\n', begin)) != std::string::npos;
       begin = end + 1) {
    if (n++ < have) continue;
    auto r = RoundReportFromJson(std::string_view(text).substr(begin, end - begin));
    if (!r.ok()) break;  // a line being written: read it next time
    out.push_back(*std::move(r));
  }
  return out;
}

void TerminalLine::Show(const std::string& line) {
  if (!enabled_ || line == shown_) return;
  std::printf("\r\033[K%s", line.c_str());
  std::fflush(stdout);
  shown_ = line;
}

void TerminalLine::Clear() {
  if (enabled_ && !shown_.empty()) std::printf("\r\033[K");
  shown_.clear();
}

std::string ProgressLine(const nlohmann::json& p) {
  const auto n = [&](const char* k) { return p.value(k, uint64_t{0}); };
  if (p.value("state", "") == "waiting") {
    return StrCat("waiting for clients: ", n("connected"), " of ", n("needed"), " connected (",
                  static_cast<int>(p.value("waiting_seconds", 0.0)), " s)");
  }
  if (p.value("state", "") != "round") return "";
  const uint64_t parts = n("participants"), down = n("downloaded"), up = n("uploaded"),
                 sending = n("uploading");
  const uint64_t training = down > up + sending ? down - up - sending : 0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "round %llu/%llu: %llu/%llu downloaded, %llu training, %llu uploading, %llu/%llu "
                "uploaded | down %.2f MB, up %.2f MB | %.1f s",
                static_cast<unsigned long long>(n("round")),
                static_cast<unsigned long long>(n("rounds")), static_cast<unsigned long long>(down),
                static_cast<unsigned long long>(parts), static_cast<unsigned long long>(training),
                static_cast<unsigned long long>(sending), static_cast<unsigned long long>(up),
                static_cast<unsigned long long>(parts), n("down_bytes") / 1e6, n("up_bytes") / 1e6,
                p.value("round_seconds", 0.0));
  return line;
}

std::string ReadProgressLine(const std::string& coordinator_dir) {
  auto text = fedlgc::ReadFileIfExists(coordinator_dir + "/progress.json");
  if (!text.ok() || !text->has_value()) return "";
  const nlohmann::json p = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  return p.is_object() ? ProgressLine(p) : "";
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace fedlgc::sim
