// Secure aggregation's two parties (see secagg.h).
#include "privacy/secagg.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/str.h"
#include "privacy/mask.h"
#include "privacy/secagg_graph.h"
#include "privacy/share_box.h"

namespace fedlgc::privacy {
namespace {

constexpr uint8_t kBoxVersion = 1;
constexpr size_t kBoxPlain = 2 + 32 + 32;  // version, point, seed share, key share
constexpr size_t kMaxBoxBytes = 1024;
// Subsets of t shares tried to find one whose secret checks out, per secret.
constexpr int kMaxRebuildTries = 4096;

std::string PairContext(std::string_view context, std::string_view what, const std::string& a,
                        const std::string& b) {
  const bool ab = a < b;
  return StrCat(context, "|", what, "|", ab ? a : b, "|", ab ? b : a);
}
std::string BoxAad(std::string_view context, const std::string& from, const std::string& to) {
  return StrCat(context, "|shares|", from, "|", to);
}

std::vector<std::string> Holders(const std::string& dealer, const std::set<std::string>& others) {
  std::set<std::string> all(others.begin(), others.end());
  all.insert(dealer);
  return {all.begin(), all.end()};
}

Key32 ToKey(std::span<const uint8_t> bytes) {
  Key32 k{};
  std::copy(bytes.begin(), bytes.end(), k.begin());
  return k;
}

}  // namespace

int MinThreshold(int shares) { return shares / 2 + 1; }

std::string RoundContext(uint64_t round, uint64_t seed) {
  return StrCat("fedlgc secagg/1 round ", round, " seed ", seed);
}

absl::StatusOr<Key32> SeedCommitment(std::string_view context, std::string_view client,
                                     const Key32& seed) {
  const std::string in = StrCat("fedlgc secagg seed", std::string(1, '\0'), context,
                                std::string(1, '\0'), client, std::string(1, '\0'),
                                std::string_view(reinterpret_cast<const char*>(seed.data()), 32));
  Key32 out{};
  unsigned int len = 0;
  if (EVP_Digest(in.data(), in.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 || len != 32) {
    return absl::InternalError("OpenSSL: SHA-256 failed");
  }
  return out;
}

// ---- the client ----

absl::StatusOr<SecAggClient> SecAggClient::Create(std::string self, std::string context) {
  auto enc = GenerateKeyPair();
  if (!enc.ok()) return enc.status();
  auto mask = GenerateKeyPair();
  if (!mask.ok()) return mask.status();
  // Clamped (RFC 7748), as OpenSSL makes them: the one private key of its public key that
  // the coordinator's check of a rebuilt key accepts.
  mask->private_key[0] &= 248;
  mask->private_key[31] &= 127;
  mask->private_key[31] |= 64;
  auto mask_public = PublicKeyOf(mask->private_key);
  if (!mask_public.ok()) return mask_public.status();
  mask->public_key = *mask_public;
  Key32 seed{};
  if (RAND_bytes(seed.data(), static_cast<int>(seed.size())) != 1) {
    return absl::InternalError("OpenSSL: RAND_bytes failed");
  }
  auto enc_agreement = KeyAgreement::Load(enc->private_key);
  if (!enc_agreement.ok()) return enc_agreement.status();
  auto mask_agreement = KeyAgreement::Load(mask->private_key);
  if (!mask_agreement.ok()) return mask_agreement.status();
  return SecAggClient(std::move(self), std::move(context), *enc, *mask, seed, *enc_agreement,
                      *mask_agreement);
}

SecAggClient::SecAggClient(std::string self, std::string context, KeyPair enc, KeyPair mask,
                           Key32 seed, KeyAgreement enc_agreement, KeyAgreement mask_agreement)
    : self_(std::move(self)),
      context_(std::move(context)),
      enc_(enc),
      mask_(mask),
      enc_agreement_(std::move(enc_agreement)),
      mask_agreement_(std::move(mask_agreement)),
      seed_(seed) {
  public_.enc = enc_.public_key;
  public_.mask = mask_.public_key;
}

absl::StatusOr<SecAggClient::Shared> SecAggClient::ShareKeys(const std::vector<Peer>& neighbours,
                                                             int threshold) {
  if (shared_) return absl::FailedPreconditionError("secure aggregation: shares were made already");
  std::set<std::string> ids;
  for (const Peer& p : neighbours) {
    if (p.id == self_ || !ids.insert(p.id).second) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: neighbour ", p.id, " is this client or named twice"));
    }
  }
  const int n = static_cast<int>(ids.size()) + 1;
  if (n < 2) {
    return absl::InvalidArgumentError(
        "secure aggregation: no neighbours: a client alone would mask with its own seed only");
  }
  if (n > 255) {
    return absl::InvalidArgumentError(
        StrCat("secure aggregation: ", n - 1, " neighbours (at most 254)"));
  }
  if (threshold < MinThreshold(n) || threshold > n) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: a threshold of ", threshold,
                                             " for ", n, " shares (from ", MinThreshold(n),
                                             " to ", n, ")"));
  }
  auto seed_shares = SplitSecret(seed_, threshold, n);
  if (!seed_shares.ok()) return seed_shares.status();
  auto key_shares = SplitSecret(mask_.private_key, threshold, n);
  if (!key_shares.ok()) return key_shares.status();
  const std::vector<std::string> holders = Holders(self_, ids);
  Shared out;
  std::map<std::string, PublicKeys> boxed;
  std::map<std::string, Key32> box_keys;
  for (size_t i = 0; i < holders.size(); ++i) {
    const std::string& h = holders[i];
    const Share& s = (*seed_shares)[i];
    const Share& k = (*key_shares)[i];
    if (h == self_) {
      own_seed_share_ = s;
      own_key_share_ = k;
      continue;
    }
    const Peer& peer = *std::find_if(neighbours.begin(), neighbours.end(),
                                     [&](const Peer& p) { return p.id == h; });
    auto box_key = enc_agreement_.Seed(peer.keys.enc, PairContext(context_, "box", self_, h));
    if (!box_key.ok()) continue;  // a key that agrees nothing: no box, so never a peer
    std::vector<uint8_t> plain;
    plain.reserve(kBoxPlain);
    plain.push_back(kBoxVersion);
    plain.push_back(s.x);
    plain.insert(plain.end(), s.y.begin(), s.y.end());
    plain.insert(plain.end(), k.y.begin(), k.y.end());
    auto sealed = SealBox(*box_key, BoxAad(context_, self_, h), plain);
    if (!sealed.ok()) return sealed.status();
    out.boxes.push_back({h, *std::move(sealed)});
    boxed[h] = peer.keys;
    box_keys[h] = *box_key;
  }
  auto commitment = SeedCommitment(context_, self_, seed_);
  if (!commitment.ok()) return commitment.status();
  out.commitment = *commitment;
  neighbours_ = std::move(boxed);
  box_keys_ = std::move(box_keys);
  threshold_ = threshold;
  shared_ = true;
  return out;
}

