// SCAFFOLD's server control variate (see scaffold_rounds.h).
#include "modes/fedavg/scaffold_rounds.h"

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "base/str.h"
#include "coordinator/robust.h"
#include "core/float_bytes.h"
#include "modes/fedavg/algorithm.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::StatusOr<std::unique_ptr<ScaffoldRounds>> ScaffoldRounds::Create(uint64_t dim,
                                                                       std::string state_dir,
                                                                       uint64_t committed_round) {
  std::unique_ptr<ScaffoldRounds> r(new ScaffoldRounds(dim, std::move(state_dir)));
  if (committed_round == 0) return r;
  auto saved = LoadScaffoldControl(r->state_dir_, committed_round);
  if (absl::IsNotFound(saved.status())) {
    // Saving round r keeps round r - 1's file (core/state_file.h): with that one there and
    // this one gone, the file was lost, and c restarted at 0 would stay off the clients'
    // c_i for good (S only ever adds their changes).
    if (committed_round > 1 &&
        LoadScaffoldControl(r->state_dir_, committed_round - 1).status().code() !=
            absl::StatusCode::kNotFound) {
      return absl::DataLossError(StrCat(
          ScaffoldControlPath(r->state_dir_, committed_round),
          " is missing beside the checkpoint of its round, while round ", committed_round - 1,
          "'s is there: the server's control variate of a "
          "SCAFFOLD job cannot be rebuilt (start the job again)"));
    }
    // A checkpoint of before --algorithm scaffold: every client's c_i is 0, and so is c.
    log::Info("coordinator", "no SCAFFOLD state beside the checkpoint of round %llu: c starts at 0",
              static_cast<unsigned long long>(committed_round));
    return r;
  }
  if (!saved.ok()) return saved.status();
  const std::string path = ScaffoldControlPath(r->state_dir_, committed_round);
  if ((!saved->sum.empty() && saved->sum.size() != dim) ||
      (!saved->control.empty() && saved->control.size() != dim)) {
    return absl::DataLossError(StrCat(path, ": a control variate of ", saved->control.size(),
                                      " values (sum ", saved->sum.size(), ") for a model of ",
                                      dim));
  }
  absl::MutexLock lock(&r->mu_);
  r->sum_ = std::move(saved->sum);
  r->weights_ = std::move(saved->weights);
  r->control_ = std::move(saved->control);
  if (r->control_.empty()) r->control_.assign(dim, 0.0f);
  r->total_weight_ = saved->total_weight;
  r->version_ = saved->version;
  // Served as saved, to the bit: the compressed downlink's chain of this blob goes on from
  // the state it saved at this version (coordinator/downlink.h).
  r->blob_ = coordinator::MakeBlob(r->version_, core::FloatsToBytes(r->control_));
  r->served_ = true;
  return r;
}

void ScaffoldRounds::BeginRound(const coordinator::RoundEngine& engine) {
  const uint64_t version = engine.model()->version;
  absl::MutexLock lock(&mu_);
  if (served_ && version_ == version) return;
  // No commit moved c since it was made (the job's first round, a checkpoint without
  // SCAFFOLD state): the same values, at the version the round trains from. Versions only
  // grow (the engine's), as the downlink's chains need.
  if (control_.size() != dim_) control_.assign(dim_, 0.0f);
  version_ = version;
  blob_ = coordinator::MakeBlob(version_, core::FloatsToBytes(control_));
  served_ = true;
}

std::shared_ptr<coordinator::Collector> ScaffoldRounds::Wrap(
    std::shared_ptr<coordinator::Collector> model_part) {
  // The changes are never clipped (the invariant above holds only for what the client
  // sent) and are kept as their frames: the commit may count some clients and not others
  // (the guard's exclusions, Krum's choice), and S takes exactly the counted ones.
  changes_ = std::make_shared<coordinator::PerClientCollector>(/*compact=*/true);
  // Null decoders: each part decodes with the round's codec (the client's, under a codec
  // ladder: RoundEngine::FactsLocked), the one the client encoded both parts with.
  std::vector<coordinator::PartCollector::Part> parts = {{std::move(model_part), nullptr},
                                                         {changes_, nullptr}};
  return std::make_shared<coordinator::PartCollector>(std::move(parts));
}

