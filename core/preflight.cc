// The lines of --check and the checks more than one binary makes (see preflight.h).
#include "core/preflight.h"

#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/numbers.h"
#include "base/file.h"
#include "base/str.h"
#include "core/export.h"

namespace fedlgc::core {

namespace fs = std::filesystem;

Preflight::Preflight(std::string tool, std::FILE* out) : tool_(std::move(tool)), out_(out) {}

void Preflight::Line(std::string_view tag, std::string_view what, std::string_view text) {
  std::fprintf(out_, "%-5.*s %-18.*s %.*s\n", static_cast<int>(tag.size()), tag.data(),
               static_cast<int>(what.size()), what.data(), static_cast<int>(text.size()),
               text.data());
  std::fflush(out_);
}

bool Preflight::Report(std::string_view what, const absl::StatusOr<std::string>& result) {
  if (result.ok()) {
    ++usable_;
    Line("ok", what, *result);
    return true;
  }
  ++failed_;
  Line("FAIL", what, std::string(result.status().message()));
  return false;
}

bool Preflight::Report(std::string_view what, const absl::Status& status, std::string_view found) {
  if (status.ok()) return Report(what, std::string(found));
  return Report(what, absl::StatusOr<std::string>(status));
}

void Preflight::Skip(std::string_view what, std::string_view why) {
  ++skipped_;
  Line("-", what, why);
}

int Preflight::Finish() {
  std::fprintf(out_, "%s --check: %d usable, %d failed, %d not checked\n", tool_.c_str(), usable_,
               failed_, skipped_);
  std::fflush(out_);
  return failed_ == 0 ? 0 : 1;
}

absl::StatusOr<std::string> CheckWritableFolder(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty path");
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return absl::InvalidArgumentError(StrCat(path, ": ", ec.message()));
  const fs::path wanted = p;
  while (!fs::exists(p, ec)) {
    if (!p.has_parent_path() || p.parent_path() == p) break;
    p = p.parent_path();
  }
  if (!fs::is_directory(p, ec)) {
    return absl::FailedPreconditionError(StrCat(path, ": ", p.string(), " is not a folder"));
  }
  if (::access(p.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        StrCat(path, ": cannot write in ", p.string(), ": ", std::strerror(errno)));
  }
  if (p == wanted) return StrCat(path, ": a folder that can be written");
  return StrCat(path, ": will be made (in ", p.string(), ", which can be written)");
}

absl::StatusOr<std::string> CheckWritableFile(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty path");
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) {
    return absl::FailedPreconditionError(StrCat(path, ": exists and is not a file"));
  }
  auto folder = CheckWritableFolder(p.parent_path().string());
  if (!folder.ok()) return folder.status();
  return StrCat(path, fs::exists(p, ec) ? ": will be replaced" : ": will be written",
                " (its folder can be written)");
}

void CheckExport(const std::string& path, Preflight* p) {
  if (path.empty()) {
    p->Skip("export", "none (no --export)");
  } else if (auto files = ExportFiles::For(path); !files.ok()) {
    p->Report("export", files.status());
  } else {
    p->Report("export", CheckWritableFile(files->pt));
  }
}

namespace {

struct AddrInfoFree {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

struct HostPort {
  std::string host, port;
};

absl::StatusOr<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat(address, ": not host:port"));
  }
  HostPort hp{address.substr(0, colon), address.substr(colon + 1)};
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(hp.port, &port) || port > 65535) {
    return absl::InvalidArgumentError(StrCat(address, ": the port '", hp.port, "' is not 0-65535"));
  }
  return hp;
}

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& address, const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const char* host = hp.host.empty() || hp.host == "*" ? nullptr : hp.host.c_str();
  if (int rc = ::getaddrinfo(host, hp.port.c_str(), &hints, &found); rc != 0) {
    return absl::NotFoundError(
        StrCat(address, ": '", hp.host, "' does not resolve here: ", ::gai_strerror(rc)));
  }
  return AddrInfoPtr(found);
}

}  // namespace

