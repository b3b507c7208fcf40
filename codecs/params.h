// Reads and validates a codec's parameters from its SpecNode, with messages that name
// the codec, the parameter and the accepted range.
#ifndef FEDLGC_CODECS_PARAMS_H_
#define FEDLGC_CODECS_PARAMS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/spec.h"

namespace fedlgc::codecs {

// Not thread-safe; lives for one factory call. `node` must outlive the reader.
class ParamReader {
 public:
  // `known` lists every key the codec accepts; `positional` how many bare values it takes.
  ParamReader(const SpecNode& node, std::initializer_list<std::string_view> known,
              int positional = 0);

  // Unknown keys, duplicate keys or too many positional values.
  absl::Status status() const { return status_; }

  absl::StatusOr<int64_t> Int(std::string_view key, int64_t def, int64_t lo, int64_t hi) const;
  absl::StatusOr<double> Real(std::string_view key, double def, double lo, double hi) const;
  absl::StatusOr<bool> Flag(std::string_view key, bool def) const;
  // A bare word among `choices`.
  absl::StatusOr<std::string> Word(std::string_view key, std::string_view def,
                                   std::initializer_list<std::string_view> choices) const;
  // A nested spec given as key=spec; nullptr when absent.
  absl::StatusOr<const SpecNode*> Node(std::string_view key) const;
  // The i-th positional value as a nested spec; nullptr when absent.
  absl::StatusOr<const SpecNode*> Positional(size_t i) const;

  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  absl::Status Error(std::string_view key, std::string_view what) const;

 private:
  const SpecArg* Find(std::string_view key) const;

  const SpecNode& node_;
  std::vector<const SpecArg*> positional_;
  absl::Status status_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_PARAMS_H_
