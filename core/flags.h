// Command-line flags for fedlgc's binaries: --name=value or --name value, bools as
// --name / --name=false, --help prints the table. Parsing happens only in main().
#ifndef FEDLGC_CORE_FLAGS_H_
#define FEDLGC_CORE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fedlgc::core {

// Not thread-safe; the bound variables must outlive Parse.
class Flags {
 public:
  explicit Flags(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  void Add(const std::string& name, std::string* v, const std::string& help);
  void Add(const std::string& name, bool* v, const std::string& help);
  void Add(const std::string& name, double* v, const std::string& help);
  void Add(const std::string& name, float* v, const std::string& help);
  void Add(const std::string& name, uint32_t* v, const std::string& help);
  void Add(const std::string& name, uint64_t* v, const std::string& help);
  void Add(const std::string& name, int* v, const std::string& help);

  // Fails on an unknown flag, a missing or malformed value. Sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string name, help, def;
    bool is_bool = false;
    std::function<bool(const std::string&)> set;
  };
  void AddFlag(Flag f) { flags_.push_back(std::move(f)); }

  std::string program_, summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_FLAGS_H_