absl::StatusOr<std::set<std::string>> SecAggClient::ReceiveShares(
    const std::vector<Box>& boxes) {
  if (!shared_ || received_) {
    return absl::FailedPreconditionError(
        "secure aggregation: shares are received once, after this client made its own");
  }
  std::map<std::string, std::pair<Share, Share>> held;
  std::set<std::string> bad;
  for (const Box& b : boxes) {
    const auto key = box_keys_.find(b.peer);
    if (key == box_keys_.end() || held.count(b.peer) || bad.count(b.peer)) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: a box from ", b.peer, ", not a neighbour or twice"));
    }
    auto plain = OpenBox(key->second, BoxAad(context_, b.peer, self_), b.bytes);
    if (!plain.ok() || plain->size() != kBoxPlain || (*plain)[0] != kBoxVersion ||
        (*plain)[1] == 0 || (b.point != 0 && (*plain)[1] != b.point)) {
      // A box that does not open, parse, or hold the point its dealer must have given
      // this client: its shares are not kept, but the pairwise mask needs only the
      // dealer's public key, so this client still takes part.
      bad.insert(b.peer);
      continue;
    }
    const uint8_t x = (*plain)[1];
    Share s{x, std::vector<uint8_t>(plain->begin() + 2, plain->begin() + 34)};
    Share k{x, std::vector<uint8_t>(plain->begin() + 34, plain->end())};
    held[b.peer] = {std::move(s), std::move(k)};
  }
  held_ = std::move(held);
  peers_.clear();
  for (const Box& b : boxes) peers_.insert(b.peer);
  received_ = true;
  return bad;
}

