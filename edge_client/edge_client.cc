// Edge client (see edge_client.h).
#include "edge_client/edge_client.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include "absl/synchronization/mutex.h"
#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "core/dataset.h"
#include "core/export.h"
#include "core/float_bytes.h"
#include "core/model.h"
#include "core/partition.h"
#include "core/sha256.h"
#include "monitoring/metrics.h"
#include "nlohmann/json.hpp"
#include "protos/fedlgc.pb.h"

namespace fedlgc::edge_client {
namespace {

// CPU seconds: the calling thread's, or the whole process's.
double CpuSeconds(bool this_thread) {
  timespec t{};
  ::clock_gettime(this_thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

SharedResources Completed(SharedResources s) {
  if (s.metrics == nullptr) s.metrics = std::make_shared<monitoring::Metrics>();
  if (s.models == nullptr) s.models = std::make_shared<ModelPool>(1);
  if (s.data == nullptr) s.data = std::make_shared<DataCache>();
  return s;
}

}  // namespace

SystemTime DeadlineOf(const protos::RoundStart& start) {
  return SystemTime(std::chrono::milliseconds(start.deadline_unix_ms()));
}

EdgeClient::EdgeClient(EdgeClientOptions options, ClientModeFactory make_mode, StubFactory stubs,
                       LocalTrainer* trainer, SharedResources shared)
    : options_(std::move(options)),
      make_mode_(std::move(make_mode)),
      trainer_(trainer),
      shared_(Completed(std::move(shared))),
      metrics_(shared_.metrics.get()),
      transport_(std::make_unique<Transport>(options_.transport(), metrics_, std::move(stubs))) {}

EdgeClient::~EdgeClient() {
  Stop();
  if (client_mode_) client_mode_->Settle();
}

absl::StatusOr<std::unique_ptr<EdgeClient>> EdgeClient::Create(EdgeClientOptions options,
                                                               ClientModeFactory make_mode,
                                                               StubFactory stubs,
                                                               LocalTrainer* trainer,
                                                               SharedResources shared) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  if (!options.export_path.empty()) {
    auto files = core::ExportFiles::For(options.export_path);
    if (!files.ok()) return files.status();
    if (absl::Status st = core::PrepareExport(*files); !st.ok()) return st;
  }
  std::unique_ptr<EdgeClient> c(new EdgeClient(std::move(options), std::move(make_mode),
                                               std::move(stubs), trainer, std::move(shared)));
  const EdgeClientOptions& o = c->options_;
  c->attack_ = Attack::Parse(o.attack).value();  // validated
  if (c->attack_.active()) {
    log::Warning(o.client_id, "--attack %s: this client lies about its updates",
                 c->attack_.Spec().c_str());
  }
  core::SetTorchThreads(o.torch_threads);
  if (trainer == nullptr) {
    if (absl::Status st = c->LoadData(); !st.ok()) return st;
    if (!o.eval_data.empty()) {
      core::DataOptions d = o.data_options();
      d.spec = o.eval_data;
      auto eval = core::LoadDataset(d, /*train=*/false);
      if (!eval.ok()) {
        return absl::Status(eval.status().code(), StrCat("--eval-data: ", eval.status().message()));
      }
      c->eval_data_ = std::make_unique<core::Dataset>(*std::move(eval));
    }
  }
  // Resolve the device now, so a wrong --device fails at start rather than at join.
  auto device = c->shared_.models->ResolveDevice(o.device);
  if (!device.ok()) return device.status();
  c->device_ = *device;
  if (!o.model.empty()) {
    // This client's copy of the job's file: TorchScript, fit for the data, before a join.
    auto sha = core::Sha256OfFile(o.model);
    if (!sha.ok()) return sha.status();
    c->model_sha256_ = *sha;
    core::ModelOptions mo;
    mo.model = o.model;
    auto info = c->shared_.models->Prepare(mo, c->device_);
    if (!info.ok()) return info.status();
    if (absl::Status st = c->CheckFits(**info); !st.ok()) return st;
  }
  c->metrics_->InitClient(o.client_id);
  if (!o.metrics_listen.empty()) {
    if (absl::Status st = c->metrics_->Serve(o.metrics_listen); !st.ok()) return st;
  }
  c->state_path_ = StrCat(o.state_dir, "/", o.client_id, ".state");
  auto state = LoadClientState(c->state_path_);
  if (!state.ok()) return state.status();
  c->state_ = std::move(state).value();
  return c;
}

absl::Status EdgeClient::LoadData() {
  auto data = shared_.data->Get(options_);
  if (!data.ok()) return data.status();
  data_ = *std::move(data);
  if (shard().empty()) return absl::FailedPreconditionError("this client's shard is empty");
  return absl::OkStatus();
}

absl::Status EdgeClient::CheckFits(const ModelInfo& info) {
  if (data_ == nullptr) return absl::OkStatus();
  auto lease = shared_.models->Acquire(info);
  if (!lease.ok()) return lease.status();
  return lease->model().CheckFits(data_->data);
}

int EdgeClient::metrics_port() const { return metrics_->port(); }

void EdgeClient::Stop() { transport_->Stop(); }

absl::Status EdgeClient::Persist() {
  if (client_mode_) {
    if (absl::Status st = client_mode_->SaveState(&state_.modes); !st.ok()) {
      return absl::Status(st.code(), StrCat(state_path_, ": ", st.message()));
    }
  }
  // A file older than slots keeps its modes' fields until the mode has taken them.
  if (state_.legacy && !client_mode_) return absl::OkStatus();
  state_.legacy.reset();
  return SaveClientState(state_path_, state_);
}

uint64_t EdgeClient::dim() const { return model_ ? model_->dim : 0; }

const codecs::ModelLayout& EdgeClient::layout() const {
  static const codecs::ModelLayout* const kNone = new codecs::ModelLayout();
  return model_ ? model_->layout : *kNone;
}

const std::vector<uint64_t>& EdgeClient::scale_cuts() const {
  static const std::vector<uint64_t>* const kNone = new std::vector<uint64_t>();
  return model_ ? model_->scale_cuts : *kNone;
}

uint64_t EdgeClient::NumSamples() const {
  return trainer_ != nullptr ? trainer_->NumSamples() : shard().size();
}

absl::Status EdgeClient::StartOverIfAnotherInstance(const std::string& job, uint64_t instance) {
  if (instance == 0) return absl::OkStatus();  // a coordinator of before says none
  if (state_.job == job && state_.job_instance != 0 && state_.job_instance != instance) {
    log::Warning(options_.client_id,
                 "job %s was started afresh (instance %016llx; this client's state is of "
                 "%016llx): its update in flight, error feedback and mode state are given up",
                 job, static_cast<unsigned long long>(instance),
                 static_cast<unsigned long long>(state_.job_instance));
    if (state_.pending) {
      metrics_->AddChunks(options_.client_id, "dropped", state_.pending->frames.size());
    }
    // The mode is made again (below) and loads the empty state.
    client_mode_.reset();
    mode_.reset();
    state_ = ClientState{};
    eval_model_.reset();
    own_.clear();
    downlinks_.clear();
    if (trainer_ != nullptr) trainer_->OnJobStartedOver();
    ForgetJobFiles();
    state_.job = job;
    state_.job_instance = instance;
    return Persist();
  }
  // The job this state is made in from now on (another job's, as a failover from an
  // aggregator to the root, keeps what it holds: ForgetOtherJobsUpdate decides). Saved
  // with the next Persist: a join writes nothing (a crash before then joins as now).
  state_.job = job;
  state_.job_instance = instance;
  return absl::OkStatus();
}

void EdgeClient::ForgetJobFiles() const {
  // <id>.downlink, <id>.downlink-<blob> (the held models), <id>.own and <id>.buffers (its own
  // tensors, as this release and the one before name them), whether or not this process has
  // opened them yet.
  const std::string downlink = options_.client_id + ".downlink";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.state_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == downlink || name.rfind(downlink + "-", 0) == 0 ||
        name == options_.client_id + ".own" || name == options_.client_id + ".buffers") {
      std::error_code rm;
      if (!std::filesystem::remove(entry.path(), rm)) {
        log::Warning(options_.client_id, "%s stays: %s", entry.path().string(), rm.message());
      }
    }
  }
}

