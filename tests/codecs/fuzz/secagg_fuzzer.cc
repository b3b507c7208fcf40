// Fuzz target for what secure aggregation's coordinator parses from clients (privacy/secagg.h,
// share_box.h, codecs/zmod_frame.h): the first input byte picks the target, the rest is its
// input.
//   zmod     a frame of 6-bit words: parses and reads, or fails with a status; every word
//            read is below 2^6.
//   box      a box under a fixed key: opens or fails.
//   keys     public keys a client sends in phase 1: accepted or refused, never both kinds
//            of the same key from two clients.
//   reveals  a round of 5 clients whose masked inputs all arrived: one client's reveals
//            come from the input, the other four's are honest. Whatever that client
//            sends, the unmasked sum is exactly the sum of the 5 codes, or the round
//            fails with a status: a false share is never taken into a secret.
// Built like decode_fuzzer.cc (libFuzzer with clang, the seeded driver everywhere else).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codecs/frame.h"
#include "codecs/zmod_frame.h"
#include "privacy/secagg.h"
#include "privacy/share_box.h"

namespace {

using namespace fedlgc::privacy;  // NOLINT: the protocol's parties

enum Kind : uint8_t { kZmod, kBox, kKeys, kReveals, kKinds };

constexpr int kClients = 5, kBits = 10;
constexpr size_t kWords = 64;

void Check(bool ok) {
  if (!ok) std::abort();
}

std::string Id(int i) { return "client-" + std::to_string(i); }

// A round whose 5 masked inputs arrived and whose unmasking began, with each client's
// honest reveals and the exact sum of the codes.
struct Fixture {
  std::unique_ptr<SecAggServer> server;
  std::vector<uint64_t> masked_sum, expected;
  std::map<std::string, std::vector<Reveal>> honest;

  Fixture() {
    std::set<std::string> ids;
    for (int i = 0; i < kClients; ++i) ids.insert(Id(i));
    server = std::make_unique<SecAggServer>("fuzz round", ids, 0, 0.5, 1, kBits);
    std::map<std::string, SecAggClient> clients;
    for (const std::string& id : ids) {
      clients.emplace(id, SecAggClient::Create(id, "fuzz round").value());
      Check(server->AddKeys(id, clients.at(id).public_keys()).ok());
    }
    Check(server->CloseKeys().ok());
    for (auto& [id, c] : clients) {
      auto s = c.ShareKeys(server->PeersOf(id), server->threshold()).value();
      Check(server->AddShares(id, s.boxes, s.commitment).ok());
    }
    Check(server->CloseShares().ok());
    masked_sum.assign(kWords, 0);
    expected.assign(kWords, 0);
    std::mt19937_64 rng(5);
    for (auto& [id, c] : clients) {
      Check(c.ReceiveShares(server->BoxesFor(id)).ok());
      std::vector<uint64_t> code(kWords);
      for (uint64_t& v : code) v = rng() % 16;
      for (size_t i = 0; i < kWords; ++i) expected[i] = (expected[i] + code[i]) % (1 << kBits);
      Check(c.Mask(kBits, code).ok());
      for (size_t i = 0; i < kWords; ++i) masked_sum[i] = (masked_sum[i] + code[i]) % (1 << kBits);
    }
    Check(server->BeginUnmask(ids).ok());
    for (auto& [id, c] : clients) {
      const auto [survivors, dropped] = server->RequestFor(id);
      honest[id] = c.Unmask(survivors, dropped).value();
    }
  }
};

const Fixture& F() {
  static const Fixture* f = new Fixture();
  return *f;
}

// Reveals from bytes: [peer index][key bit][point] then 32 bytes, repeated.
std::vector<Reveal> ParseReveals(const uint8_t* data, size_t size) {
  std::vector<Reveal> out;
  for (size_t at = 0; at + 35 <= size; at += 35) {
    Reveal r;
    r.peer = Id(data[at] % (kClients + 1));
    r.key = (data[at + 1] & 1) != 0;
    r.share.x = data[at + 2];
    r.share.y.assign(data + at + 3, data + at + 35);
    out.push_back(std::move(r));
  }
  return out;
}

std::string RevealBytes(const std::vector<Reveal>& reveals) {
  std::string out;
  for (const Reveal& r : reveals) {
    out.push_back(static_cast<char>(r.peer.back() - '0'));
    out.push_back(r.key ? 1 : 0);
    out.push_back(static_cast<char>(r.share.x));
    out.append(r.share.y.begin(), r.share.y.end());
  }
  return out;
}

std::string Tagged(Kind k, const std::string& body) { return std::string(1, char(k)) + body; }

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return "secagg"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  std::vector<std::string> seeds;
  std::vector<uint64_t> words(100, 37);
  std::vector<fedlgc::codecs::Frame> frames;
  fedlgc::codecs::EncodeZmod(words, 6, 0, &frames).IgnoreError();
  seeds.push_back(Tagged(kZmod, frames[0].bytes));
  Key32 k{};
  k.fill(3);
  const std::vector<uint8_t> plain(66, 1);
  seeds.push_back(Tagged(kBox, SealBox(k, "fuzz", plain).value()));
  seeds.push_back(Tagged(kKeys, std::string(64, 9)));
  for (int liar = 0; liar < kClients; ++liar) {
    seeds.push_back(Tagged(kReveals, std::string(1, static_cast<char>(liar)) +
                                         RevealBytes(F().honest.at(Id(liar)))));
  }
  return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Kind kind = static_cast<Kind>(data[0] % kKinds);
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  switch (kind) {
    case kZmod: {
      auto view = fedlgc::codecs::ParseFrame(std::span<const uint8_t>(body, n),
                                             fedlgc::codecs::FrameLimits());
      if (!view.ok()) break;
      std::vector<uint32_t> words;
      if (fedlgc::codecs::ReadZmod(*view, 6, view->dim, &words).ok()) {
        Check(words.size() == view->length);
        for (uint32_t w : words) Check(w < 64);
      }
      break;
    }
    case kBox: {
      Key32 k{};
      k.fill(3);
      auto plain = OpenBox(k, "fuzz", std::string_view(reinterpret_cast<const char*>(body), n));
      if (plain.ok()) Check(plain->size() + kBoxOverhead == n);
      break;
    }
    case kKeys: {
      SecAggServer s("fuzz keys", {Id(0), Id(1), Id(2)}, 0, 0.5, 1, kBits);
      for (size_t at = 0, c = 0; at + 64 <= n; at += 64, ++c) {
        PublicKeys keys;
        std::copy(body + at, body + at + 32, keys.enc.begin());
        std::copy(body + at + 32, body + at + 64, keys.mask.begin());
        s.AddKeys(Id(static_cast<int>(c % 4)), keys).IgnoreError();
      }
      if (s.CloseKeys().ok()) Check(s.keyed().size() >= 2);
      break;
    }
    case kReveals: {
      if (n == 0) break;
      const Fixture& f = F();
      SecAggServer s = *f.server;
      const std::string liar = Id(body[0] % kClients);
      for (const auto& [id, reveals] : f.honest) {
        if (id != liar) Check(s.AddReveals(id, reveals).ok());
      }
      s.AddReveals(liar, ParseReveals(body + 1, n - 1)).IgnoreError();
      if (!s.CanFinish()) break;
      std::vector<uint64_t> sum = f.masked_sum;
      auto done = s.Finish(sum);
      if (done.ok()) Check(sum == f.expected);
      break;
    }
    default:
      break;
  }
  return 0;
}
