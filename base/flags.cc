// CLI11 setup shared by fedlgc's binaries (see cli.h).
#include "base/flags.h"

#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/log.h"

namespace fedlgc {

const char* Version() { return FEDLGC_VERSION; }

void AddCommonFlags(CLI::App& app) {
  app.set_config("--config", "", "read options from this TOML file (keys: the long flags)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", std::string(app.get_name()) + " " + Version() + "\n");
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& name) {
           absl::StatusOr<log::Level> level = log::ParseLevel(name);
           if (!level.ok())
             throw CLI::ValidationError("--log-level", std::string(level.status().message()));
           log::SetLevel(*level);
         },
         "messages on stderr at this level and above: debug, info, warning, error")
      ->default_str(std::string(log::LevelName(log::GetLevel())))
      ->default_function([] { return std::string(log::LevelName(log::GetLevel())); });
  const std::string print_help =
      "print the configuration these flags and --config give, as a TOML file that --config "
      "reads back, and exit";
  app.add_flag("--print-config", print_help)->configurable(false);
  CaptureDefaults(app);
  // A flag given twice takes its last value, as with most command lines.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void CaptureDefaults(CLI::App& app) { app.option_defaults()->always_capture_default(); }

void InitProcess() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Malloc as the operator set it, through tunables or glibc's older variables.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  for (const char* v : {"MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                        "MALLOC_TOP_PAD_"}) {
    if (std::getenv(v) != nullptr) return;
  }
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 64 << 20) != 1 ||
      mallopt(M_ARENA_MAX, 2) != 1) {
    log::Warning("", "mallopt refused fedlgc's malloc settings");
  }
}

std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv) {
  // CLI11 reads "--name=" as "--name" and takes the next argument as its value; it means an
  // empty value (e.g. --metrics-listen= disables the exposer), so it goes in as "--name" "".
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11 takes the arguments last first
    const std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      args.push_back("");
      args.push_back(a.substr(0, a.size() - 1));
    } else {
      args.push_back(a);
    }
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const CLI::Option* print = app.get_option_no_throw("--print-config");
  if (print != nullptr && print->count() > 0) {
    std::fputs(EffectiveConfigText(app).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

CLI::Option* AddBoolFlag(CLI::App& app, const std::string& names, bool* v,
                         const std::string& help) {
  // Every boolean one way: --x sets it, --no-x clears it (and --x=false still works).
  std::string all = names;
  if (names.find('!') == std::string::npos && names.rfind("--", 0) == 0 &&
      names.find(',') == std::string::npos) {
    all += ",!--no-" + names.substr(2);
  }
  return app.add_flag(all, *v, help)->default_str(*v ? "true" : "false")->default_function([v] {
    return std::string(*v ? "true" : "false");
  });
}

void AddCheckFlag(CLI::App& app, bool* check) {
  app.add_flag("--check", *check,
               "check what this configuration would use (files, model, data, codecs, state, "
               "export path, certificates, addresses), one line each, and exit: 0 when all "
               "is usable; nothing is written, listened on or dialled")
      ->configurable(false);
}

void AddRenamedFlag(CLI::App& app, const std::string& old_name, const std::string& new_name,
                    std::string* still_sets) {
  if (still_sets != nullptr) {
    app.add_option(old_name, *still_sets)
        ->group("")
        ->each([old_name, new_name](const std::string&) {
          log::Warning("flags", "%s is now %s (CHANGELOG.md); the old name will go",
                       old_name.c_str(), new_name.c_str());
        });
    return;
  }
  if (old_name.rfind("--no-", 0) == 0) {  // a flag that takes no value
    app.add_flag_callback(old_name,
                          [old_name, new_name] {
                            throw CLI::ValidationError(old_name,
                                                       "is now " + new_name + " (CHANGELOG.md)");
                          })
        ->group("");
    return;
  }
  app.add_option(old_name)->group("")->expected(0, 1)->allow_extra_args(false)->each(
      [old_name, new_name](const std::string&) {
        throw CLI::ValidationError(old_name, "is now " + new_name + " (CHANGELOG.md)");
      });
}

namespace {

void AppendOptions(const CLI::App& app, std::string* out) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_lnames().empty()) continue;
    const std::string& name = o->get_lnames().front();
    if (name == "help" || name == "config" || name == "version" || name == "print-config" ||
        name == "check" || o->get_group().empty()) {  // hidden: a renamed flag's old name
      continue;
    }
    std::string value = o->get_default_str();
    if (o->get_type_name() == "TEXT" || value.empty()) {
      // A TOML literal string (no escapes) unless the value holds a single quote.
      value = value.find('\'') == std::string::npos ? "'" + value + "'" : "\"" + value + "\"";
    }
    *out += name + "=" + value + "\n";
  }
  for (const CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; })) {
    AppendOptions(*group, out);
  }
}

// Each option's default, as ConfigText writes it, becomes its value now.
void CaptureValues(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) o->capture_default_str();
  for (CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; })) {
    CaptureValues(*group);
  }
}

}  // namespace

std::string ConfigText(const CLI::App& app) {
  std::string out;
  AppendOptions(app, &out);
  return out;
}

std::string EffectiveConfigText(CLI::App& app) {
  CaptureValues(app);
  return ConfigText(app);
}

void AddLabelFlags(CLI::App& app, const std::string& what, std::string* label_column,
                   std::string* targets) {
  app.add_option("--label-column", *label_column, "the label column of a csv: " + what);
  app.add_option("--targets", *targets,
                 "how the labels of " + what +
                     " are read: auto (whole numbers are classes, other numbers float "
                     "targets), classes or values");
}

}  // namespace fedlgc