absl::Status EdgeClient::ForgetOtherJobsUpdate(const std::string& job) {
  job_ = job;
  if (!state_.pending || state_.pending->job.empty() || state_.pending->job == job) {
    return absl::OkStatus();
  }
  log::Warning(options_.client_id,
               "the update in flight for round %llu was made for job %s, not %s: given up (%zu "
               "chunks), as the coordinator it was sent to may have counted it",
               static_cast<unsigned long long>(state_.pending->round), state_.pending->job, job,
               state_.pending->frames.size());
  metrics_->AddChunks(options_.client_id, "dropped", state_.pending->frames.size());
  state_.pending.reset();
  return Persist();
}

absl::Status EdgeClient::Join() {
  protos::JoinRequest req;
  req.set_client_id(options_.client_id);
  req.set_num_samples(NumSamples());
  req.set_device(device_);
  req.set_protocol_version(kProtocolVersion);
  req.set_model_sha256(model_sha256_);
  req.set_wants_final_model(WantsFinalModel());
  auto reply = transport_->Join(req);
  if (!reply.ok()) return reply.status();
  if (reply->protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(
        StrCat("the coordinator speaks fedlgc protocol version ",
               reply->protocol_version() == 0 ? 1u : reply->protocol_version(),
               "; this client speaks version ", kProtocolVersion,
               ": run an edge client and coordinator of the same release"));
  }
  if (absl::Status st = EnsureModel(*reply); !st.ok()) return st;
  HoldOut(reply->eval_fraction());
  job_over_ = reply->total_rounds() > 0 && reply->current_round() > reply->total_rounds();
  total_rounds_ = reply->total_rounds();
  if (model_->dim != reply->dim()) {
    return absl::FailedPreconditionError(StrCat("the job's model has ", reply->dim(),
                                                " parameters; ", reply->model(), " here has ",
                                                model_->dim));
  }
  downlink_codec_ = reply->downlink_codec();
  initial_model_crc_.reset();
  if (reply->has_initial_model_crc32c()) initial_model_crc_ = reply->initial_model_crc32c();
  for (auto& [blob, receiver] : downlinks_) {
    if (absl::Status st = receiver->Configure(downlink_codec_, reply->dim()); !st.ok()) {
      return absl::FailedPreconditionError(
          StrCat("the job's downlink codec: ", std::string(st.message())));
    }
  }
  if (absl::Status st = StartOverIfAnotherInstance(reply->job_id(), reply->job_instance());
      !st.ok()) {
    return st;
  }
  const std::optional<Mode> mode = ParseMode(reply->mode());
  if (!mode) {
    return absl::FailedPreconditionError(
        StrCat("the job runs mode '", reply->mode(), "', which this client does not know"));
  }
  if (client_mode_ && *mode != *mode_) {
    return absl::FailedPreconditionError(
        StrCat("the job's mode changed from ", ModeName(*mode_), " to ", ModeName(*mode)));
  }
  if (!client_mode_) {
    auto made = make_mode_(*mode, *this);
    if (!made.ok()) return made.status();
    if (absl::Status st = (*made)->LoadState(state_); !st.ok()) {
      // No retry mends a state file: say which, and stop.
      return absl::FailedPreconditionError(
          StrCat(state_path_, ": ", st.message(),
                 "; move the file away to start this client afresh (what it held is lost)"));
    }
    client_mode_ = *std::move(made);
    mode_ = mode;
  }
  return ForgetOtherJobsUpdate(reply->job_id());
}

