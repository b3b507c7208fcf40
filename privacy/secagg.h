// Secure aggregation's protocol, one round of it, as two state machines with no transport
// (SecAgg, Bonawitz et al. 2017, "Practical Secure Aggregation for Privacy-Preserving
// Machine Learning"; SecAgg+, Bell et al. 2020): the coordinator's SecAggServer learns the
// sum, mod 2^b, of the masked words of the clients whose input arrived, and nothing else;
// each client's SecAggClient masks its own. modes/fedavg/secagg_rounds.h carries their
// messages through the wire protocol. The four phases:
//   1. keys: each client makes two X25519 key pairs, one to box its shares (enc), one
//      to agree its pairwise masks (mask), and sends the public keys (AddKeys). U1: those
//      who did. The server draws the neighbour graph over U1 (secagg_graph.h).
//   2. shares: each client draws its own mask seed b_u, splits b_u and its mask private
//      key into t-of-(k+1) Shamir shares (shamir.h) for itself and its k neighbours (point
//      1 + its index in the sorted list of itself and them), boxes each neighbour's pair
//      (share_box.h) and sends the boxes and a commitment to b_u (AddShares). U2: those
//      who did. Each client of U2 is relayed the boxes of its neighbours in U2 that it
//      also sent a box to (mutual edges only): those are the peers it masks against.
//   3. masked input: a client adds to its code, mod 2^b, the mask of b_u and, for each
//      peer v, +-the mask of the seed it agrees with v (mask.h). U3: those whose masked
//      input arrived whole (the caller's collector knows).
//   4. unmasking: each client of U3 is told which of its peers are in U3 (survivors) and
//      which are not (dropped), and reveals its share of each survivor's b and of each
//      dropped peer's mask key, never both for one peer (it refuses a request that would
//      make it, or that names too few survivors). From t shares of each the server
//      rebuilds the seeds and keys, checks each against the commitment or the public key
//      (trying random t-subsets past the first; a share off the polynomial of a secret
//      that checks out is reported, a dealer whose shares agree on a secret that fails is
//      proven a liar), and removes every mask from the sum.
// Every seed, box and mask is bound to a context (the job and the round), so nothing of one
// round opens or cancels in another.
//
// Against whom: a coordinator that follows the protocol but is curious learns only the sum
// of U3's inputs (and who took part). A coordinator that lies (substitutes keys, names
// different survivors to different clients) is not defended against here: that needs
// signed keys and a consistency round (SecAgg's active variant), docs/threat-model.md.
// Not thread-safe: each object is one party's state; the caller serializes its calls.
#ifndef FEDLGC_PRIVACY_SECAGG_H_
#define FEDLGC_PRIVACY_SECAGG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "privacy/key_agreement.h"
#include "privacy/shamir.h"

namespace fedlgc::privacy {

struct PublicKeys {
  Key32 enc{};   // boxes the shares it is sent
  Key32 mask{};  // agrees its pairwise masks
  bool operator==(const PublicKeys&) const = default;
};
struct Peer {
  std::string id;
  PublicKeys keys;
};
// A box of shares from one client to another: `peer` is the receiver as it is sent, the
// sender as it is relayed.
struct Box {
  std::string peer;
  std::string bytes;
  // Relayed: the point the dealer must have given the receiver (0: not checked).
  uint8_t point = 0;
};
// A client's share of a peer's secret: of its mask seed b (a survivor), or of its mask
// private key (`key`: a dropped peer).
struct Reveal {
  std::string peer;
  bool key = false;
  Share share;
};

// The smallest threshold a client accepts for s shares: a strict majority, so that no one
// can hold enough shares of both a client's seed and its key.
int MinThreshold(int shares);

class SecAggClient {
 public:
  // A client's round: `context` names the job and round. INTERNAL if OpenSSL fails.
  static absl::StatusOr<SecAggClient> Create(std::string self, std::string context);

  const std::string& self() const { return self_; }
  const PublicKeys& public_keys() const { return public_; }

