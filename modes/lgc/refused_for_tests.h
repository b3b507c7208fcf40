// For the LGC codes' tests: a result refused as bad input of a given kind.
#ifndef FEDLGC_MODES_LGC_REFUSED_FOR_TESTS_H_
#define FEDLGC_MODES_LGC_REFUSED_FOR_TESTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "codecs/input_error.h"
#include "gtest/gtest.h"

namespace fedlgc::lgc {

// Refused as bad input of `kind` (INVALID_ARGUMENT tagged as codecs::InputError says).
template <typename T>
::testing::AssertionResult Refused(const absl::StatusOr<T>& r,
                                   codecs::InputError kind = codecs::InputError::kMalformed) {
  if (!r.ok() && absl::IsInvalidArgument(r.status()) && codecs::InputErrorOf(r.status()) == kind) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << (r.ok() ? std::string("accepted") : r.status().ToString());
}

}  // namespace fedlgc::lgc

#endif  // FEDLGC_MODES_LGC_REFUSED_FOR_TESTS_H_