absl::Status EdgeClient::EnsureModel(const protos::JoinReply& reply) {
  core::ModelOptions mo;
  mo.buffers = reply.buffers().empty() ? "average" : reply.buffers();
  mo.freeze = reply.freeze();
  mo.local_params = reply.local_params();
  mo.loss = reply.loss().empty() ? "auto" : reply.loss();
  const std::string& sha = reply.model_sha256();
  const std::string key = StrCat(sha.empty() ? reply.model() : sha, "/", mo.buffers, "/", mo.loss,
                                 "/", mo.freeze, "/", mo.local_params, "/", reply.init_seed());
  if (model_ && model_key_ == key) return absl::OkStatus();
  if (sha.empty()) {
    if (!model_sha256_.empty()) {
      return absl::FailedPreconditionError(
          StrCat("this client's --model ", options_.model, " is a TorchScript file; the job "
                 "trains the built-in ", reply.model(), " (give the client no --model)"));
    }
    mo.model = reply.model();
  } else if (!options_.model.empty()) {
    if (model_sha256_ != sha) {
      return absl::FailedPreconditionError(
          StrCat("this client's --model ", options_.model, " is sha256:", model_sha256_,
                 "; the job trains ", reply.model(), " sha256:", sha));
    }
    mo.model = options_.model;
  } else {
    auto path = FetchModelFile(reply);
    if (!path.ok()) return path.status();
    mo.model = *path;
  }
  auto info = shared_.models->Prepare(mo, device_, reply.init_seed());
  // What a retry cannot fix (a file that is not TorchScript, no such built-in) ends the
  // client, as a model that does not fit its data does.
  if (!info.ok()) return absl::FailedPreconditionError(info.status().message());
  if (absl::Status st = CheckFits(**info); !st.ok()) return st;
  if (eval_data_ != nullptr && !options_.eval_data.empty()) {
    auto lease = shared_.models->Acquire(**info);
    if (!lease.ok()) return lease.status();
    if (absl::Status st = lease->model().CheckFits(*eval_data_); !st.ok()) {
      return absl::FailedPreconditionError(StrCat("--eval-data: ", st.message()));
    }
  }
  model_ = *std::move(info);
  model_key_ = key;
  local_buffers_ = mo.buffers == "local";
  has_own_ = !model_->initial_own.empty();
  if (has_own_) LoadOwn();
  return absl::OkStatus();
}

absl::StatusOr<std::string> EdgeClient::FetchModelFile(const protos::JoinReply& reply) {
  const std::string& sha = reply.model_sha256();
  if (sha.size() != 64 || sha.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::FailedPreconditionError(
        StrCat("the coordinator names its model by '", sha, "', not a SHA-256"));
  }
  // One fetch at a time in this process: the clients of a host (client_host.h) share the
  // folder, and the first one's download is the others' file.
  static absl::Mutex* const kFetching = new absl::Mutex();
  absl::MutexLock lock(kFetching);
  const std::string path = StrCat(options_.state_dir, "/models/", sha, ".pt");
  if (auto held = core::Sha256OfFile(path); held.ok() && *held == sha) return path;
  log::Info(options_.client_id, "downloading the job's model %s (%llu bytes, sha256:%s)",
            reply.model().c_str(), static_cast<unsigned long long>(reply.model_bytes()), sha);
  auto bytes = transport_->DownloadBlob(kModelFileBlob, 1,
                                        options_.clock->WallNow() + std::chrono::hours(1));
  if (!bytes.ok()) return bytes.status();
  if (const std::string got = core::Sha256Hex(*bytes); got != sha) {
    return absl::DataLossError(
        StrCat("the model file downloaded has sha256:", got, "; the job's is sha256:", sha));
  }
  // Written under a name of this client's, then renamed into place: clients of other
  // processes may fetch the same file into the same folder at once.
  const std::string mine = StrCat(path, ".", options_.client_id);
  if (absl::Status st = fedlgc::AtomicWriteFile(mine, *bytes); !st.ok()) return st;
  if (std::rename(mine.c_str(), path.c_str()) != 0) {
    return absl::InternalError(StrCat("rename ", mine, " to ", path, ": ", std::strerror(errno)));
  }
  return path;
}

absl::Status EdgeClient::SaveOwn() const {
  return fedlgc::AtomicWriteFile(StrCat(options_.state_dir, "/", options_.client_id, ".own"),
                                 core::FloatsToBytes(own_), fedlgc::Durability::kVisible);
}