absl::Status ScaffoldRounds::Commit(const coordinator::CommitResult& commit,
                                    const coordinator::RoundEngine& engine, RoundReport* report) {
  std::shared_ptr<coordinator::PerClientCollector> changes = std::move(changes_);
  if (changes == nullptr) return absl::InternalError("a SCAFFOLD commit of a round never wrapped");
  const auto updates = changes->TakeUpdates();
  // Every client that ever joined, with its sample count (roster.h): W_all's terms.
  const std::map<std::string, uint64_t> samples = engine.roster().Clients();
  // The clients whose change counts, with their weights. The engine counts every chunk it
  // holds of a counted client (round_engine.cc CloseLocked): a receipt that counts any
  // chunk counts all of its part 1 that arrived; what did not arrive stays in the client's
  // residual.
  std::map<std::string, double> counted;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [client, rc] : commit.receipts) {
      if (rc.counted.empty() || !updates.count(client)) continue;  // nothing of part 1 held
      if (auto f = weights_.find(client); f != weights_.end()) {
        counted[client] = f->second;
      } else if (auto s = samples.find(client); s != samples.end() && s->second > 0) {
        counted[client] = static_cast<double>(s->second);  // fixed from now on
      }
    }
  }
  // sum of w_i delta c_i, decoded outside the lock (Blob and Decorate wait on it on gRPC
  // threads). Fill decodes each update with the decoder its client's chunks were
  // collected with (part 1's: PartCollector::FactsOf), as RunBufferedRound's mean does.
  std::vector<double> add(dim_, 0.0);
  std::vector<float> dense(dim_);
  for (const auto& [client, w] : counted) {
    std::fill(dense.begin(), dense.end(), 0.0f);
    if (absl::Status st = changes->Fill(updates.at(client), dense); !st.ok()) return st;
    for (size_t j = 0; j < dim_; ++j) add[j] += w * dense[j];
    report->per_client["scaffold_change_norm"][client] = coordinator::L2Norm(dense);
  }
  absl::MutexLock lock(&mu_);
  if (sum_.size() != dim_) sum_.assign(dim_, 0.0);
  for (size_t j = 0; j < dim_; ++j) sum_[j] += add[j];
  for (const auto& [client, w] : counted) weights_.emplace(client, w);
  // W_all: each client's weight in S (fixed when first counted), or for one never counted,
  // whose c_i is 0, its sample count now.
  double total = 0;
  for (const auto& [client, n] : samples) {
    const auto f = weights_.find(client);
    total += f != weights_.end() ? f->second : static_cast<double>(n);
  }
  PublishLocked(engine.model()->version, total);
  report->figures["scaffold_counted"] = static_cast<double>(counted.size());
  report->figures["scaffold_total_weight"] = total;
  report->figures["scaffold_control_norm"] = coordinator::L2Norm(control_);
  return absl::OkStatus();
}

void ScaffoldRounds::Drop() { changes_.reset(); }

void ScaffoldRounds::PublishLocked(uint64_t version, double total_weight) {
  control_.assign(dim_, 0.0f);
  if (total_weight > 0 && sum_.size() == dim_) {
    for (size_t j = 0; j < dim_; ++j) control_[j] = static_cast<float>(sum_[j] / total_weight);
  }
  total_weight_ = total_weight;
  version_ = version;
  blob_ = coordinator::MakeBlob(version_, core::FloatsToBytes(control_));
  served_ = true;
}

void ScaffoldRounds::Decorate(protos::RoundStart* start) const {
  absl::MutexLock lock(&mu_);
  start->mutable_objective()->mutable_scaffold()->set_control_version(version_);
}

absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> ScaffoldRounds::Blob(
    uint64_t version) const {
  absl::MutexLock lock(&mu_);
  if (!served_ || version != version_) {
    return absl::NotFoundError(StrCat(kScaffoldControlBlob, " version ", version,
                                      " is not served; the current version is ", version_));
  }
  return blob_;
}

ScaffoldControl ScaffoldRounds::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return ScaffoldControl{sum_, control_, version_, total_weight_, weights_};
}

absl::Status ScaffoldRounds::Save(uint64_t round) const {
  return SaveScaffoldControl(state_dir_, round, Snapshot());
}

}  // namespace fedlgc::modes
