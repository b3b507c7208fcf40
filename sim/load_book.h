// fedlgc-load's ledger: what its emulated clients did in each round (when the round
// start arrived, the download, the upload and its latency, the receipt), and the check
// that every emulated update counted exactly once. The clients report here from their
// own threads; the main thread takes each round's figures once the round is settled.
//
// The check: the coordinator's FedAvg step without server momentum makes the model of
// version v + 1 the model of version v plus the server lr times the per-coordinate mean
// of the counted chunks (every client weighs the same). Each client decodes the chunks its
// receipt counted and adds them here; once both models are known the new model must
// equal the old one plus that mean, coordinate by coordinate, to within the rounding of
// float32. A chunk counted twice or not at all moves a coordinate by a whole client's
// share, thousands of times that rounding.
#ifndef FEDLGC_SIM_LOAD_BOOK_H_
#define FEDLGC_SIM_LOAD_BOOK_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace fedlgc::sim {

// Values of one counted chunk: coordinates [begin, begin + values.size()).
struct CountedChunk {
  uint64_t begin = 0;
  std::vector<float> values;
};

// The outcome of the aggregate check of one round.
struct AggregateCheck {
  bool made = false;  // false: a model or a receipt was missing (why says which)
  bool ok = false;
  std::string why;
  uint64_t coordinates = 0;      // compared
  uint64_t off = 0;              // farther from the expected mean than the rounding allows
  double worst_gap = 0;          // largest |actual - expected| step
  double worst_ratio = 0;        // largest gap / allowed rounding
  double median_allowed = 0;     // the median rounding allowed per coordinate
};

// Compares new - old with lr x the mean of the counted chunks (sum / count per
// coordinate): per coordinate |(new - old) - step| <= ulp(new) + ulp(old) + ulp(step).
AggregateCheck CheckAggregate(const std::vector<float>& old_model,
                              const std::vector<float>& new_model, const std::vector<double>& sum,
                              const std::vector<uint32_t>& count, float lr = 1);

// One round as the emulated clients saw it.
struct RoundFigures {
  uint64_t round = 0;
  uint64_t model_version = 0;
  uint32_t started = 0;       // clients that received the round's start
  uint32_t uploaded = 0;      // clients whose upload finished
  uint32_t receipts = 0;      // receipts received (and checked against the aggregate)
  uint32_t participants = 0;  // receipts that counted at least one chunk
  uint64_t counted_chunks = 0, chunks = 0;
  double opened = 0;     // seconds since the run's start: the first round start received
  double committed = 0;  // the first receipt received
  double last_receipt = 0;
  double seconds = 0;         // committed - opened
  double slowest_client = 0;  // the longest start-to-uploaded of a participant
  double overhead = 0;        // seconds - slowest_client
  double download_p50 = 0, upload_p50 = 0, upload_p99 = 0;  // seconds
  uint64_t up_bytes = 0, down_bytes = 0;
  AggregateCheck check;
};

// Thread-safe.
class LoadBook {
 public:
  // `check`: keep the models and sums the aggregate check needs; `server_lr` is the
  // coordinator's.
  explicit LoadBook(bool check, float server_lr = 1);

  // Seconds since the book was made.
  double Now() const;
  void Started(uint64_t round, uint64_t model_version, uint32_t client);
  void Downloaded(uint64_t round, uint32_t client, uint64_t bytes, double seconds);
  // Whether the model of `version` is still wanted for a check (then pass it to Model).
  bool WantsModel(uint64_t version) const;
  void Model(uint64_t version, std::vector<float> values);
  void Uploaded(uint64_t round, uint32_t client, double seconds, uint64_t bytes, uint32_t chunks);
  // The client could not take part (the round moved on before its download): the round
  // does not wait for its receipt, which the coordinator need not send again.
  void SentNothing(uint64_t round, uint32_t client);
  // A receipt, with the decoded values of the chunks it counted.
  void Receipt(uint64_t round, uint32_t client, uint32_t chunk_count,
               const std::vector<CountedChunk>& counted);
  // A client's join or event stream broke with `status` (it reconnects).
  void Broke(const absl::Status& status);
  // Breaks so far by status code ("UNAVAILABLE: 12 (first: ...)").
  std::map<std::string, std::string> Breaks() const;
  uint64_t breaks() const;

  // The last model version any round started with; nullopt before the first round.
  std::optional<uint64_t> last_version() const;

  // The rounds settled since the last call, in order: each has every receipt of a client
  // that started it and the model after it. With `final`, every round left, settled or not.
  std::vector<RoundFigures> TakeSettled(bool final);

 private:
  struct ClientRound {
    double started = -1, uploaded = -1;
    double download_s = -1, upload_s = -1;
    bool receipt = false;
    bool sent_nothing = false;
  };
  struct Round {
    uint64_t model_version = 0;
    std::map<uint32_t, ClientRound> clients;
    RoundFigures figures;
    std::vector<double> sum;  // of counted values, per coordinate
    std::vector<uint32_t> count;
  };
  bool SettledLocked(const Round& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RoundFigures FinishLocked(uint64_t round, Round& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool check_;
  const float server_lr_;
  const std::chrono::steady_clock::time_point start_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Round> rounds_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::vector<float>> models_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> last_version_ ABSL_GUARDED_BY(mu_);
  uint64_t taken_ ABSL_GUARDED_BY(mu_) = 0;  // rounds up to this one were taken
  // By status code: how many, and the first message.
  std::map<std::string, std::pair<uint64_t, std::string>> breaks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_LOAD_BOOK_H_
