// Client certificates for mTLS federations of many clients, issued in this process: a
// P-256 key and a certificate (CN = the client id, clientAuth) signed by the federation's
// CA, about a millisecond each where scripts/gen-certs.sh spends ~100 ms per RSA client.
#ifndef FEDLGC_SIM_CLIENT_CERTS_H_
#define FEDLGC_SIM_CLIENT_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fedlgc::sim {

// Writes DIR/<id>.pem and DIR/<id>.key (0600) for every id that has no certificate yet,
// signed by DIR/ca.pem and DIR/ca.key. Ids are 1-64 characters of [A-Za-z0-9._-].
absl::Status IssueClientCertificates(const std::string& dir, const std::vector<std::string>& ids);

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_CLIENT_CERTS_H_
