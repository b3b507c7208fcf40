// The three collection strategies of a round (see collector.h).
#ifndef FEDLGC_COORDINATOR_COLLECTORS_H_
#define FEDLGC_COORDINATOR_COLLECTORS_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/collector.h"
#include "coordinator/robust.h"

namespace fedlgc::coordinator {

// FedAvg's streaming aggregator: sum_c w_c x_c and sum_c w_c per coordinate, w_c the
// client's weight in the round, so that each coordinate's mean is over the clients whose
// chunk for it arrived. O(dim) memory whatever the number of clients. With a `clip_bound`
// B > 0, the chunks of one update are scaled in arrival order so that what counts of it
// has norm at most B (a chunk that would pass B is scaled to what is left).
// With a summable codec (`code`: the round's decoder, which must outlive the collector),
// the sums are of the chunks' codes, O(code size), and nothing is decoded until Mean
// decodes the mean code once; codes keep norms, so clipping reads them as they are.
class WeightedSumCollector final : public Collector {
 public:
  explicit WeightedSumCollector(uint64_t dim, double clip_bound = 0,
                                const codecs::LinearCode* code = nullptr);
  absl::StatusOr<DecodedChunk> Decode(const ChunkIn& chunk, const RoundFacts& round) const override;
  void Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
               const RoundFacts& round) override;
  // Per coordinate, the weighted mean of what arrived (0 where nothing did); an error
  // only when the mean code decodes to values that are not finite.
  absl::StatusOr<std::vector<float>> Mean() const;
  // Each client's update norm as sent (before clipping), of the chunks that arrived.
  std::map<std::string, double> Norms() const;
  // Updates scaled down by the bound.
  int clipped() const;

 private:
  const double clip_bound_;
  const codecs::LinearCode* const code_;
  const uint64_t dim_;
  mutable absl::Mutex mu_;
  std::vector<double> sum_ ABSL_GUARDED_BY(mu_);  // of values, or of codes
  std::vector<float> weight_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> sent_sq_ ABSL_GUARDED_BY(mu_);     // squared norm as sent
  std::map<std::string, double> counted_sq_ ABSL_GUARDED_BY(mu_);  // squared norm counted
  std::set<std::string> clipped_ ABSL_GUARDED_BY(mu_);
};

// FedAvg's buffered aggregators, LSGD and SGP (inside SGP's push-sum collector,
// modes/sgp/push_sum_collector.h): each client's decoded update, kept apart for the driver
// (O(clients x dim) memory). `compact` keeps each update as the frames that arrived
// (O(clients x compressed size)) and decodes it again on demand (Fill), one client at a
// time: the buffered mean needs one dense vector, not one per client.
class PerClientCollector final : public Collector {
 public:
  explicit PerClientCollector(bool compact = false) : compact_(compact) {}
  absl::StatusOr<DecodedChunk> Decode(const ChunkIn& chunk, const RoundFacts& round) const override;
  void Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
               const RoundFacts& round) override;

  // A chunk of a compact update: its frame and scale, and the sum of its decoded values'
  // squares.
  struct Frame {
    uint64_t begin = 0;
    std::string bytes;
    float scale = 1;
    double sum_sq = 0;
  };
  struct Update {
    std::vector<float> values;  // zero where no chunk arrived; empty when compact
    std::vector<Frame> frames;  // compact: the chunks that arrived
    std::vector<Range> ranges;  // the coordinates that arrived, sorted and merged
    bool complete = false;
    uint64_t completed = 0;   // when complete: 1 for the first update completed, 2, ...
    double weight = 0;  // the client's weight in the round
    // Compact: the decoder of its client's codec (a codec ladder gives each its own),
    // and what keeps a decoder the round chose alive.
    const codecs::Codec* decoder = nullptr;
    std::shared_ptr<const codecs::Codec> keep;
    // The L2 norm of what arrived (compact: from the chunks' sums in coordinate order).
    double Norm() const;
  };
  std::map<std::string, Update> Updates() const;
  // The updates of `clients` (those held), copied.
  std::map<std::string, Update> UpdatesOf(const std::set<std::string>& clients) const;
  // The updates, moved out: the collector holds nothing after (the round is frozen).
  std::map<std::string, Update> TakeUpdates();
  // Writes a compact update's values over the whole dimension into `dense` (zeros where
  // nothing arrived), decoded with its client's codec.
  absl::Status Fill(const Update& update, std::span<float> dense) const;
  // The clients whose update is complete (cheap: no copy of the values).
  std::set<std::string> CompleteClients() const;
  // How many updates are complete (cheap).
  size_t CompleteCount() const;
  // The (at most) k clients whose updates completed first.
  std::set<std::string> EarliestComplete(size_t k) const;
  void Forget(const std::string& client) override;
  void Completed(const std::string& client) override;

 private:
  const bool compact_;
  mutable absl::Mutex mu_;
  std::map<std::string, Update> updates_ ABSL_GUARDED_BY(mu_);
  uint64_t completions_ ABSL_GUARDED_BY(mu_) = 0;
  RoundFacts facts_ ABSL_GUARDED_BY(mu_);  // of the round, for Fill
};

