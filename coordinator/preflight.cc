// fedlgc-coordinator --check (preflight.h): Create's reading steps and what Start would
// need, without writing or listening (core/preflight.h).
#include "coordinator/preflight.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_split.h"
#include "base/str.h"
#include "coordinator/checkpoint.h"
#include "coordinator/coordinator.h"
#include "coordinator/round_recorder.h"
#include "core/dataset.h"
#include "core/model.h"
#include "core/preflight.h"

namespace fedlgc::coordinator {

namespace {

// "1,209,834".
std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// What the job is, as the options line shows it.
std::string JobText(const CoordinatorOptions& o, const ModeTraits& traits) {
  std::string up = o.codec_ladder.empty() ? o.plan.codec : StrCat("ladder ", o.plan.codec, ",...");
  return StrCat(ModeName(traits.mode), ", ", o.rounds, o.rounds == 1 ? " round" : " rounds",
                ", up ", up, ", down ", o.downlink.codec);
}

// The listen addresses, the certificates and the parent: what Start and an aggregator's
// upstream client would need.
void CheckEndpoints(const CoordinatorOptions& o, core::Preflight* p) {
  if (o.insecure) {
    p->Skip("certificates", "none: plaintext (--insecure)");
  } else {
    p->Report("certificates", core::CheckTlsIdentity(o.tls_ca, o.tls_cert, o.tls_key));
  }
  p->Report("listen", core::CheckListenAddress(o.listen));
  if (o.metrics_listen.empty()) {
    p->Skip("metrics listen", "none (--metrics-listen is empty)");
  } else {
    p->Report("metrics listen", core::CheckListenAddress(o.metrics_listen));
  }
  if (!o.has_parent()) return;
  for (const std::string& address :
       std::vector<std::string>(absl::StrSplit(o.parent, ',', absl::SkipEmpty()))) {
    p->Report("parent", core::CheckDialAddress(address));
  }
  if (o.insecure) {
    p->Skip("parent certs", "none: plaintext (--insecure)");
  } else {
    p->Report("parent certs",
              core::CheckTlsIdentity(o.parent_tls_ca.empty() ? o.tls_ca : o.parent_tls_ca,
                                     o.parent_tls_cert, o.parent_tls_key));
  }
  if (!o.parent_metrics_listen.empty()) {
    p->Report("parent metrics", core::CheckListenAddress(o.parent_metrics_listen));
  }
}

// The files the coordinator writes.
void CheckOutputs(const CoordinatorOptions& o, core::Preflight* p) {
  p->Report("state folder", core::CheckWritableFolder(o.state_dir));
  core::CheckExport(o.export_path, p);
  if (o.tensorboard.empty()) {
    p->Skip("tensorboard", "none (no --tensorboard)");
  } else {
    p->Report("tensorboard", core::CheckWritableFolder(o.tensorboard));
  }
}

}  // namespace

void CheckCoordinator(CoordinatorOptions options, const ModeTraits& traits,
                      const DriverFactory& make_driver, core::Preflight* p, bool endpoints) {
  const bool valid = p->Report("options", options.Validate(traits), JobText(options, traits));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  c->traits_ = traits;
  const CoordinatorOptions& o = c->options_;
  CheckOutputs(o, p);
  if (endpoints) CheckEndpoints(o, p);
  if (!valid) {
    for (const char* what : {"model", "test data", "checkpoint", "round protocol", "downlink"}) {
      p->Skip(what, "needs valid options");
    }
    return;
  }
  auto model = core::Model::Create(o.model_options(), o.init_seed);
  std::string model_text;
  if (model.ok()) {
    const core::ParameterGroups& g = (*model)->parameter_groups();
    model_text =
        StrCat(o.ModelName(), ": ", Grouped((*model)->dim()), " values travel (", o.buffers,
               " buffers, loss ", o.loss,
               g.frozen_values > 0 ? StrCat(", ", Grouped(g.frozen_values), " frozen") : "",
               g.local_values > 0 ? StrCat(", ", Grouped(g.local_values), " personal") : "", ")");
  }
  if (!p->Report("model", model.status(), model_text)) {
    for (const char* what : {"test data", "checkpoint", "round protocol", "downlink"}) {
      p->Skip(what, "needs the model");
    }
    return;
  }
  Coordinator::JobFiles files;
  RecorderParts recorder;
  absl::Status loaded = c->LoadModelAndData(&files, &recorder);
  std::string data_text = "none: the clients evaluate";
  if (recorder.test_data != nullptr) {
    const core::Dataset& d = *recorder.test_data;
    data_text =
        StrCat(o.test_data, ": ", Grouped(d.size()), " examples",
               d.classification() ? StrCat(", ", d.classes, " classes") : "", ", fit the model");
  } else if (o.eval_every == 0) {
    data_text = "none: no evaluation (--eval-every 0)";
  } else if (o.HasTestData() && !o.EvalOnServer()) {
    data_text = StrCat("not used: --eval ", o.eval);
  }
  if (!p->Report("test data", loaded, data_text)) {
    for (const char* what : {"checkpoint", "round protocol", "downlink"}) {
      p->Skip(what, "needs the model and test data");
    }
    return;
  }
  EngineState state;
  absl::Status resumed = c->Resume(files, &state);
  const std::string resume_text =
      state.next_round > 1
          ? StrCat(CheckpointPath(o.state_dir), ": resumes at round ", state.next_round)
          : std::string("none: a fresh job");
  if (!p->Report("checkpoint", resumed, resume_text)) {
    for (const char* what : {"round protocol", "downlink"}) p->Skip(what, "needs the checkpoint");
    return;
  }
  absl::Status made = c->MakeDriverAndEngine(make_driver, std::move(state));
  if (!p->Report("round protocol", made,
                 StrCat("made, codecs fit ", Grouped(c->eval_model_->dim()), " values"))) {
    p->Skip("downlink", "needs the round protocol");
    return;
  }
  if (!DownlinkCompressed(o.downlink)) {
    p->Report("downlink", StrCat(o.downlink.codec, ": whole models"));
  } else {
    auto downlinks = Downlinks::Create(o.downlink, o.state_dir);
    p->Report("downlink", downlinks.status(), StrCat(o.downlink.codec, ": model deltas"));
  }
}

}  // namespace fedlgc::coordinator
