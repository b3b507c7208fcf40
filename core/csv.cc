// CSV tables (see csv.h).
#include "core/csv.h"

#include <charconv>
#include <cmath>

#include "base/file.h"
#include "base/str.h"

namespace fedlgc::core {
namespace {

// Splits one line into fields: commas separate, a field in double quotes may hold commas
// and "" for a quote. Spaces around a field are dropped.
absl::Status SplitFields(std::string_view line, std::vector<std::string>* fields) {
  fields->clear();
  size_t i = 0;
  for (;;) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      for (;;) {
        if (i >= line.size()) return absl::InvalidArgumentError("a quoted field does not end");
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      if (i < line.size() && line[i] != ',') {
        return absl::InvalidArgumentError("text after a quoted field");
      }
    } else {
      const size_t end = std::min(line.find(',', i), line.size());
      size_t last = end;
      while (last > i && (line[last - 1] == ' ' || line[last - 1] == '\t')) --last;
      field.assign(line.substr(i, last - i));
      i = end;
    }
    fields->push_back(std::move(field));
    if (i >= line.size()) return absl::OkStatus();
    ++i;  // the comma
  }
}

// A number, or why not.
absl::StatusOr<double> Number(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    return absl::InvalidArgumentError(s.empty() ? "an empty field"
                                                : StrCat("'", s, "' is not a number"));
  }
  if (!std::isfinite(v)) return absl::InvalidArgumentError(StrCat("'", s, "' is not finite"));
  return v;
}

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(std::string_view text, std::string_view what,
                                  std::string_view label_column, size_t limit) {
  CsvTable t;
  std::vector<std::string> header, fields;
  size_t label = 0;
  size_t line_no = 0;
  size_t pos = 0;
  bool have_header = false;
  while (pos < text.size() && (limit == 0 || t.rows < limit)) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    auto at = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat(what, ": line ", line_no, ": ", why));
    };
    if (absl::Status st = SplitFields(line, have_header ? &fields : &header); !st.ok()) {
      return at(std::string(st.message()));
    }
    if (!have_header) {
      have_header = true;
      label = header.size();
      for (size_t c = 0; c < header.size(); ++c) {
        if (header[c] == label_column) label = c;
      }
      if (label == header.size()) {
        return absl::InvalidArgumentError(StrCat(what, ": no column '", label_column,
                                                 "' for the label (columns: ", StrJoin(header, ", "),
                                                 "; --label-column names another)"));
      }
      if (header.size() < 2) return at("the header has no feature column beside the label");
      for (size_t c = 0; c < header.size(); ++c) {
        if (c != label) t.feature_names.push_back(header[c]);
      }
      continue;
    }
    if (fields.size() != header.size()) {
      return at(StrCat(fields.size(), " fields, the header has ", header.size(),
                       pos >= text.size() ? " (truncated?)" : ""));
    }
    for (size_t c = 0; c < fields.size(); ++c) {
      auto v = Number(fields[c]);
      if (!v.ok()) {
        if (c == label && !fields[c].empty() && absl::IsInvalidArgument(v.status()) &&
            fields[c].find_first_of("0123456789") == std::string::npos) {
          return at(StrCat("column '", header[c], "' holds text ('", fields[c],
                           "'): labels must be numbers (class indices 0, 1, ... or float "
                           "targets)"));
        }
        return at(StrCat("column '", header[c], "': ", std::string(v.status().message())));
      }
      if (c == label) {
        t.labels.push_back(*v);
      } else {
        const float f = static_cast<float>(*v);
        if (!std::isfinite(f)) return at(StrCat("column '", header[c], "': out of float range"));
        t.features.push_back(f);
      }
    }
    ++t.rows;
  }
  if (!have_header) return absl::InvalidArgumentError(StrCat(what, ": empty (no header)"));
  if (t.rows == 0) return absl::InvalidArgumentError(StrCat(what, ": a header and no rows"));
  return t;
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path, std::string_view label_column,
                                 size_t limit) {
  auto text = ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(StrCat(path, ": cannot read"));
  return ParseCsv(*text, path, label_column, limit);
}

}  // namespace fedlgc::core
