// Fuzz target for the CSV reader (core/csv.h): any text parses as a table whose rows all
// have the header's width and whose values are finite, or fails with a status. Seeds are
// small tables with quoted names, blank lines, CRLF and a label column.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/csv.h"

extern "C" const char* FedlgcFuzzSpec() { return "csv"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  return {"a,b,label\n1,2,0\n3.5,-4e3,1\n", "\"x, y\",label\r\n1,2\r\n\r\n3,4\r\n",
          "label,f\n0.5,1\n-2,+3\n", "f1,f2,label\n1,,2\n"};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const char* label : {"label", "a"}) {
    auto t = fedlgc::core::ParseCsv(text, "fuzz.csv", label);
    if (!t.ok()) continue;
    if (t->rows == 0 || t->labels.size() != t->rows ||
        t->features.size() != t->rows * t->feature_names.size()) {
      std::abort();
    }
    for (float v : t->features) {
      if (!std::isfinite(v)) std::abort();
    }
    for (double v : t->labels) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  return 0;
}
