// Command lines and config files of fedlgc's binaries, through CLI11: --help, --version,
// and --config FILE, a TOML file whose keys are the long flags without their dashes (a
// flag on the command line overrides the file). Each component registers its Options
// with an AddFlags function beside them; flags are parsed only in main().
#ifndef FEDLGC_BASE_FLAGS_H_
#define FEDLGC_BASE_FLAGS_H_

#include <optional>
#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace fedlgc {

// fedlgc's version (the CMake project version).
const char* Version();

// What every fedlgc binary sets for its whole process before it starts work:
// - absl's mutex deadlock detection off. Debian builds abseil with it on (no NDEBUG), and
//   gRPC's own locks are absl mutexes: with thousands of connections the lock graph it
//   keeps costs more CPU than the work (measured with fedlgc-load: docs/scale.md).
// - glibc malloc: up to 64 MiB kept free at the top of a heap (M_TRIM_THRESHOLD), only
//   blocks over 32 MiB mapped on their own (M_MMAP_THRESHOLD), two arenas (M_ARENA_MAX).
//   gRPC reads a stream into slices of up to megabytes and frees them soon after, often
//   on another thread; with glibc's defaults the pages went back to the kernel and were
//   faulted in again, read after read, and gRPC over mTLS moved 15% of what raw TLS
//   moves (fedlgc-bench-transport; more arenas brought the faults back in some runs, and
//   a lower mmap threshold made libtorch fault in its activations on every forward pass).
//   A GLIBC_TUNABLES that names a glibc.malloc setting, or one of glibc's MALLOC_ARENA_MAX,
//   MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, leaves malloc as the
//   operator set it.
void InitProcess();

// Sets up --config (unknown keys in the file are errors), --version, --log-level and
// --print-config on `app`, and CaptureDefaults.
void AddCommonFlags(CLI::App& app);
// Options added to `app` from now on show (in --help) and write (in ConfigText) the
// values of their variables at the time they are added.
void CaptureDefaults(CLI::App& app);
// Parses the command line: nullopt to go on, or the exit code when main should return now
// (after --help, --version or --print-config, or an error it printed).
std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv);
// A boolean flag bound to *v, every one the same way: --name sets it, --no-name clears it,
// --name=false too; its default shows and is written by ConfigText (CLI11 2.1 captures no
// default for flags). `names`: "--name" (the --no- form is added), or names as for
// CLI::App::add_flag.
CLI::Option* AddBoolFlag(CLI::App& app, const std::string& names, bool* v, const std::string& help);
// --check (core/preflight.h): sets *check; not a --config key and not in ConfigText.
void AddCheckFlag(CLI::App& app, bool* check);
// A flag renamed, its old name hidden from --help and --print-config. Without `still_sets`
// the old name (on the command line or as a --config key) fails with "OLD is now NEW
// (CHANGELOG.md)" instead of the unknown-flag error, for a name whose meaning changed
// (fedlgc-edge --clients, a list, is not fedlgc-sim's count). With it, the old name still
// sets that value and logs a warning saying the new name.
void AddRenamedFlag(CLI::App& app, const std::string& old_name, const std::string& new_name,
                    std::string* still_sets = nullptr);
// --label-column and --targets, how a data set's labels are read (core/dataset.h);
// `what` names the data they apply to in the help.
void AddLabelFlags(CLI::App& app, const std::string& what, std::string* label_column,
                   std::string* targets);
// A config file holding the value of every option of `app` and its option groups (added
// after CaptureDefaults, flags with AddBoolFlag), which --config reads back as the same
// options.
std::string ConfigText(const CLI::App& app);
// ConfigText of the values the options hold now, once parsed: the command line over
// --config over the defaults (--print-config prints it). Each option's default shown
// becomes its value.
std::string EffectiveConfigText(CLI::App& app);

}  // namespace fedlgc

#endif  // FEDLGC_BASE_FLAGS_H_