void EdgeClient::LoadOwn() {
  own_.clear();
  const std::string base = StrCat(options_.state_dir, "/", options_.client_id);
  std::string path = base + ".own";
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (bytes.ok() && !bytes->has_value()) {
    path = base + ".buffers";  // a release before personal parameters kept buffers here
    bytes = fedlgc::ReadFileIfExists(path);
  }
  if (!bytes.ok() || !bytes->has_value()) return;
  auto floats = core::FloatsFromBytes(**bytes, model_->initial_own.size(), path);
  const absl::Status st = floats.status();
  if (st.ok()) {
    own_ = *std::move(floats);
    log::Info(options_.client_id, "its own parameters and buffers from %s (%zu values)", path,
              own_.size());
  } else {
    log::Info(options_.client_id, "%s: its own parameters and buffers start from the model's",
              std::string(st.message()).c_str());
  }
}

absl::Status EdgeClient::SetOwn(core::Model& m) const {
  if (!has_own_) return absl::OkStatus();
  return m.SetLocalTensors(own_.empty() ? model_->initial_own : own_);
}

absl::Status EdgeClient::Run() {
  if (absl::Status st = transport_->Connect(); !st.ok()) return st;
  int attempt = 0;
  while (!transport_->stopped()) {
    if (client_mode_) client_mode_->Settle();  // nothing else uses the transport now
    absl::Status st = Join();
    // A fresh channel, to the next server of --server's list: gRPC's own reconnect
    // schedule for a channel whose connects have failed can leave it down for up to ~20 s
    // after the coordinator is back (measured here with gRPC 1.51), however often we retry
    // on it.
    if (absl::IsUnavailable(st)) {
      if (absl::Status c = transport_->FailOver(); !c.ok()) return c;
    }
    if (st.ok() && job_over_) {
      FinishOverJob();
      transport_->Sleep(options_.linger_s);
      return absl::OkStatus();
    }
    if (st.ok()) {
      bool done = false;
      st = EventLoop(&done);
      client_mode_->Settle();  // before any backoff: a share's upload uses the transport
      if (done) {
        transport_->Sleep(options_.linger_s);  // the job is over: a last scrape
        return absl::OkStatus();
      }
      if (st.ok()) attempt = 0;  // a clean end of stream: reconnect promptly
    }
    if (!st.ok()) {
      // What a retry cannot fix: identity, configuration, a job this client cannot run.
      if (absl::IsPermissionDenied(st) || absl::IsUnauthenticated(st) ||
          absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st)) {
        return st;
      }
      log::Warning(options_.client_id, "%s; reconnecting", st.ToString().c_str());
    }
    if (uploaded_enough()) return absl::OkStatus();
    metrics_->AddResume(options_.client_id, "events");
    transport_->Backoff(attempt++);
  }
  return absl::OkStatus();
}

void EdgeClient::FinishOverJob() {
  // The job is over, but receipts of the last round may still wait for us (an SGP share
  // that was delivered must be given up): read them once, then the mode's last words.
  bool done = false;
  (void)EventLoop(&done);
  client_mode_->Settle();
  if (absl::Status st = client_mode_->OnJobOver(); !st.ok()) {
    log::Warning(options_.client_id, "%s", st.ToString().c_str());
  }
}

absl::Status EdgeClient::EventLoop(bool* done) {
  return transport_->RunEvents(
      [&](const protos::ServerEvent& event) { return HandleEvent(event, done); });
}

absl::StatusOr<EventVerdict> EdgeClient::HandleEvent(const protos::ServerEvent& event, bool* done) {
  client_mode_->Settle();  // an SGP share travelling beside training has arrived by now
  absl::Status st;
  switch (event.kind_case()) {
    case protos::ServerEvent::kReceipt:
      st = client_mode_->OnReceipt(event.receipt());
      break;
    case protos::ServerEvent::kRoundStart: {
      last_round_ = event.round_start().round();
      const auto t0 = options_.clock->Now();
      st = client_mode_->OnRoundStart(event.round_start());
      // The client's whole part of the round: download, training, encoding, upload (in
      // LSGD and SGP, up to its report or share).
      if (st.ok()) {
        AppendRoundLog({last_round_, {{"round_seconds", core::SecondsSince(*options_.clock, t0)}}});
      }
      break;
    }
    case protos::ServerEvent::kMode:
      st = client_mode_->OnModeEvent(event.mode());
      break;
    case protos::ServerEvent::kEval:
      // An evaluation that fails costs its answer (counted missing), not the client.
      if (absl::Status ev = EvaluateModel(event.eval()); !ev.ok()) {
        log::Warning(options_.client_id, "evaluating round %llu: %s",
                     static_cast<unsigned long long>(event.eval().round()), ev.ToString().c_str());
      }
      break;
    case protos::ServerEvent::kStatistics:
      // As an evaluation: a failure costs the answer, not the client.
      if (absl::Status sv = AnswerStatistics(event.statistics()); !sv.ok()) {
        log::Warning(options_.client_id, "statistics of round %llu: %s",
                     static_cast<unsigned long long>(event.statistics().round()),
                     sv.ToString().c_str());
      }
      break;
    case protos::ServerEvent::kDone:
      *done = true;
      // What this client hands over; a failure costs that, not the job.
      if (absl::Status fin = TakeFinalModel(event.done()); !fin.ok()) {
        log::Warning(options_.client_id, "the final model: %s", fin.ToString().c_str());
      }
      return EventVerdict::kStop;
    case protos::ServerEvent::KIND_NOT_SET:
      break;
  }
  if (!st.ok() && event.kind_case() != protos::ServerEvent::kReceipt &&
      absl::IsInvalidArgument(st) && codecs::InputErrorOf(st) == codecs::InputError::kNonFinite) {
    SkipRound(last_round_, st);
    st = absl::OkStatus();
  }
  if (!st.ok()) return st;
  return uploaded_enough() ? EventVerdict::kStop : EventVerdict::kContinue;
}

