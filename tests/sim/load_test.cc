// fedlgc-load's ledger: the aggregate check passes the coordinator's own FedAvg step and
// catches an update counted twice or not at all; rounds settle only with every receipt
// and both models. Its synthetic updates, and the client certificates it issues.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "sim/client_certs.h"
#include "sim/load_book.h"
#include "sim/load_client.h"

namespace fedlgc::sim {
namespace {

constexpr uint64_t kDim = 5000;

std::vector<float> Model(uint64_t seed) {
  std::vector<float> m = SyntheticUpdate(seed, 99, 0, kDim, 0.3f);
  for (float& x : m) x += 0.01f;
  return m;
}

// The coordinator's step: mean in double per coordinate, cast, added to the model in float.
std::vector<float> Step(const std::vector<float>& model,
                        const std::vector<std::vector<float>>& updates) {
  std::vector<float> out = model;
  for (size_t k = 0; k < kDim; ++k) {
    double sum = 0;
    for (const auto& u : updates) sum += double(1.0) * u[k];
    const float mean = static_cast<float>(sum / updates.size());
    out[k] += 1.0f * mean;
  }
  return out;
}

std::vector<double> Sum(const std::vector<std::vector<float>>& updates) {
  std::vector<double> s(kDim, 0.0);
  for (const auto& u : updates) {
    for (size_t k = 0; k < kDim; ++k) s[k] += u[k];
  }
  return s;
}

TEST(CheckAggregate, PassesTheMeanAndCatchesAnUpdateCountedTwiceOrNotAtAll) {
  const std::vector<float> old_model = Model(1);
  std::vector<std::vector<float>> updates;
  for (uint32_t i = 0; i < 1000; ++i) updates.push_back(SyntheticUpdate(5, i, 1, kDim, 1e-3f));
  const std::vector<float> new_model = Step(old_model, updates);
  const std::vector<uint32_t> all(kDim, 1000);
  const AggregateCheck ok = CheckAggregate(old_model, new_model, Sum(updates), all);
  EXPECT_TRUE(ok.made);
  EXPECT_TRUE(ok.ok) << ok.why << " worst ratio " << ok.worst_ratio;
  EXPECT_EQ(ok.coordinates, kDim);
  // One update of 1000 left out of what the ledger expects: the coordinator's model holds
  // it, the expectation does not.
  std::vector<std::vector<float>> fewer(updates.begin(), updates.end() - 1);
  const AggregateCheck missing =
      CheckAggregate(old_model, new_model, Sum(fewer), std::vector<uint32_t>(kDim, 999));
  EXPECT_FALSE(missing.ok);
  EXPECT_GT(missing.off, kDim / 2) << "most coordinates move by a client's share";
  // One update counted twice by the coordinator.
  std::vector<std::vector<float>> twice = updates;
  twice.push_back(updates[17]);
  const AggregateCheck doubled =
      CheckAggregate(old_model, Step(old_model, twice), Sum(updates), all);
  EXPECT_FALSE(doubled.ok);
  EXPECT_GT(doubled.off, kDim / 2);
  // A coordinate nobody sent must not move.
  std::vector<uint32_t> holes = all;
  std::vector<double> sum = Sum(updates);
  holes[3] = 0;
  sum[3] = 0;
  EXPECT_FALSE(CheckAggregate(old_model, new_model, sum, holes).ok);
  std::vector<float> still = new_model;
  still[3] = old_model[3];
  EXPECT_TRUE(CheckAggregate(old_model, still, sum, holes).ok);
}

TEST(LoadBook, ARoundSettlesWithEveryReceiptAndBothModels) {
  LoadBook book(/*check=*/true);
  const std::vector<float> m0 = Model(2);
  std::vector<std::vector<float>> updates = {SyntheticUpdate(1, 0, 1, kDim, 1e-3f),
                                             SyntheticUpdate(1, 1, 1, kDim, 1e-3f)};
  book.Started(1, 7, 0);
  book.Started(1, 7, 1);
  book.Model(7, m0);
  book.Uploaded(1, 0, 0.5, 1000, 2);
  book.Uploaded(1, 1, 0.7, 1000, 2);
  // Client 0's update arrived in two chunks, client 1's too.
  const auto chunks = [](const std::vector<float>& u) {
    return std::vector<CountedChunk>{
        {0, std::vector<float>(u.begin(), u.begin() + 3000)},
        {3000, std::vector<float>(u.begin() + 3000, u.end())}};
  };
  book.Receipt(1, 0, 2, chunks(updates[0]));
  EXPECT_TRUE(book.TakeSettled(false).empty()) << "client 1's receipt is missing";
  book.Receipt(1, 1, 2, chunks(updates[1]));
  book.Receipt(1, 1, 2, chunks(updates[1]));  // resent after a reconnect: counted once
  EXPECT_TRUE(book.TakeSettled(false).empty()) << "the model after the round is unknown";
  EXPECT_TRUE(book.WantsModel(8));
  book.Model(8, Step(m0, updates));
  const auto settled = book.TakeSettled(false);
  ASSERT_EQ(settled.size(), 1u);
  const RoundFigures& f = settled[0];
  EXPECT_EQ(f.round, 1u);
  EXPECT_EQ(f.started, 2u);
  EXPECT_EQ(f.receipts, 2u);
  EXPECT_EQ(f.participants, 2u);
  EXPECT_EQ(f.counted_chunks, 4u);
  EXPECT_EQ(f.up_bytes, 2000u);
  EXPECT_NEAR(f.upload_p99, 0.7, 1e-12);
  EXPECT_TRUE(f.check.ok) << f.check.why;
  EXPECT_FALSE(book.WantsModel(7) && book.WantsModel(8)) << "the newest model is kept";
  // A round whose receipt never came is reported at the end, unchecked.
  book.Started(2, 8, 0);
  EXPECT_TRUE(book.TakeSettled(false).empty());
  const auto left = book.TakeSettled(true);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_FALSE(left[0].check.made);
  EXPECT_NE(left[0].check.why.find("receipts never arrived"), std::string::npos);
}

TEST(SyntheticUpdate, IsDeterministicBoundedAndDiffersByClientAndRound) {
  const auto a = SyntheticUpdate(3, 4, 5, 10000, 0.25f);
  EXPECT_EQ(a, SyntheticUpdate(3, 4, 5, 10000, 0.25f));
  EXPECT_NE(a, SyntheticUpdate(3, 5, 5, 10000, 0.25f));
  EXPECT_NE(a, SyntheticUpdate(3, 4, 6, 10000, 0.25f));
  double sum = 0, sq = 0;
  for (float x : a) {
    EXPECT_LE(std::fabs(x), 0.25f);
    sum += x;
    sq += double(x) * x;
  }
  // Uniform on [-s, s]: mean 0 (sd s / sqrt(3n)), second moment s^2 / 3.
  EXPECT_NEAR(sum / a.size(), 0.0, 5 * 0.25 / std::sqrt(3.0 * a.size()));
  EXPECT_NEAR(sq / a.size(), 0.25 * 0.25 / 3, 0.002);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ClientCertificates, AreSignedByTheCaWithTheClientIdAsCommonName) {
  const std::string dir = ::testing::TempDir() + "/load_certs";
  std::filesystem::remove_all(dir);
  const std::string cmd =
      std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh " + dir + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(IssueClientCertificates(dir, {"load-0", "load-1"}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(IssueClientCertificates(dir, {"bad/id"})));
  const std::string first = Slurp(dir + "/load-0.pem");
  ASSERT_TRUE(IssueClientCertificates(dir, {"load-0"}).ok());
  EXPECT_EQ(Slurp(dir + "/load-0.pem"), first) << "an existing certificate is kept";
  EXPECT_EQ(std::filesystem::status(dir + "/load-1.key").permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::none);

  BIO* ca_bio = BIO_new_file((dir + "/ca.pem").c_str(), "r");
  X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
  BIO* cert_bio = BIO_new_file((dir + "/load-1.pem").c_str(), "r");
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO* key_bio = BIO_new_file((dir + "/load-1.key").c_str(), "r");
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  ASSERT_TRUE(ca && cert && key);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, cert, nullptr);
  X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT);
  EXPECT_EQ(X509_verify_cert(ctx), 1)
      << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  EXPECT_EQ(X509_check_private_key(cert, key), 1);
  char cn[128] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  EXPECT_STREQ(cn, "load-1");
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  EVP_PKEY_free(key);
  X509_free(cert);
  X509_free(ca);
  BIO_free(key_bio);
  BIO_free(cert_bio);
  BIO_free(ca_bio);
}

}  // namespace
}  // namespace fedlgc::sim
