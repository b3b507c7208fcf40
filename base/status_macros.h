// Small helpers for absl::Status plumbing. Debian's abseil (20220623) has no
// ABSL_RETURN_IF_ERROR, so fedlgc carries its own two macros.
#ifndef FEDLGC_BASE_STATUS_MACROS_H_
#define FEDLGC_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FEDLGC_STATUS_CONCAT_INNER_(a, b) a##b
#define FEDLGC_STATUS_CONCAT_(a, b) FEDLGC_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define FEDLGC_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status fedlgc_status_ = (expr);          \
    if (!fedlgc_status_.ok()) return fedlgc_status_; \
  } while (0)

// `lhs = value of expr` when expr (an absl::StatusOr<T>) holds one, else returns its status.
#define FEDLGC_ASSIGN_OR_RETURN(lhs, expr) \
  FEDLGC_ASSIGN_OR_RETURN_IMPL_(FEDLGC_STATUS_CONCAT_(fedlgc_statusor_, __LINE__), lhs, expr)
#define FEDLGC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // FEDLGC_BASE_STATUS_MACROS_H_
