// Test helper: a result refused as bad input of a given kind.
#ifndef FEDLGC_TESTS_AUTOENCODER_REFUSED_H_
#define FEDLGC_TESTS_AUTOENCODER_REFUSED_H_

#include <string>

#include "absl/status/statusor.h"
#include "codecs/input_error.h"
#include "gtest/gtest.h"

namespace fedlgc::autoencoder {

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

}  // namespace fedlgc::autoencoder

#endif  // FEDLGC_TESTS_AUTOENCODER_REFUSED_H_
