// --check, the same in every fedlgc binary that runs a job's part (the coordinator, the edge
// client, fedlgc-sim, fedlgc-load, fedlgc-export): what the process would use is checked
// without starting its work (no port is listened on, no state is written, no client
// dials) and each item gets one line on stdout, usable or not and why. Every item is
// checked even after one fails, so one run names every problem; an item that needs a
// failed one is listed as not checked. The exit code is 0 only when nothing failed.
//
//   $ fedlgc-coordinator --check --test-data npz:data/test.npz ...
//   ok    options            fedavg, 20 rounds, up zstd(qsgd(bits=4,norm=linf)), down ...
//   FAIL  certificates       key certs/ca.key does not belong to the certificate ...
//   ok    model              cnn: 215,370 values (average buffers, loss auto)
//   FAIL  test data          data/test.npz: cannot open: No such file or directory
//   -     checkpoint         needs the model and test data
//   fedlgc-coordinator --check: 7 usable, 2 failed, 4 not checked
//
// The checks here are the ones more than one binary makes (folders and files that will be
// written, listen addresses, certificates); the binaries' own (models, data, codecs, state
// files) use their components' functions.
#ifndef FEDLGC_CORE_PREFLIGHT_H_
#define FEDLGC_CORE_PREFLIGHT_H_

#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::core {

// The lines of one --check. Not thread-safe.
class Preflight {
 public:
  // `tool`: the binary's name, for the summary line. `out` (not owned) must outlive this.
  explicit Preflight(std::string tool, std::FILE* out = stdout);

  // One item: what was found (usable) or why it is not. Returns whether it is usable, so
  // a check that others depend on can gate them.
  bool Report(std::string_view what, const absl::StatusOr<std::string>& result);
  bool Report(std::string_view what, const absl::Status& status, std::string_view found);
  // An item not checked: `why` says what it needed or why it does not apply.
  void Skip(std::string_view what, std::string_view why);

  int failed() const { return failed_; }
  // Prints the summary line; the exit code: 0 when nothing failed, else 1.
  int Finish();

 private:
  void Line(std::string_view tag, std::string_view what, std::string_view text);

  std::string tool_;
  std::FILE* out_;
  int usable_ = 0, failed_ = 0, skipped_ = 0;
};

// A folder the process will write into (a state folder, a run folder, --tensorboard):
// usable when it is a folder that can be written, or when it does not exist yet and its
// nearest existing ancestor is a folder that can be. Makes nothing.
absl::StatusOr<std::string> CheckWritableFolder(const std::string& path);
// A file the process will write (replaced whole): its folder as above, and the file, if
// it exists, a regular file.
absl::StatusOr<std::string> CheckWritableFile(const std::string& path);
// --export PATH's line on `check`: the files PATH names (core/export.h) can be written;
// not checked when PATH is empty.
void CheckExport(const std::string& path, Preflight* check);
// A listen address, host:port as gRPC and the metrics exposer take it: the host resolves
// and, unless the port is 0 (any free one), the port can be bound now (bound and closed
// at once; SO_REUSEADDR, as gRPC binds).
absl::StatusOr<std::string> CheckListenAddress(const std::string& address);
// A host:port to dial: it parses and the host resolves (nothing is dialled).
absl::StatusOr<std::string> CheckDialAddress(const std::string& address);
// A TLS identity: the CA's certificates, a certificate and its private key, read as PEM.
// Usable when each parses, the key belongs to the certificate, the certificate chains to
// the CA and is valid now. Found: its subject, issuer and expiry.
absl::StatusOr<std::string> CheckTlsIdentity(const std::string& ca_path,
                                             const std::string& cert_path,
                                             const std::string& key_path);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_PREFLIGHT_H_
