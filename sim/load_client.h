// One client of fedlgc-load: it speaks the real protocol through the edge client's
// Transport (mTLS, Join, the event stream, resumable downloads, chunked resumable uploads,
// receipts, reconnects with backoff), but in place of training it waits a think time and
// sends a synthetic update: coordinates uniform in [-scale, scale], drawn from the
// client's index and the round, through the round's codec. It keeps no residual. It
// reports each step, and the decoded chunks each receipt counted, to the LoadBook.
#ifndef FEDLGC_SIM_LOAD_CLIENT_H_
#define FEDLGC_SIM_LOAD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "core/model.h"
#include "edge_client/client_state.h"
#include "edge_client/transport.h"
#include "sim/load_book.h"

namespace fedlgc::sim {

struct LoadClientOptions {
  edge_client::TransportOptions transport;
  uint64_t samples = 100;     // num_samples at Join: every client weighs the same
  double think_s = 1;         // in place of local training
  double think_jitter = 0.5;  // the think time is uniform in think_s x [1 - j, 1 + j]
  float update_scale = 1e-3f;
  uint64_t seed = 1;
  // Whether the models downloaded are the true global models, which the aggregate check
  // takes (LoadBook::Model); under a compressed downlink they are what its deltas rebuild.
  bool true_models = true;
};

// The update client `index` sends in `round`: `dim` values uniform in [-scale, scale].
std::vector<float> SyntheticUpdate(uint64_t seed, uint32_t index, uint64_t round, uint64_t dim,
                                   float scale);

// Not thread-safe except Stop(): Run() on a thread of its own.
class LoadClient {
 public:
  LoadClient(uint32_t index, LoadClientOptions options, LoadBook* book,
             monitoring::Metrics* metrics);
  LoadClient(const LoadClient&) = delete;
  LoadClient& operator=(const LoadClient&) = delete;

  // Until the job is done (OK), Stop() (CANCELLED) or an error a retry cannot fix.
  absl::Status Run();
  void Stop() { transport_.Stop(); }
  // The job's dimension once joined (0 before).
  uint64_t dim() const { return dim_; }

 private:
  absl::Status JoinJob();
  absl::StatusOr<edge_client::EventVerdict> Handle(const protos::ServerEvent& event);
  absl::Status OnRoundStart(const protos::RoundStart& start);
  // The round's update, encoded (nullopt: the round moved on before the download).
  absl::StatusOr<std::optional<edge_client::PendingUpdate>> Prepare(
      const protos::RoundStart& start, edge_client::SystemTime deadline);
  absl::Status OnReceipt(const protos::RoundReceipt& receipt);
  absl::Status EnsureCodec(const std::string& spec);

  const uint32_t index_;
  const LoadClientOptions options_;
  LoadBook* const book_;
  edge_client::Transport transport_;
  std::mt19937_64 think_rng_;
  uint64_t dim_ = 0;
  core::ModelOptions model_;  // the job's model and its rules, from Join
  bool done_ = false;
  std::string codec_spec_;
  std::unique_ptr<codecs::Codec> codec_;
  std::optional<edge_client::PendingUpdate> pending_;
};

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_LOAD_CLIENT_H_