bool EdgeClient::WantsFinalModel() const {
  return !options_.export_path.empty() || (trainer_ != nullptr && trainer_->WantsFinalModel());
}

absl::Status EdgeClient::TakeFinalModel(const protos::JobDone& done) {
  if (!WantsFinalModel() || done.model_version() == 0 || dim() == 0) return absl::OkStatus();
  // The coordinator waits for it up to its round timeout; a dead link ends sooner.
  auto model = DownloadFloats("", done.model_version(),
                              options_.clock->WallNow() + std::chrono::minutes(10));
  if (!model.ok()) return model.status();
  if (trainer_ != nullptr) {
    if (absl::Status st = trainer_->TakeFinalModel(*model, done.model_version()); !st.ok()) {
      return st;
    }
  }
  if (options_.export_path.empty() || data_ == nullptr) return absl::OkStatus();
  auto lease = shared_.models->Acquire(*model_);
  if (!lease.ok()) return lease.status();
  core::Model& m = lease->model();
  if (absl::Status st = m.SetFlat(*model); !st.ok()) return st;
  if (absl::Status st = SetOwn(m); !st.ok()) return st;
  nlohmann::json meta{{"format", "fedlgc-export/1"},
                      {"job", job_},
                      {"client", options_.client_id},
                      {"round", done.rounds()},
                      {"model_version", done.model_version()},
                      {"kept_as", "final"},
                      {"buffers", local_buffers_ ? "local" : "average"}};
  const core::ParameterGroups& groups = model_->groups;
  if (!groups.local.empty()) meta["local_params"] = groups.local;
  if (!groups.frozen.empty()) meta["frozen"] = groups.frozen;
  if (has_own_) {
    meta["note"] = StrCat("the federation's parameters with this client's own ",
                          groups.local.empty() ? "" : "personal parameters",
                          !groups.local.empty() && local_buffers_ ? " and " : "",
                          local_buffers_ ? "buffers" : "");
  }
  auto files = core::ExportFiles::For(options_.export_path);
  if (!files.ok()) return files.status();
  if (absl::Status st = core::WriteExport(m, *files, meta.dump(1)); !st.ok()) return st;
  log::Info(options_.client_id, "the final model (round %llu) is in %s",
            static_cast<unsigned long long>(done.rounds()), files->pt.c_str());
  return absl::OkStatus();
}

void EdgeClient::HoldOut(double fraction) {
  if (data_ == nullptr || !options_.eval_data.empty() || fraction == held_out_fraction_) return;
  held_out_fraction_ = fraction;
  // The same examples on every join and restart of this client (and of a Python client
  // of the same shard: fedlgc's sim runner draws them alike).
  core::HeldOutSplit split = core::SplitHeldOut(shard(), fraction, options_.held_out_seed());
  held_out_ = !split.held.empty();
  train_indices_ = held_out_ ? std::move(split.train) : std::vector<uint32_t>();
  eval_data_.reset();
  if (!held_out_) return;
  eval_data_ = std::make_unique<core::Dataset>(core::Subset(data_->data, split.held));
  log::Info(options_.client_id, "%zu of its %zu examples held out to evaluate on, %zu train",
            split.held.size(), shard().size(), train_indices_.size());
}

absl::StatusOr<core::EvalResult> EdgeClient::EvaluateOwn(std::span<const float> weights) {
  auto lease = shared_.models->Acquire(*model_);
  if (!lease.ok()) return lease.status();
  core::Model& m = lease->model();
  if (absl::Status st = m.SetFlat(weights); !st.ok()) return st;
  if (absl::Status st = SetOwn(m); !st.ok()) return st;
  return m.Evaluate(*eval_data_);
}

