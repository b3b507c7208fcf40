// The coordinator process: the round engine, the gRPC server (mTLS by default), the
// metrics exposer, evaluation of the global model, checkpoints, and the loop that drives
// rounds (quorum, participation fraction, deadline).
#ifndef FEDLGC_COORDINATOR_COORDINATOR_H_
#define FEDLGC_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/lgc_driver.h"
#include "coordinator/lsgd_driver.h"
#include "coordinator/round_engine.h"
#include "coordinator/sgp_driver.h"
#include "protos/fedlgc.pb.h"

namespace grpc {
class Server;
}

namespace fedlgc::core {
class Model;
struct Dataset;
}  // namespace fedlgc::core

namespace fedlgc::monitoring {
class Metrics;
}

namespace fedlgc::coordinator {

class CoordinatorService;

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";
  std::string metrics_listen = "127.0.0.1:0";  // empty: no exposer
  std::string state_dir = "state/coordinator";
  std::string model = "cnn";
  uint64_t init_seed = 1;
  uint32_t rounds = 20;
  uint32_t min_clients = 1;      // quorum to open a round
  double fraction = 1.0;         // of connected clients per round
  double round_timeout_s = 300;  // deadline after opening
  RoundPlan plan;
  std::string mode = "fedavg";  // "fedavg", "lsgd" or "sgp"
  LsgdOptions lsgd;
  bool sgp_reference = true;  // SGP: code shares relative to the round's network mean
  uint32_t sgp_overlap = 0;   // SGP: 1 lets clients train their next period while a share travels
  float server_lr = 1.0f;
  float server_momentum = 0.0f;
  double ratio_target = 0;         // exported for the compression-ratio alert; 0: none
  std::string lgc_leader;          // LGC jobs: the leader client; empty: the best measured link
  std::string ae_device = "auto";  // where the LGC autoencoder trains
  double linger_s = 0;             // seconds to keep serving /metrics after the last round
  uint32_t eval_every = 1;         // 0: never
  size_t eval_limit = 0;           // test examples (0 = all)
  std::string test_data = "fashion-mnist";  // or "synthetic:N"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // TLS: CA for client certificates, server certificate and key.
  std::string tls_ca, tls_cert, tls_key;
  bool insecure = false;
  uint32_t max_message_bytes = 4 << 20;
  uint64_t seed = 1;
  int torch_threads = 1;

  absl::Status Validate() const;
  // Identifies the job in checkpoints: changing any of these makes a new job.
  std::string JobKey(uint64_t dim) const;
};

struct RoundReport {
  uint64_t round = 0;
  double accuracy = -1, loss = -1;
  uint64_t uplink_bytes = 0, raw_uplink_bytes = 0, downlink_bytes = 0;
  double seconds = 0;
  int participants = 0, stragglers = 0;
  int lgc_stage = 0;  // LGC jobs: 1 warm-up, 2 autoencoder training, 3 compressed
  std::string lgc_leader;
  double ae_reconstruction = -1, ae_similarity = -1;  // stage 2: the step's losses
  double lgc_values_cosine = -2;                      // stage 2 (see LgcDriver::Outcome)
  int lgc_rebuild_mismatches = 0;                     // predict=1, stage 3 (the same)
  double ae_seconds = 0;                              // stage 2: time of the step
  std::string lsgd_leader;                            // LSGD: the global leader
  std::map<std::string, double> lsgd_losses;          // LSGD: the reported running losses
  double sgp_consensus_distance = -1;                 // SGP
  bool hit_deadline = false;
};

// Thread-safe: Run on one thread, Stop from any.
class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);
  ~Coordinator();

  // Starts the gRPC server and metrics. Loads the checkpoint if there is one.
  absl::Status Start();
  int port() const { return port_; }
  int metrics_port() const;
  // Drives rounds until `rounds` have committed or Stop() is called.
  absl::Status Run();
  void Stop();

  RoundEngine& engine() { return *engine_; }
  SgpDriver* sgp() { return sgp_.get(); }     // SGP jobs only
  LsgdDriver* lsgd() { return lsgd_.get(); }  // LSGD jobs only
  monitoring::Metrics& metrics() { return *metrics_; }
  std::vector<RoundReport> reports() const;

 private:
  explicit Coordinator(CoordinatorOptions options);
  absl::Status RunRound();
  // One round of each mode, from opening to the engine's commit (coordinator_modes.cc
  // for LSGD and SGP). On Stop() they return OK with nothing committed.
  absl::Status RunFedAvgRound(const std::vector<std::string>& participants,
                              Clock::time_point deadline, CommitResult* commit, RoundReport* rep);
  absl::Status RunLsgdRound(const std::vector<std::string>& participants,
                            Clock::time_point deadline, CommitResult* commit, RoundReport* rep);
  absl::Status RunSgpRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                           CommitResult* commit, RoundReport* rep);
  // Opens the engine's next round for `participants` (`uploaders` when given, else all of
  // them, send updates) and sends each its RoundStart.
  absl::Status StartRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                          RoundMode mode, const std::set<std::string>* uploaders = nullptr);
  // Evaluation, driver state, checkpoint, metrics, receipts and the round's report.
  absl::Status FinishRound(const CommitResult& commit, RoundReport rep);
  // Waits on cv_ until `done` or the deadline or Stop(), calling `tick` every 100 ms
  // without the lock.
  void WaitUntil(Clock::time_point deadline, const std::function<bool()>& done,
                 const std::function<void()>& tick = nullptr);
  // Clients with neither an event stream nor a call for 3 s, counting from `since` at
  // the earliest (a reconnect is briefly absent).
  std::set<std::string> Vanished(const std::set<std::string>& watched, Clock::time_point since);
  void WakeUp();
  // LGC predict=1: once a payload of one of `leaders` (`leader` first) is in, sends its
  // support and latent to the other participants (LgcLatent) and keeps them for RoundStart;
  // *pushed names the payload's sender.
  absl::Status PushLgcLatent(uint64_t round, const std::string& leader,
                             const std::set<std::string>& leaders,
                             const std::vector<std::string>& participants,
                             const std::map<std::string, RoundEngine::Payload>& payloads,
                             std::string* pushed);
  // LGC: the leader among `participants` (--lgc-leader, else the best measured link),
  // skipping `tried`; empty when none is left.
  std::string ChooseLeader(const std::vector<std::string>& participants,
                           const std::set<std::string>& tried) const;
  void DecorateRoundStart(const std::string& client, protos::RoundStart* s);

  CoordinatorOptions options_;
  std::unique_ptr<monitoring::Metrics> metrics_;
  std::unique_ptr<RoundEngine> engine_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<core::Model> eval_model_;
  std::unique_ptr<core::Dataset> test_data_;
  std::string job_key_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RoundReport> reports_;
  double last_accuracy_ = -1;
  // LGC jobs only.
  std::unique_ptr<LgcDriver> lgc_;
  struct LgcRound {
    uint64_t round = 0;
    int stage = 0;
    std::string leader;
    std::string support;  // bytes for RoundStart
    std::string latent;   // predict=1: the latent pushed to the round's clients
  };
  LgcRound lgc_round_;  // guarded by mu_
  bool encoder_published_ = false;
  std::string last_leader_;  // the leader of the last LGC round
  std::unique_ptr<LsgdDriver> lsgd_;
  std::unique_ptr<SgpDriver> sgp_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_COORDINATOR_H_
