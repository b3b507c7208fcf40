// How a secure aggregation round (secagg_rounds.h) collects: each client's frames of words
// in Z_(2^b) (codecs/zmod_frame.h), held apart until the client's update is whole, then
// added into one sum mod 2^(sum bits). A masked word means nothing alone, so a client
// counts whole or not at all: what arrived of an update that never completes is dropped
// when the round closes (its sender is then a dropped client, whose masks the unmasking
// removes from the others'). In a round without masks the words are codes in two's
// complement of `frame_bits`, each checked to lie in [-levels, levels] and added signed.
// Thread-safe (the engine calls Admit and Collect under its lock, Decode from any
// thread; the accessors take the collector's own lock).
#ifndef FEDLGC_MODES_FEDAVG_SECAGG_COLLECTOR_H_
#define FEDLGC_MODES_FEDAVG_SECAGG_COLLECTOR_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/collector.h"

namespace fedlgc::modes {

class ZmodSumCollector final : public coordinator::Collector {
 public:
  // A code of `words` words; frames of `frame_bits`, summed mod 2^sum_bits; `levels` > 0:
  // the words are unmasked codes in [-levels, levels] (0: masked words, any value).
  ZmodSumCollector(uint64_t words, int frame_bits, int sum_bits, int levels);

  // Only `clients` may upload from now on (a masked round: those who got their peers'
  // shares); nullopt (the default): every participant.
  void AllowOnly(std::optional<std::set<std::string>> clients);

  std::optional<coordinator::Rejection> Admit(const coordinator::ChunkIn& chunk,
                                              const coordinator::HeldUpdate* held,
                                              const coordinator::RoundFacts& round) const override;
  absl::StatusOr<coordinator::DecodedChunk> Decode(const coordinator::ChunkIn& chunk,
                                                   const coordinator::RoundFacts& round) const override;
  void Collect(const coordinator::ChunkIn& chunk, coordinator::DecodedChunk decoded, bool fresh,
               bool complete, const coordinator::RoundFacts& round) override;

  // The clients whose update is whole (every word of the code, and in the sum; an update
  // whose chunks are all in but miss words is dropped).
  std::set<std::string> Complete() const;
  // The sum mod 2^sum_bits of the whole updates' words.
  std::vector<uint64_t> Sum() const;
  int sum_bits() const { return sum_bits_; }

 private:
  const uint64_t words_;
  const int frame_bits_, sum_bits_, levels_;
  mutable absl::Mutex mu_;
  std::optional<std::set<std::string>> allowed_ ABSL_GUARDED_BY(mu_);
  // Incomplete updates' chunks: begin -> words.
  std::map<std::string, std::map<uint64_t, std::vector<uint32_t>>> partial_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> complete_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> sum_ ABSL_GUARDED_BY(mu_);
};

// The signed value of a word of `bits` bits in two's complement.
int64_t SignExtend(uint64_t word, int bits);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SECAGG_COLLECTOR_H_
