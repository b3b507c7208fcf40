// The codec spec grammar. A spec names a codec and its parameters and may nest:
//
//   spec  := name [ '/' version ] [ '(' [ arg { ',' arg } ] ')' ]
//   arg   := key '=' value | value            (a bare value is positional)
//   value := number | spec                    (a bare word such as l2 is a spec with no args)
//   name, key := [a-z_][a-z0-9_]*
//
// e.g. `ef(topk(ratio=0.01, values=qsgd(bits=8)))`. Whitespace between tokens is ignored.
// Errors name the column (1-based) and what was expected.
#ifndef FEDLGC_BASE_SPEC_H_
#define FEDLGC_BASE_SPEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc {

struct SpecNode;

struct SpecArg {
  std::string key;  // empty for a positional argument
  bool is_number = false;
  double number = 0;
  std::string text;                // the number as written, for messages
  std::unique_ptr<SpecNode> node;  // set when !is_number
  size_t column = 0;
};

struct SpecNode {
  std::string name;
  uint32_t version = 0;  // 0: not given
  std::vector<SpecArg> args;
  size_t column = 0;

  // Bare word value such as `l2`: a node with no version and no args.
  bool IsWord() const { return version == 0 && args.empty(); }
};

// Limits that keep a hostile spec (e.g. inside a frame header) cheap to parse.
inline constexpr size_t kMaxSpecLength = 1024;
inline constexpr int kMaxSpecDepth = 8;

absl::StatusOr<SpecNode> ParseSpec(std::string_view text);

// A parsed spec as text (numbers as they were written, no spaces); ParseSpec reads it back
// as the same tree.
std::string FormatSpec(const SpecNode& node);

// Formats a number the way canonical specs print it (integers without a dot,
// otherwise the shortest form that parses back to the same double).
std::string FormatSpecNumber(double v);

}  // namespace fedlgc

#endif  // FEDLGC_BASE_SPEC_H_
