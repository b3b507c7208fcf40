// Client certificates issued in process (see client_certs.h).
#include "sim/client_certs.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cctype>
#include <filesystem>
#include <memory>

#include "base/file.h"
#include "base/str.h"

namespace fedlgc::sim {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<BioPtr> ReadBio(const std::string& path) {
  auto text = fedlgc::ReadFile(path);
  if (!text.ok()) return text.status();
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || BIO_write(bio.get(), text->data(), static_cast<int>(text->size())) <= 0) {
    return absl::InternalError("BIO_write failed");
  }
  return bio;
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

bool AddExtension(X509* cert, X509* ca, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `id` with `key`, signed by the CA.
absl::StatusOr<X509Ptr> Certificate(const std::string& id, EVP_PKEY* key, X509* ca,
                                    EVP_PKEY* ca_key) {
  X509Ptr cert(X509_new());
  uint64_t serial = 0;
  if (!cert || RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return absl::InternalError("X509_new or RAND_bytes failed");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  const bool ok =
      X509_set_version(cert.get(), 2) == 1 &&
      ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1) == 1 &&
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3650L * 24 * 3600) != nullptr &&
      X509_set_pubkey(cert.get(), key) == 1 &&
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(id.c_str()), -1, -1,
                                 0) == 1 &&
      X509_set_issuer_name(cert.get(), X509_get_subject_name(ca)) == 1 &&
      AddExtension(cert.get(), ca, NID_basic_constraints, "critical,CA:FALSE") &&
      AddExtension(cert.get(), ca, NID_key_usage, "critical,digitalSignature") &&
      AddExtension(cert.get(), ca, NID_ext_key_usage, "clientAuth") &&
      X509_sign(cert.get(), ca_key, EVP_sha256()) > 0;
  if (!ok) return absl::InternalError(StrCat("could not make the certificate of ", id));
  return cert;
}

absl::Status WriteClient(const std::string& dir, const std::string& id, X509* ca,
                         EVP_PKEY* ca_key) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return absl::InternalError("EVP_EC_gen failed");
  auto cert = Certificate(id, key.get(), ca, ca_key);
  if (!cert.ok()) return cert.status();
  BioPtr key_pem(BIO_new(BIO_s_mem())), cert_pem(BIO_new(BIO_s_mem()));
  if (!key_pem || !cert_pem ||
      PEM_write_bio_PrivateKey(key_pem.get(), key.get(), nullptr, nullptr, 0, nullptr,
                               nullptr) != 1 ||
      PEM_write_bio_X509(cert_pem.get(), cert->get()) != 1) {
    return absl::InternalError("PEM encoding failed");
  }
  const std::string key_path = StrCat(dir, "/", id, ".key");
  if (absl::Status st =
          fedlgc::AtomicWriteFile(key_path, BioText(key_pem.get()), fedlgc::Durability::kVisible);
      !st.ok())
    return st;
  // The certificate last: its presence says the pair is complete.
  return fedlgc::AtomicWriteFile(StrCat(dir, "/", id, ".pem"), BioText(cert_pem.get()),
                                 fedlgc::Durability::kVisible);
}

absl::Status IssueAll(const std::string& dir, const std::vector<std::string>& ids, X509* ca,
                      EVP_PKEY* ca_key) {
  for (const std::string& id : ids) {
    if (!ValidId(id)) {
      return absl::InvalidArgumentError(
          StrCat("client id '", id, "' must be 1-64 characters of [A-Za-z0-9._-]"));
    }
    if (std::filesystem::exists(StrCat(dir, "/", id, ".pem"))) continue;
    if (absl::Status st = WriteClient(dir, id, ca, ca_key); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IssueClientCertificates(const std::string& dir, const std::vector<std::string>& ids) {
  auto ca_bio = ReadBio(dir + "/ca.pem");
  if (!ca_bio.ok()) return ca_bio.status();
  auto ca_key_bio = ReadBio(dir + "/ca.key");
  if (!ca_key_bio.ok()) return ca_key_bio.status();
  X509Ptr ca(PEM_read_bio_X509(ca_bio->get(), nullptr, nullptr, nullptr));
  KeyPtr ca_key(PEM_read_bio_PrivateKey(ca_key_bio->get(), nullptr, nullptr, nullptr));
  if (!ca || !ca_key) return absl::InvalidArgumentError(StrCat("cannot read the CA in ", dir));
  // Keys are written owner-only from the start (the folder may be anyone's).
  const mode_t old_mask = ::umask(077);
  absl::Status st = IssueAll(dir, ids, ca.get(), ca_key.get());
  ::umask(old_mask);
  return st;
}

}  // namespace fedlgc::sim