// LGC and two-phase PowerSGD: one frame over the whole model per client, whose body
// `validate` checks; the driver decodes and aggregates the payloads itself.
class PayloadCollector final : public Collector {
 public:
  // Checks a payload's spec and body; a refusal's reason comes from its status
  // (rejection.h: codecs::WrongCodecError for a spec the round does not take).
  using Validator = std::function<absl::Status(std::string_view spec, std::span<const uint8_t>)>;
  explicit PayloadCollector(Validator validate) : validate_(std::move(validate)) {}
  bool replaces_updates() const override { return true; }
  std::optional<Rejection> Admit(const ChunkIn& chunk, const HeldUpdate* held,
                                 const RoundFacts& round) const override;
  absl::StatusOr<DecodedChunk> Decode(const ChunkIn& chunk, const RoundFacts& round) const override;
  void Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
               const RoundFacts& round) override;

  struct Payload {
    std::string spec;
    std::string body;
    double weight = 0;  // the client's weight in the round
  };
  std::map<std::string, Payload> Payloads() const;
  // How many clients' latest payload has `spec` (cheap: no copy).
  size_t Count(std::string_view spec) const;

 private:
  const Validator validate_;
  mutable absl::Mutex mu_;
  std::map<std::string, Payload> payloads_ ABSL_GUARDED_BY(mu_);
};

// An update of several parts, each a vector of the model's dimension collected by a
// collector of its own (SCAFFOLD: the model update and the control variate's; the
// engine's ranges, overlaps and receipts are per part, chunk indices span the parts). A
// part's chunks decode with its own decoder (null: the round's codec). `fresh` reaches a
// part's collector with the first chunk of that part of an update; `complete` (the whole
// update held) with the update's last chunk, to that chunk's part, and to every other part
// the update has begun as Completed(client): a PerClientCollector of part 0 (FedAvg's mean
// and robust aggregators) knows its complete updates whichever part arrived last.
class PartCollector final : public Collector {
 public:
  struct Part {
    std::shared_ptr<Collector> collector;
    std::shared_ptr<const codecs::Codec> decoder;  // null: the round's
  };
  // Part i is parts[i]; each collector must take neither replacing updates nor shares.
  explicit PartCollector(std::vector<Part> parts);
  uint32_t parts() const override { return static_cast<uint32_t>(parts_.size()); }
  std::optional<Rejection> Admit(const ChunkIn& chunk, const HeldUpdate* held,
                                 const RoundFacts& round) const override;
  absl::StatusOr<DecodedChunk> Decode(const ChunkIn& chunk, const RoundFacts& round) const override;
  void Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
               const RoundFacts& round) override;
  void Forget(const std::string& client) override;

 private:
  // The round's facts as part `part` sees them (its decoder).
  RoundFacts FactsOf(uint32_t part, const RoundFacts& round) const;

  const std::vector<Part> parts_;
  absl::Mutex mu_;
  std::map<std::string, std::set<uint32_t>> begun_ ABSL_GUARDED_BY(mu_);  // parts with a chunk
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_COLLECTORS_H_