absl::StatusOr<std::string> CheckListenAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) {
    auto folder = CheckWritableFolder(fs::path(address.substr(5)).parent_path().string());
    if (!folder.ok()) return folder.status();
    return StrCat(address, ": a Unix socket in a folder that can be written");
  }
  auto hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  auto ai = Resolve(address, *hp, /*passive=*/true);
  if (!ai.ok()) return ai.status();
  if (hp->port == "0") return StrCat(address, ": any free port");
  const addrinfo* a = ai->get();
  const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
  if (fd < 0) return absl::InternalError(StrCat(address, ": socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int rc = ::bind(fd, a->ai_addr, a->ai_addrlen);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::UnavailableError(StrCat(address, ": cannot listen there: ", std::strerror(err)));
  }
  return StrCat(address, ": free");
}

absl::StatusOr<std::string> CheckDialAddress(const std::string& address) {
  auto hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  if (hp->host.empty()) return absl::InvalidArgumentError(StrCat(address, ": no host"));
  auto ai = Resolve(address, *hp, /*passive=*/false);
  if (!ai.ok()) return ai.status();
  return StrCat(address, ": resolves (not dialled)");
}

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// OpenSSL's last error as text, and its queue cleared.
std::string SslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// The certificates of a PEM file, in order.
absl::StatusOr<std::vector<X509Ptr>> ReadCerts(const std::string& path, const char* what) {
  auto pem = fedlgc::ReadFile(path);
  if (!pem.ok()) return pem.status();
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  std::vector<X509Ptr> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the end of the file reads as an error
  if (certs.empty()) {
    return absl::InvalidArgumentError(StrCat(what, " ", path, ": holds no PEM certificate"));
  }
  return certs;
}

std::string NameText(const X509_NAME* name) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, static_cast<size_t>(n));
}

std::string TimeText(const ASN1_TIME* t) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, static_cast<size_t>(n));
}

// A passphrase prompt would block a --check: an encrypted key fails instead (gRPC takes
// none either).
int NoPassphrase(char*, int, int, void*) { return -1; }

}  // namespace

absl::StatusOr<std::string> CheckTlsIdentity(const std::string& ca_path,
                                             const std::string& cert_path,
                                             const std::string& key_path) {
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"CA", ca_path},
                                   {"certificate", cert_path},
                                   {"key", key_path}}) {
    if (path.empty()) {
      return absl::InvalidArgumentError(
          StrCat("no ", flag, " file given (mTLS needs the CA, a certificate and its key)"));
    }
  }
  auto ca = ReadCerts(ca_path, "CA");
  if (!ca.ok()) return ca.status();
  auto chain = ReadCerts(cert_path, "certificate");
  if (!chain.ok()) return chain.status();
  auto key_pem = fedlgc::ReadFile(key_path);
  if (!key_pem.ok()) return key_pem.status();
  std::unique_ptr<BIO, BioFree> key_bio(
      BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &NoPassphrase, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("key ", key_path, ": not an unencrypted PEM private key (", SslError(), ")"));
  }
  X509* cert = (*chain)[0].get();
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        StrCat("key ", key_path, " does not belong to the certificate ", cert_path));
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const X509Ptr& c : *ca) X509_STORE_add_cert(store.get(), c.get());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  for (size_t i = 1; i < chain->size(); ++i) {
    X509_up_ref((*chain)[i].get());
    sk_X509_push(untrusted.get(), (*chain)[i].get());
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert, untrusted.get());
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(StrCat(
        "certificate ", cert_path, " (", NameText(X509_get_subject_name(cert)),
        ") does not verify against the CA ", ca_path, ": ", X509_verify_cert_error_string(err)));
  }
  int days = 0, seconds = 0;
  ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert));
  std::string text = StrCat(NameText(X509_get_subject_name(cert)), ", issued by ",
                            NameText(X509_get_issuer_name(cert)), ", key matches, valid until ",
                            TimeText(X509_get0_notAfter(cert)));
  if (days < 30) StrAppend(&text, " (expires in ", days, " days)");
  return text;
}

}  // namespace fedlgc::core