  // Phase 2: `neighbours` (with their keys, never self) and the threshold t. Returns a box
  // for each neighbour whose key agrees and the commitment to b. FAILED_PRECONDITION when
  // called twice; INVALID_ARGUMENT for t below MinThreshold(k + 1) or above k + 1, a
  // neighbour named twice or self, more than 254 neighbours.
  struct Shared {
    std::vector<Box> boxes;
    Key32 commitment{};
  };
  absl::StatusOr<Shared> ShareKeys(const std::vector<Peer>& neighbours, int threshold);
  // Phase 3's start: the boxes relayed to this client. Their senders become its peers,
  // which it masks against (the masks need only their public keys). Returns the peers
  // whose box did not open, parse or hold the point relayed with it: their shares are not
  // kept (a dealer's false box costs it its own secrets' holders, not this client's part).
  // FAILED_PRECONDITION before ShareKeys or when called twice; INVALID_ARGUMENT for a box
  // from a client that is not a neighbour, or twice.
  absl::StatusOr<std::set<std::string>> ReceiveShares(const std::vector<Box>& boxes);
  const std::set<std::string>& peers() const { return peers_; }
  // Adds this client's masks to `words` (its code, taken mod 2^bits), in place.
  // FAILED_PRECONDITION before ReceiveShares.
  absl::Status Mask(int bits, std::span<uint64_t> words) const;
  // Phase 4: the shares the request asks for (of those it holds). `survivors` and `dropped`
  // must split its peers and itself exactly (itself a survivor), with at least t survivors
  // and 2. The same
  // request again returns the same reveals; another is refused (FAILED_PRECONDITION),
  // since answering two could reveal a seed and a key of one peer.
  absl::StatusOr<std::vector<Reveal>> Unmask(const std::set<std::string>& survivors,
                                             const std::set<std::string>& dropped);

 private:
  SecAggClient(std::string self, std::string context, KeyPair enc, KeyPair mask, Key32 seed,
               KeyAgreement enc_agreement, KeyAgreement mask_agreement);

  std::string self_, context_;
  KeyPair enc_, mask_;
  KeyAgreement enc_agreement_, mask_agreement_;  // the private keys, loaded once
  std::map<std::string, Key32> box_keys_;          // of each neighbour, at ShareKeys
  PublicKeys public_;
  Key32 seed_{};  // b
  std::map<std::string, PublicKeys> neighbours_;
  int threshold_ = 0;
  bool shared_ = false;
  Share own_seed_share_, own_key_share_;
  // Peers' shares, from their boxes: seed share, key share.
  std::map<std::string, std::pair<Share, Share>> held_;
  std::set<std::string> peers_;
  bool received_ = false;
  std::optional<std::pair<std::set<std::string>, std::set<std::string>>> asked_;
};

// The server's view of one round. Errors about what a client sent are INVALID_ARGUMENT
// (bad content) or FAILED_PRECONDITION (not its turn, not a participant, sent already),
// and never change the state.
class SecAggServer {
 public:
  // `participants`: the round's clients; `degree`: the graph's (0: DefaultDegree);
  // `threshold`: the share of each client's k + 1 shares needed to rebuild its secrets
  // (t = floor(threshold x (k + 1)) + 1, at least MinThreshold); `graph_seed`: public.
  SecAggServer(std::string context, std::set<std::string> participants, int degree,
               double threshold, uint64_t graph_seed, int bits);

  // Phase 1. INVALID_ARGUMENT for a key that agrees with nothing (a low-order point) or
  // that another client already sent (a replayed key).
  absl::Status AddKeys(const std::string& client, const PublicKeys& keys);
  // Whether every participant not in `gone` has sent its keys.
  bool KeysIn(const std::set<std::string>& gone) const;
  // Closes phase 1: U1 and the graph. FAILED_PRECONDITION when fewer than 2 sent keys.
  absl::Status CloseKeys();
  const std::set<std::string>& keyed() const { return u1_; }
  // A client of U1's neighbours with their keys, and the round's t (after CloseKeys).
  std::vector<Peer> PeersOf(const std::string& client) const;
  // The keys a client sent (nullopt: none).
  std::optional<PublicKeys> KeysOf(const std::string& client) const;
  int threshold() const { return t_; }
  int degree() const { return degree_; }

