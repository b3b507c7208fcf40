// fedlgc-edge --check: EdgeClient::Check (edge_client.h), Create's reading steps and what
// Run would need, without writing, listening or dialling (core/preflight.h).
#include "core/preflight.h"

#include <vector>

#include "absl/strings/str_split.h"
#include "base/str.h"
#include "core/dataset.h"
#include "core/sha256.h"
#include "edge_client/client_state.h"
#include "edge_client/edge_client.h"
#include "edge_client/shared_resources.h"

namespace fedlgc::edge_client {

namespace {

// What the client writes and where it connects.
void CheckOutputsAndEndpoints(const EdgeClientOptions& o, core::Preflight* p) {
  p->Report("state folder", core::CheckWritableFolder(o.state_dir));
  const std::string state_path = StrCat(o.state_dir, "/", o.client_id, ".state");
  auto state = LoadClientState(state_path);
  std::string state_text = StrCat(state_path, ": none yet (a first run)");
  if (state.ok() && !state->job.empty()) {
    state_text = StrCat(state_path, ": from job ", state->job,
                        state->residual.empty() ? "" : ", with an error-feedback residual");
  }
  p->Report("state file", state.status(), state_text);
  core::CheckExport(o.export_path, p);
  if (!o.dump_updates.empty()) {
    p->Report("dump updates", core::CheckWritableFolder(o.dump_updates));
  }
  if (o.insecure) {
    p->Skip("certificates", "none: plaintext (--insecure)");
  } else {
    p->Report("certificates", core::CheckTlsIdentity(o.tls_ca, o.tls_cert, o.tls_key));
  }
  for (const std::string& address :
       std::vector<std::string>(absl::StrSplit(o.server, ',', absl::SkipEmpty()))) {
    p->Report("server", core::CheckDialAddress(address));
  }
  if (o.metrics_listen.empty()) {
    p->Skip("metrics listen", "none (--metrics-listen is empty)");
  } else {
    p->Report("metrics listen", core::CheckListenAddress(o.metrics_listen));
  }
}

}  // namespace

void EdgeClient::Check(EdgeClientOptions options, core::Preflight* p) {
  const bool valid = p->Report("options", options.Validate(),
                               StrCat(options.client_id, ", shard ", options.shard, " of ",
                                      options.num_shards, " (", options.partition, ")"));
  CheckOutputsAndEndpoints(options, p);
  if (!valid) {
    for (const char* what : {"data", "eval data", "device", "model"}) {
      p->Skip(what, "needs valid options");
    }
    return;
  }
  std::unique_ptr<EdgeClient> c(
      new EdgeClient(std::move(options), nullptr, nullptr, nullptr, SharedResources()));
  const EdgeClientOptions& o = c->options_;
  absl::Status loaded = c->LoadData();
  std::string data_text;
  if (loaded.ok()) {
    const core::Dataset& d = c->data_->data;
    data_text = StrCat(o.data, ": ", c->shard().size(), " examples in this shard (of ", d.size(),
                       d.classification() ? StrCat(", ", d.classes, " classes") : "", ")");
  }
  const bool have_data = p->Report("data", loaded, data_text);
  if (o.eval_data.empty()) {
    p->Skip("eval data", "none: a share of the shard is held out if the job asks");
  } else {
    core::DataOptions d = o.data_options();
    d.spec = o.eval_data;
    auto eval = core::LoadDataset(d, /*train=*/false);
    p->Report("eval data", eval.status(),
              eval.ok() ? StrCat(o.eval_data, ": ", eval->size(), " examples") : "");
  }
  auto device = c->shared_.models->ResolveDevice(o.device);
  if (!p->Report("device", device.status(), device.ok() ? *device : "")) {
    p->Skip("model", "needs the device");
    return;
  }
  if (o.model.empty()) {
    p->Skip("model", "none given: the coordinator serves the job's");
    return;
  }
  auto sha = core::Sha256OfFile(o.model);
  if (!sha.ok()) {
    p->Report("model", sha.status());
    return;
  }
  core::ModelOptions mo;
  mo.model = o.model;
  auto info = c->shared_.models->Prepare(mo, *device);
  absl::Status fits = info.ok() ? c->CheckFits(**info) : info.status();
  p->Report("model", fits,
            info.ok() ? StrCat(o.model, ": ", (*info)->dim, " values, sha256 ", sha->substr(0, 12),
                               have_data ? ", fits the data" : "")
                      : "");
}

}  // namespace fedlgc::edge_client