absl::Status SecAggClient::Mask(int bits, std::span<uint64_t> words) const {
  if (!received_) {
    return absl::FailedPreconditionError("secure aggregation: no peers yet to mask against");
  }
  std::vector<MaskTerm> terms = {{seed_, +1}};
  for (const std::string& v : peers_) {
    auto seed = mask_agreement_.Seed(neighbours_.at(v).mask, PairContext(context_, "mask", self_, v));
    if (!seed.ok()) return seed.status();
    terms.push_back({*seed, PairSign(self_, v)});
  }
  return ApplyMasks(terms, bits, words);
}

absl::StatusOr<std::vector<Reveal>> SecAggClient::Unmask(const std::set<std::string>& survivors,
                                                         const std::set<std::string>& dropped) {
  if (!received_) return absl::FailedPreconditionError("secure aggregation: nothing to reveal yet");
  if (asked_ && (asked_->first != survivors || asked_->second != dropped)) {
    return absl::FailedPreconditionError(
        "secure aggregation: unmasking was asked once already with other survivors");
  }
  std::set<std::string> all(peers_);
  all.insert(self_);
  std::set<std::string> named(survivors);
  for (const std::string& d : dropped) {
    if (!named.insert(d).second || d == self_) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: ", d, " is named a survivor and dropped, or is this client"));
    }
  }
  if (named != all || !survivors.count(self_)) {
    return absl::InvalidArgumentError(
        "secure aggregation: an unmasking request must name each peer and this client once");
  }
  if (static_cast<int>(survivors.size()) < std::max(threshold_, 2)) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: unmasking with ",
                                             survivors.size(), " survivors, below the threshold ",
                                             threshold_));
  }
  std::vector<Reveal> out;
  for (const std::string& s : survivors) {
    if (s == self_) {
      out.push_back({s, false, own_seed_share_});
    } else if (const auto h = held_.find(s); h != held_.end()) {
      out.push_back({s, false, h->second.first});
    }
  }
  for (const std::string& d : dropped) {
    if (const auto h = held_.find(d); h != held_.end()) out.push_back({d, true, h->second.second});
  }
  asked_ = std::make_pair(survivors, dropped);
  return out;
}

// ---- the server ----

SecAggServer::SecAggServer(std::string context, std::set<std::string> participants, int degree,
                           double threshold, uint64_t graph_seed, int bits)
    : context_(std::move(context)),
      participants_(std::move(participants)),
      threshold_fraction_(threshold),
      graph_seed_(graph_seed),
      bits_(bits),
      degree_(degree) {}

absl::Status SecAggServer::AddKeys(const std::string& client, const PublicKeys& keys) {
  if (phase_ != Phase::kKeys || !participants_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: no keys are taken from ", client, " now"));
  }
  // Keys sent again replace the first (a client restarted with new ones), until the
  // phase closes.
  if (auto it = keys_.find(client); it != keys_.end() && it->second == keys) {
    return absl::OkStatus();
  }
  if (keys.enc == keys.mask) {
    return absl::InvalidArgumentError("secure aggregation: the two public keys must differ");
  }
  // A key that agrees nothing with a fixed probe is a low-order point: every seed it
  // agreed would be known.
  static const absl::StatusOr<KeyAgreement> kProbe = KeyAgreement::Load([] {
    Key32 probe{};
    probe.fill(0x5a);
    return probe;
  }());
  if (!kProbe.ok()) return kProbe.status();
  for (const Key32& k : {keys.enc, keys.mask}) {
    if (!kProbe->Seed(k, "probe").ok()) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: a public key of ", client, " is a low-order point"));
    }
  }
  for (const auto& [other, k] : keys_) {
    if (other == client) continue;
    if (k.enc == keys.enc || k.mask == keys.mask || k.enc == keys.mask || k.mask == keys.enc) {
      return absl::InvalidArgumentError(StrCat("secure aggregation: ", client,
                                               " sent a public key that ", other, " sent (replayed)"));
    }
  }
  keys_[client] = keys;
  return absl::OkStatus();
}