absl::Status EdgeClient::EvaluateModel(const protos::EvalStart& start) {
  const SystemTime deadline{std::chrono::milliseconds(start.deadline_unix_ms())};
  protos::ProgressReport report;
  report.set_round(start.round());
  protos::EvalReport* r = report.mutable_eval();
  r->set_round(start.round());
  r->set_model_version(start.model_version());
  const bool own = trainer_ == nullptr;
  // A client that cannot evaluate says so before it downloads the model.
  if (own ? eval_data_ == nullptr : !trainer_->Evaluates()) {
    r->set_declined(own ? "no data to evaluate on (the job holds out none and no --eval-data)"
                        : "the trainer does not evaluate");
    return transport_->Report(std::move(report), deadline);
  }
  auto model = DownloadFloats("", start.model_version(), deadline);
  if (!model.ok()) return model.status();
  const auto t0 = options_.clock->Now();
  absl::StatusOr<core::EvalResult> ev =
      own ? EvaluateOwn(*model) : trainer_->Evaluate(*model, start.round(), start.model_version());
  eval_model_.emplace(start.model_version(), *std::move(model));
  if (!ev.ok()) {
    // No evaluation (NOT_FOUND), or one that failed: the coordinator hears why at once
    // rather than waiting out the deadline.
    if (!absl::IsNotFound(ev.status())) {
      log::Warning(options_.client_id, "round %llu: %s", static_cast<unsigned long long>(start.round()),
                   std::string(ev.status().message()).c_str());
    }
    r->set_declined(std::string(ev.status().message()));
    return transport_->Report(std::move(report), deadline);
  }
  r->set_examples(ev->examples);
  r->set_loss(ev->loss);
  uint64_t correct = 0;
  for (size_t i = 0; i < ev->class_examples.size(); ++i) {
    r->add_class_examples(ev->class_examples[i]);
    r->add_class_correct(ev->class_correct[i]);
    correct += ev->class_correct[i];
  }
  if (ev->class_examples.empty() && std::isfinite(ev->accuracy)) {
    correct = static_cast<uint64_t>(std::llround(
        std::clamp(ev->accuracy, 0.0, 1.0) * static_cast<double>(ev->examples)));
  }
  r->set_correct(correct);
  r->set_classified(!ev->class_examples.empty() || std::isfinite(ev->accuracy));
  AppendRoundLog({start.round(),
                  {{"eval_examples", static_cast<double>(ev->examples)},
                   {"eval_loss", ev->loss},
                   {"eval_accuracy", ev->accuracy},
                   {"eval_seconds", core::SecondsSince(*options_.clock, t0)}}});
  return transport_->Report(std::move(report), deadline);
}

absl::Status EdgeClient::StatisticsAvailable() const {
  if (trainer_ != nullptr) {
    return trainer_->ReestimatesStatistics()
               ? absl::OkStatus()
               : absl::NotFoundError("the trainer does not re-estimate statistics");
  }
  if (local_buffers_) {
    return absl::NotFoundError("the job keeps buffers local: this client's statistics are its own");
  }
  if (data_ == nullptr || train_indices().empty()) return absl::NotFoundError("no training data");
  return absl::OkStatus();
}

absl::StatusOr<core::Statistics> EdgeClient::ReestimateOwn(std::span<const float> weights,
                                                           const protos::StatisticsStart& start) {
  // The training examples in the order the round's seed shuffles them, as many as asked.
  std::vector<uint32_t> order = train_indices();
  std::mt19937_64 rng(start.seed());
  std::shuffle(order.begin(), order.end(), rng);
  core::StatisticsOptions opts;
  if (start.batches() > 0) opts.max_batches = start.batches();
  opts.batch_size = std::max<size_t>(2, start.batch_size());
  order.resize(std::min(order.size(), opts.max_batches * opts.batch_size));
  auto lease = shared_.models->Acquire(*model_);
  if (!lease.ok()) return lease.status();
  core::Model& m = lease->model();
  if (absl::Status st = m.SetFlat(weights); !st.ok()) return st;
  if (absl::Status st = SetOwn(m); !st.ok()) return st;  // the pool's last client left its own
  return m.ReestimateStatistics(data_->data, order, opts);
}

absl::Status EdgeClient::AnswerStatistics(const protos::StatisticsStart& start) {
  const SystemTime deadline{std::chrono::milliseconds(start.deadline_unix_ms())};
  protos::ProgressReport report;
  report.set_round(start.round());
  protos::StatisticsReport* r = report.mutable_statistics();
  r->set_round(start.round());
  r->set_model_version(start.model_version());
  // A client that has no statistics to give says so before it downloads the model.
  absl::StatusOr<core::Statistics> st = absl::NotFoundError("");
  const auto t0 = options_.clock->Now();
  if (absl::Status available = StatisticsAvailable(); !available.ok()) {
    st = available;
  } else {
    auto model = DownloadFloats("", start.model_version(), deadline);
    if (!model.ok()) return model.status();
    st = trainer_ == nullptr ? ReestimateOwn(*model, start)
                             : trainer_->ReestimateStatistics(*model, start);
  }
  if (!st.ok() || st->batches == 0) {
    // None (NOT_FOUND), a model without statistics, or a failure: the coordinator hears
    // why at once rather than waiting out the deadline.
    const std::string why =
        st.ok() ? "the model has no statistics" : std::string(st.status().message());
    if (!st.ok() && !absl::IsNotFound(st.status())) {
      log::Warning(options_.client_id, "round %llu: %s",
                   static_cast<unsigned long long>(start.round()), why.c_str());
    }
    r->set_declined(why);
    return transport_->Report(std::move(report), deadline);
  }
  r->set_examples(st->examples);
  r->set_batches(st->batches);
  r->mutable_mean()->Add(st->mean.begin(), st->mean.end());
  r->mutable_var()->Add(st->var.begin(), st->var.end());
  r->mutable_skipped()->Add(st->skipped.begin(), st->skipped.end());
  AppendRoundLog({start.round(),
                  {{"statistics_examples", static_cast<double>(st->examples)},
                   {"statistics_seconds", core::SecondsSince(*options_.clock, t0)}}});
  return transport_->Report(std::move(report), deadline);
}

void EdgeClient::SkipRound(uint64_t round, const absl::Status& why) {
  log::Warning(options_.client_id, "round %llu skipped: %s", static_cast<unsigned long long>(round),
               std::string(why.message()).c_str());
  metrics_->AddSkippedRound(options_.client_id, "nonfinite");
  AppendRoundLog({round, {{"skipped", 1}}});
}

