// Tabular data from a CSV file: a header row of column names, then one example per line;
// one named column is the label (a class index or a float target), every other column a
// feature. Values are numbers (quoted or not); a field that is not a number, a value that
// is not finite, or a line with another number of fields than the header is an error
// that names the file, the line and the column.
#ifndef FEDLGC_CORE_CSV_H_
#define FEDLGC_CORE_CSV_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct CsvTable {
  std::vector<std::string> feature_names;  // the header without the label column
  std::vector<float> features;             // rows * feature_names.size(), row-major
  std::vector<double> labels;              // one per row
  size_t rows = 0;
};

// Parses `text` (`what` names it in errors). `limit` > 0 keeps the first `limit` rows.
absl::StatusOr<CsvTable> ParseCsv(std::string_view text, std::string_view what,
                                  std::string_view label_column, size_t limit = 0);
absl::StatusOr<CsvTable> ReadCsv(const std::string& path, std::string_view label_column,
                                 size_t limit = 0);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_CSV_H_