bool SecAggServer::KeysIn(const std::set<std::string>& gone) const {
  for (const std::string& p : participants_) {
    if (!gone.count(p) && !keys_.count(p)) return false;
  }
  return true;
}

absl::Status SecAggServer::CloseKeys() {
  if (phase_ != Phase::kKeys) return absl::FailedPreconditionError("secure aggregation: keys closed");
  for (const auto& [client, k] : keys_) u1_.insert(client);
  if (u1_.size() < 2) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: ", u1_.size(), " client(s) sent keys; a sum needs 2"));
  }
  int want = degree_ > 0 ? degree_ : DefaultDegree(u1_.size());
  want = std::min<int>({want, static_cast<int>(u1_.size()) - 1, 254});
  graph_ = NeighbourGraph(u1_, want, graph_seed_);
  degree_ = static_cast<int>(graph_.begin()->second.size());
  if (degree_ < 1) {
    return absl::FailedPreconditionError(StrCat(
        "secure aggregation: a graph of degree ", want, " over ", u1_.size(),
        " clients has no edges: each client would mask with its own seed alone"));
  }
  const int shares = degree_ + 1;
  t_ = std::clamp(static_cast<int>(std::floor(threshold_fraction_ * shares)) + 1,
                  MinThreshold(shares), shares);
  phase_ = Phase::kShares;
  return absl::OkStatus();
}

std::vector<Peer> SecAggServer::PeersOf(const std::string& client) const {
  std::vector<Peer> out;
  const auto it = graph_.find(client);
  if (it == graph_.end()) return out;
  for (const std::string& n : it->second) out.push_back({n, keys_.at(n)});
  return out;
}

std::optional<PublicKeys> SecAggServer::KeysOf(const std::string& client) const {
  const auto it = keys_.find(client);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

absl::Status SecAggServer::AddShares(const std::string& client, std::vector<Box> boxes,
                                     const Key32& commitment) {
  if (phase_ != Phase::kShares || !u1_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: no shares are taken from ", client, " now"));
  }
  if (boxes_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: ", client, " sent its shares already this round"));
  }
  const std::set<std::string>& neighbours = graph_.at(client);
  std::map<std::string, std::string> to;
  for (Box& b : boxes) {
    if (!neighbours.count(b.peer) || to.count(b.peer) || b.bytes.size() > kMaxBoxBytes ||
        b.bytes.size() < kBoxOverhead) {
      return absl::InvalidArgumentError(
          StrCat("secure aggregation: ", client, " sent a box to ", b.peer,
                 " (not a neighbour, twice, or not a box's size)"));
    }
    to[b.peer] = std::move(b.bytes);
  }
  boxes_[client] = std::move(to);
  commitments_[client] = commitment;
  return absl::OkStatus();
}

bool SecAggServer::SharesIn(const std::set<std::string>& gone) const {
  for (const std::string& p : u1_) {
    if (!gone.count(p) && !boxes_.count(p)) return false;
  }
  return true;
}

absl::Status SecAggServer::CloseShares() {
  if (phase_ != Phase::kShares) {
    return absl::FailedPreconditionError("secure aggregation: shares closed");
  }
  for (const auto& [client, b] : boxes_) u2_.insert(client);
  if (u2_.size() < 2) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: ", u2_.size(), " client(s) shared keys; a sum needs 2"));
  }
  for (const std::string& u : u2_) {
    std::set<std::string>& p = peers_[u];
    for (const std::string& v : graph_.at(u)) {
      if (u2_.count(v) && boxes_.at(u).count(v) && boxes_.at(v).count(u)) p.insert(v);
    }
  }
  phase_ = Phase::kMasked;
  return absl::OkStatus();
}

std::vector<Box> SecAggServer::BoxesFor(const std::string& client) const {
  std::vector<Box> out;
  const auto it = peers_.find(client);
  if (it == peers_.end()) return out;
  for (const std::string& v : it->second) {
    out.push_back({v, boxes_.at(v).at(client), PointOf(v, client)});
  }
  return out;
}