absl::Status EdgeClient::DumpUpdate(uint64_t round, std::span<const float> before,
                                    std::span<const float> after) const {
  std::vector<float> delta(after.begin(), after.end());
  for (size_t i = 0; i < delta.size() && i < before.size(); ++i) delta[i] -= before[i];
  // A round trained again (buffered rounds: an update a restarted coordinator never
  // committed, from another version) keeps the first: r<round>.2.f32, .3, ...
  const std::string stem = StrCat(options_.dump_updates, "/", options_.client_id, "/r", round);
  std::string path = stem + ".f32";
  std::error_code ec;
  for (int k = 2; std::filesystem::exists(path, ec); ++k) path = StrCat(stem, ".", k, ".f32");
  return fedlgc::AtomicWriteFile(path, core::FloatsToBytes(delta), fedlgc::Durability::kVisible);
}

absl::StatusOr<double> EdgeClient::TrainLocal(const protos::RoundStart& start,
                                              std::vector<float>* weights) {
  auto trained = TrainLocalWith(start, weights, LocalTerms{});
  if (!trained.ok()) return trained.status();
  return trained->loss;
}

absl::StatusOr<LocalTrained> EdgeClient::TrainLocalWith(const protos::RoundStart& start,
                                                        std::vector<float>* weights,
                                                        const LocalTerms& terms) {
  if (trainer_ != nullptr) {
    // Timed as the client's own training is, for the round log.
    const auto t0 = options_.clock->Now();
    const double cpu0 = CpuSeconds(false);
    auto trained = trainer_->TrainWith(start, weights, terms);
    last_train_seconds_ =
        trainer_->TrainSeconds().value_or(core::SecondsSince(*options_.clock, t0));
    last_train_cpu_seconds_ = CpuSeconds(false) - cpu0;
    if (trained.ok() && std::isfinite(trained->loss)) {
      metrics_->SetTrainLoss(options_.client_id, trained->loss);
    }
    // Every round it trains, whether or not it then uploads (an LSGD follower does not).
    if (trained.ok()) {
      if (auto figures = trainer_->RoundFigures(); !figures.empty()) {
        AppendRoundLog({start.round(), std::move(figures)});
      }
    }
    return trained;
  }
  const bool keep = attack_.active() || !options_.dump_updates.empty();
  const std::vector<float> before = keep ? *weights : std::vector<float>();
  core::TrainOptions topts;
  topts.epochs = static_cast<int>(start.local_epochs());
  topts.steps = static_cast<int>(start.local_steps());
  topts.lr = start.lr();
  topts.batch_size = static_cast<int>(start.batch_size());
  topts.seed = start.seed();
  topts.optimizer = options_.optimizer;
  topts.prox_mu = start.objective().prox_mu();
  topts.correction = terms.correction;  // checked against the model's dimension by Train
  absl::StatusOr<core::TrainResult> trained;
  {
    // A model of the process's pool, ours until the lease goes: the weights and buffers
    // the last client left in it are replaced by this client's.
    auto lease = shared_.models->Acquire(*model_);
    if (!lease.ok()) return lease.status();
    core::Model& model = lease->model();
    if (absl::Status st = model.SetFlat(*weights); !st.ok()) return st;
    if (absl::Status st = SetOwn(model); !st.ok()) return st;
    // What the training would take on a core of its own: benchmarks that run many clients
    // on few cores use it to tell their link time from their contention. With libtorch on
    // this thread alone (--torch-threads 1) this thread's CPU time, so that the other
    // clients of the process do not count; else the process's, the threads' time added.
    const bool this_thread = options_.torch_threads == 1;
    const double cpu0 = CpuSeconds(this_thread);
    trained = model.Train(data_->data, train_indices(), topts);
    if (!trained.ok()) return trained.status();
    last_train_cpu_seconds_ = CpuSeconds(this_thread) - cpu0;
    *weights = model.GetFlat();
    if (has_own_) own_ = model.GetLocalTensors();
  }
  metrics_->SetTrainLoss(options_.client_id, trained->running_loss);
  last_train_seconds_ = trained->seconds;
  if (has_own_) {
    if (absl::Status st = SaveOwn(); !st.ok()) return st;
  }
  attack_.Apply(before, *weights, topts.seed);
  if (!options_.dump_updates.empty()) {
    if (absl::Status st = DumpUpdate(start.round(), before, *weights); !st.ok()) return st;
  }
  return LocalTrained{.loss = trained->running_loss,
                      .steps = trained->steps,
                      .lr_sum = trained->lr * static_cast<double>(trained->steps)};
}

absl::StatusOr<DownlinkReceiver*> EdgeClient::ReceiverFor(const std::string& blob) {
  auto it = downlinks_.find(blob);
  if (it == downlinks_.end()) {
    // <id>.downlink for the global model, <id>.downlink-<blob> (letters and digits) else.
    std::string path = StrCat(options_.state_dir, "/", options_.client_id, ".downlink");
    if (!blob.empty()) path += "-";
    for (char c : blob) path += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    auto r = std::make_unique<DownlinkReceiver>(std::move(path));
    if (absl::Status st = r->Configure(downlink_codec_, dim()); !st.ok()) return st;
    it = downlinks_.emplace(blob, std::move(r)).first;
  }
  return it->second.get();
}

const DownlinkReceiver* EdgeClient::downlink(const std::string& blob) const {
  auto it = downlinks_.find(blob);
  return it == downlinks_.end() ? nullptr : it->second.get();
}