  // Phase 2. `boxes`: at most one to each of its neighbours, none to anyone else.
  absl::Status AddShares(const std::string& client, std::vector<Box> boxes,
                         const Key32& commitment);
  bool SharesIn(const std::set<std::string>& gone) const;
  // Closes phase 2: U2, and each client's peers (its mutual edges within U2).
  // FAILED_PRECONDITION when fewer than 2 of U1 shared.
  absl::Status CloseShares();
  const std::set<std::string>& shared() const { return u2_; }
  // The boxes relayed to a client of U2 (one from each of its peers), sender as `peer`.
  std::vector<Box> BoxesFor(const std::string& client) const;

  // Phase 4: `masked`, the clients of U2 whose masked input arrived whole. Fails
  // (FAILED_PRECONDITION) when fewer than 2 arrived or some secret the sum needs has fewer
  // than t holders among them: the round cannot be unmasked.
  absl::Status BeginUnmask(const std::set<std::string>& masked);
  const std::set<std::string>& masked() const { return u3_; }
  // What a client of U3 is asked: its peers and itself that are in U3, and its peers that
  // are not.
  std::pair<std::set<std::string>, std::set<std::string>> RequestFor(
      const std::string& client) const;
  // A client's reveals, once: each share that RequestFor asked of it, at the point its
  // dealer gave the client and of 32 bytes, is kept; any other is left out, and said
  // (INVALID_ARGUMENT).
  absl::Status AddReveals(const std::string& client, const std::vector<Reveal>& reveals);
  // Whether every secret the sum needs has at least t shares.
  bool CanFinish() const;
  struct Finished {
    // Revealed a share off the polynomial of a secret that checked out. Either it lied or
    // its dealer dealt it a false share: nobody can tell which.
    std::set<std::string> off;
    size_t survivors = 0;  // seeds rebuilt
    size_t dropped = 0;    // keys rebuilt
  };
  // Rebuilds every seed and key the sum needs, checks them, and removes every mask from
  // `sum` (the masked words of U3 added mod 2^bits). FAILED_PRECONDITION when a secret
  // cannot be rebuilt from shares that check out; `sum` is then unchanged.
  absl::StatusOr<Finished> Finish(std::span<uint64_t> sum);
  // Dealers proven to have lied (after Finish): more than t shares of one of their
  // secrets agree on one polynomial, whose secret fails their own commitment or public
  // key.
  const std::set<std::string>& proven_liars() const { return proven_; }

 private:
  // The dealer's point for `holder`: 1 + holder's index in sorted({dealer} + neighbours).
  uint8_t PointOf(const std::string& dealer, const std::string& holder) const;
  // Secrets the sum needs: (dealer, key?) for each survivor's seed and each dropped
  // client some survivor masked against.
  std::vector<std::pair<std::string, bool>> Needed() const;
  // Rebuilds one secret from its shares, checking it; adds the senders of shares off it
  // to *off, and the dealer to *proven when its shares agree on a secret that fails.
  absl::StatusOr<Key32> Rebuild(const std::string& dealer, bool key, std::set<std::string>* off,
                                std::set<std::string>* proven) const;

  const std::string context_;
  const std::set<std::string> participants_;
  const double threshold_fraction_;
  const uint64_t graph_seed_;
  const int bits_;
  int degree_ = 0, t_ = 0;
  enum class Phase { kKeys, kShares, kMasked, kUnmask, kDone } phase_ = Phase::kKeys;
  std::map<std::string, PublicKeys> keys_;
  std::set<std::string> u1_, u2_, u3_;
  std::map<std::string, std::set<std::string>> graph_;  // over U1
  std::map<std::string, std::map<std::string, std::string>> boxes_;  // from -> to -> box
  std::map<std::string, Key32> commitments_;
  std::map<std::string, std::set<std::string>> peers_;  // mutual edges within U2
  // (dealer, key?) -> holder -> share.
  std::map<std::pair<std::string, bool>, std::map<std::string, Share>> reveals_;
  std::set<std::string> revealed_;
  std::set<std::string> proven_;
};

// The context of round `round` of a job whose rounds share `seed` (its public rotation
// seed): what every seed and box of that round is bound to, at both ends.
std::string RoundContext(uint64_t round, uint64_t seed);

// The commitment to a client's mask seed: SHA-256 over the context, its identity and the
// seed (exposed for tests).
absl::StatusOr<Key32> SeedCommitment(std::string_view context, std::string_view client,
                                     const Key32& seed);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_SECAGG_H_