std::vector<std::pair<std::string, bool>> SecAggServer::Needed() const {
  std::vector<std::pair<std::string, bool>> out;
  for (const std::string& u : u3_) out.emplace_back(u, false);
  for (const std::string& v : u2_) {
    if (u3_.count(v)) continue;
    for (const std::string& w : peers_.at(v)) {
      if (u3_.count(w)) {
        out.emplace_back(v, true);
        break;
      }
    }
  }
  return out;
}

absl::Status SecAggServer::BeginUnmask(const std::set<std::string>& masked) {
  if (phase_ != Phase::kMasked) {
    return absl::FailedPreconditionError("secure aggregation: not collecting masked input");
  }
  std::set<std::string> u3;
  for (const std::string& c : masked) {
    if (u2_.count(c)) u3.insert(c);
  }
  if (u3.size() < 2) {
    return absl::FailedPreconditionError(StrCat("secure aggregation: ", u3.size(),
                                                " masked input(s) arrived; a sum needs 2"));
  }
  u3_ = std::move(u3);
  for (const auto& [dealer, key] : Needed()) {
    size_t holders = 0;
    for (const std::string& h : peers_.at(dealer)) holders += u3_.count(h);
    if (!key) ++holders;  // a survivor holds a share of its own seed
    if (static_cast<int>(holders) < t_) {
      return absl::FailedPreconditionError(
          StrCat("secure aggregation: the ", key ? "key" : "seed", " of ", dealer, " has ", holders,
                 " holders left, fewer than the threshold ", t_, ": the round cannot be unmasked"));
    }
  }
  phase_ = Phase::kUnmask;
  return absl::OkStatus();
}

std::pair<std::set<std::string>, std::set<std::string>> SecAggServer::RequestFor(
    const std::string& client) const {
  std::set<std::string> survivors, dropped;
  if (!u3_.count(client)) return {};
  survivors.insert(client);
  for (const std::string& v : peers_.at(client)) (u3_.count(v) ? survivors : dropped).insert(v);
  return {survivors, dropped};
}

uint8_t SecAggServer::PointOf(const std::string& dealer, const std::string& holder) const {
  const std::vector<std::string> h = Holders(dealer, graph_.at(dealer));
  return static_cast<uint8_t>(std::find(h.begin(), h.end(), holder) - h.begin() + 1);
}

absl::Status SecAggServer::AddReveals(const std::string& client,
                                      const std::vector<Reveal>& reveals) {
  if (phase_ != Phase::kUnmask || !u3_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: no shares are revealed by ", client, " now"));
  }
  if (revealed_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("secure aggregation: ", client, " revealed its shares already"));
  }
  const auto [survivors, dropped] = RequestFor(client);
  // Each share stands alone: a bad one is left out (and said), the others kept. A client
  // holds no share of a peer whose box did not open, so it may send fewer than asked.
  std::set<std::string> seen;
  std::string refused;
  for (const Reveal& r : reveals) {
    const bool asked = r.key ? dropped.count(r.peer) > 0 : survivors.count(r.peer) > 0;
    if (!asked || seen.count(r.peer) || r.share.y.size() != 32 ||
        r.share.x != PointOf(r.peer, client)) {
      refused += StrCat(refused.empty() ? "" : ", ", r.key ? "a key" : "a seed", " share of ",
                        r.peer);
      continue;
    }
    seen.insert(r.peer);
    reveals_[{r.peer, r.key}][client] = r.share;
  }
  revealed_.insert(client);
  if (!refused.empty()) {
    return absl::InvalidArgumentError(
        StrCat("secure aggregation: ", client, " revealed ", refused,
               " it was not asked for, twice, or at another point than its dealer's: left out"));
  }
  return absl::OkStatus();
}

bool SecAggServer::CanFinish() const {
  if (phase_ != Phase::kUnmask) return false;
  for (const auto& need : Needed()) {
    const auto it = reveals_.find(need);
    if (it == reveals_.end() || static_cast<int>(it->second.size()) < t_) return false;
  }
  return true;
}