void EdgeClient::HoldInitialModel(DownlinkReceiver* r) {
  if (!initial_model_crc_ || model_ == nullptr || model_->initial_flat.empty() ||
      model_->initial_crc != *initial_model_crc_) {
    return;
  }
  // Saved as a download is: a restarted client asks from the version it holds.
  if (absl::Status st = r->Hold(0, model_->initial_flat); !st.ok()) {
    log::Warning(options_.client_id, "holding the model file's weights as version 0: %s",
                 std::string(st.message()).c_str());
    r->Forget();
  }
}

absl::StatusOr<std::vector<float>> EdgeClient::DownloadHeld(const std::string& blob,
                                                            uint64_t version, SystemTime deadline) {
  auto receiver = ReceiverFor(blob);
  if (!receiver.ok()) return receiver.status();
  DownlinkReceiver* const r = *receiver;
  if (blob.empty() && !r->held_version().has_value()) HoldInitialModel(r);
  auto got = transport_->DownloadModel(blob, version, deadline, r->held_version());
  absl::StatusOr<std::vector<float>> model =
      got.ok() ? r->Take(*got, version) : absl::StatusOr<std::vector<float>>(got.status());
  if (model.ok() ||
      !(absl::IsDataLoss(model.status()) || absl::IsInvalidArgument(model.status()))) {
    if (model.ok() && got->chain) metrics_->AddDownlink(options_.client_id, 0, 4 * dim());
    if (model.ok()) metrics_->AddModelDownload(options_.client_id, got->chain ? "chain" : "full");
    return model;
  }
  // The chain did not rebuild the coordinator's model (or a resumed download changed
  // kind): the model whole, which the next chains start from.
  metrics_->AddDownlinkFallback(options_.client_id,
                                absl::IsDataLoss(model.status()) ? "mismatch" : "malformed");
  log::Warning(options_.client_id, "%s %llu: %s; downloading it whole",
               blob.empty() ? "model" : blob, static_cast<unsigned long long>(version),
               std::string(model.status().message()).c_str());
  r->Forget();
  got = transport_->DownloadModel(blob, version, deadline, std::nullopt);
  if (!got.ok()) return got.status();
  model = r->Take(*got, version);
  if (model.ok()) metrics_->AddModelDownload(options_.client_id, got->chain ? "chain" : "full");
  return model;
}

absl::StatusOr<std::vector<float>> EdgeClient::DownloadFloats(const std::string& blob,
                                                              uint64_t version,
                                                              SystemTime deadline) {
  const std::string name = StrCat(blob.empty() ? "model" : blob, " ", version);
  absl::StatusOr<std::vector<float>> floats;
  if (blob.empty() && eval_model_.has_value() && eval_model_->first == version) {
    // Evaluated already: not downloaded twice.
    floats = std::move(eval_model_->second);
    eval_model_.reset();
    return floats;
  }
  if (!downlink_codec_.empty()) {
    floats = DownloadHeld(blob, version, deadline);
  } else {
    auto bytes = transport_->DownloadBlob(blob, version, deadline);
    if (!bytes.ok()) return bytes.status();
    floats = core::FloatsFromBytes(*bytes, dim(), name);
  }
  if (!floats.ok()) return floats.status();
  // Nothing trains on a broken model: the round is skipped (HandleEvent).
  for (size_t i = 0; i < floats->size(); ++i) {
    if (!std::isfinite((*floats)[i])) {
      return codecs::NonFiniteError(
          StrCat(name, " has a value that is not finite (coordinate ", i, "): not training on it"));
    }
  }
  return floats;
}

PendingUpdate EdgeClient::NewPending(uint64_t round, uint64_t model_version) {
  PendingUpdate p;
  p.round = round;
  p.model_version = model_version;
  p.update_id = transport_->NewUpdateId();
  p.num_samples = NumSamples();
  p.job = job_;
  return p;
}

absl::Status EdgeClient::UploadPending(uint64_t round, SystemTime deadline,
                                       const std::optional<ShareFields>& share, Half half) {
  const absl::Status st = transport_->Upload(*state_.pending, state_.codec, deadline, share);
  if (st.ok() || absl::IsFailedPrecondition(st) || absl::IsDeadlineExceeded(st)) {
    // Done, or the round closed first: the receipt will say what counted. A two-phase
    // PowerSGD P is the first half of its round's upload.
    if (half == Half::kWhole) CountUploaded(round);
    return absl::OkStatus();
  }
  return st;
}

void EdgeClient::CountUploaded(uint64_t round) {
  // A round counts once, however many updates it took (an LGC leader promoted resends).
  if (last_uploaded_round_.exchange(round) != round) ++rounds_uploaded_;
}

void EdgeClient::ObserveEncode(uint64_t round, core::Clock::time_point t0) {
  const double seconds = core::SecondsSince(*options_.clock, t0);
  metrics_->ObserveEncodeSeconds(seconds);
  AppendRoundLog({round,
                  {{"train_seconds", last_train_seconds_},
                   {"train_cpu_seconds", last_train_cpu_seconds_},
                   {"encode_seconds", seconds}}});
}

void EdgeClient::AppendRoundLog(const ClientRoundRecord& record) {
  const std::string path = StrCat(options_.state_dir, "/", options_.client_id, ".rounds.jsonl");
  if (absl::Status st = AppendLine(path, ToJson(record)); !st.ok()) {
    log::Warning(options_.client_id, "%s", st.ToString().c_str());
  }
}

}  // namespace fedlgc::edge_client