absl::StatusOr<Key32> SecAggServer::Rebuild(const std::string& dealer, bool key,
                                            std::set<std::string>* off,
                                            std::set<std::string>* proven) const {
  std::vector<std::string> holders;
  std::vector<Share> shares;
  if (const auto it = reveals_.find({dealer, key}); it != reveals_.end()) {
    for (const auto& [h, s] : it->second) {
      holders.push_back(h);
      shares.push_back(s);
    }
  }
  const size_t m = shares.size(), t = static_cast<size_t>(t_);
  const auto checks = [&](const Key32& secret) {
    if (key) {
      // A clamped key (RFC 7748): the only one of the 32 private keys of one public key
      // that an honest client holds, so a share moved in the clamped bits cannot pass.
      if ((secret[0] & 7) != 0 || (secret[31] & 0xC0) != 0x40) return false;
      auto pub = PublicKeyOf(secret);
      return pub.ok() && *pub == keys_.at(dealer).mask;
    }
    auto c = SeedCommitment(context_, dealer, secret);
    return c.ok() && *c == commitments_.at(dealer);
  };
  const auto subset_of = [&](const std::vector<size_t>& pick) {
    std::vector<Share> subset;
    for (size_t i : pick) subset.push_back(shares[i]);
    return subset;
  };
  if (m >= t) {
    // The first t shares, then random t-subsets: with f false shares of m, each subset
    // misses them all with probability C(m - f, t) / C(m, t).
    std::vector<size_t> pick(m);
    for (size_t i = 0; i < m; ++i) pick[i] = i;
    std::mt19937_64 rng(std::hash<std::string>()(dealer) ^ (key ? 0x6b6579 : 0x736565));
    for (int tries = 0; tries < kMaxRebuildTries; ++tries) {
      if (tries > 0) std::shuffle(pick.begin(), pick.end(), rng);
      const std::vector<Share> subset = subset_of({pick.begin(), pick.begin() + t});
      auto secret = CombineShares(subset);
      if (!secret.ok() || !checks(ToKey(*secret))) continue;
      for (size_t i = 0; i < m; ++i) {
        auto at = InterpolateAt(subset, shares[i].x);
        if (!at.ok() || *at != shares[i].y) off->insert(holders[i]);
      }
      return ToKey(*secret);
    }
    // Every share on one polynomial whose secret fails the dealer's own commitment (or
    // public key): the dealer dealt it so.
    std::vector<size_t> first(t);
    for (size_t i = 0; i < t; ++i) first[i] = i;
    const std::vector<Share> subset = subset_of(first);
    bool consistent = m > t;
    for (size_t i = t; i < m && consistent; ++i) {
      auto at = InterpolateAt(subset, shares[i].x);
      consistent = at.ok() && *at == shares[i].y;
    }
    if (consistent) proven->insert(dealer);
  }
  return absl::FailedPreconditionError(
      StrCat("secure aggregation: the ", key ? "key" : "seed", " of ", dealer, " does not rebuild from ",
             m, " shares (threshold ", t_, ") into one that checks out"));
}

absl::StatusOr<SecAggServer::Finished> SecAggServer::Finish(std::span<uint64_t> sum) {
  if (!CanFinish()) {
    return absl::FailedPreconditionError("secure aggregation: too few shares to unmask yet");
  }
  Finished done;
  std::map<std::pair<std::string, bool>, Key32> secrets;
  for (const auto& need : Needed()) {
    auto secret = Rebuild(need.first, need.second, &done.off, &proven_);
    if (!secret.ok()) return secret.status();
    secrets[need] = *secret;
  }
  std::vector<MaskTerm> terms;
  for (const auto& [need, secret] : secrets) {
    const auto& [dealer, key] = need;
    if (!key) {
      terms.push_back({secret, -1});
      ++done.survivors;
      continue;
    }
    ++done.dropped;
    auto agreement = KeyAgreement::Load(secret);
    if (!agreement.ok()) return agreement.status();
    for (const std::string& w : peers_.at(dealer)) {
      if (!u3_.count(w)) continue;
      auto seed = agreement->Seed(keys_.at(w).mask, PairContext(context_, "mask", dealer, w));
      if (!seed.ok()) return seed.status();
      // w added PairSign(w, dealer) times this mask: take it back out.
      terms.push_back({*seed, -PairSign(w, dealer)});
    }
  }
  if (absl::Status st = ApplyMasks(terms, bits_, sum); !st.ok()) return st;
  phase_ = Phase::kDone;
  return done;
}

}  // namespace fedlgc::privacy
