// _fedlgc: the Python binding of fedlgc (pybind11). Two things, both the C++ code itself,
// not a second implementation:
//   - Client: the C++ edge client (transport, resumable chunks, persisted state, codecs,
//     error feedback, compressed downlink, every mode) with its local training step
//     replaced by a Python callable, through the LocalTrainer seam
//     (edge_client/client_mode.h). The fedlgc package (fedlgc/__init__.py) wraps it as
//     run_client(module, train, ...).
//   - the codec library: encode a float32 array into frames and decode frames, byte for
//     byte what the C++ clients send (fedlgc/codecs.py).
// libtorch is not used here: weights cross as float32 NumPy arrays, and the package moves
// them into and out of the user's torch.nn.Module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/str.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/registry.h"
#include "core/dataset.h"
#include "core/partition.h"
#include "core/protocol.h"
#include "edge_client/edge_client.h"
#include "edge_client/shared_resources.h"
#include "modes/clients.h"
#include "protos/fedlgc.pb.h"

namespace py = pybind11;

namespace fedlgc::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

[[noreturn]] void Throw(const absl::Status& st) {
  if (absl::IsInvalidArgument(st) || absl::IsOutOfRange(st)) {
    throw py::value_error(std::string(st.message()));
  }
  throw std::runtime_error(st.ToString());
}

// A layout from [(name, shape), ...]; nullopt from None.
std::optional<codecs::ModelLayout> LayoutFrom(const py::object& layout) {
  if (layout.is_none()) return std::nullopt;
  std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
  for (const py::handle item : layout) {
    auto pair = item.cast<std::pair<std::string, std::vector<uint64_t>>>();
    tensors.push_back(std::move(pair));
  }
  auto made = codecs::ModelLayout::Create(std::move(tensors));
  if (!made.ok()) Throw(made.status());
  return *std::move(made);
}

py::list LayoutList(const codecs::ModelLayout& layout) {
  py::list out;
  for (const codecs::TensorSlot& t : layout.tensors()) {
    out.append(py::make_tuple(t.name, py::tuple(py::cast(t.shape))));
  }
  return out;
}

// A codec with its state (error feedback's residual) across encodes.
class PyCodec {
 public:
  PyCodec(const std::string& spec, const py::object& layout) : layout_(LayoutFrom(layout)) {
    auto c = codecs::MakeCodec(spec, layout_ ? &*layout_ : nullptr);
    if (!c.ok()) Throw(c.status());
    codec_ = *std::move(c);
  }

  const std::string& spec() const { return codec_->spec(); }
  const std::string& wire_spec() const { return codec_->wire_spec(); }
  uint64_t max_frame_bytes(uint64_t n) const { return codec_->MaxFrameBytes(n); }
  py::dict traits() const {
    const codecs::CodecTraits t = codec_->traits();
    py::dict d;
    d["fixed_size"] = t.fixed_size;
    d["unbiased"] = t.unbiased;
    d["stateful"] = t.stateful;
    d["block"] = t.block;
    d["summable"] = t.summable;
    return d;
  }

  // `cuts`: coordinates where a frame must end (EncodeOptions::cuts), strictly increasing
  // within (0, n); a client passes its model's ScaleCuts.
  py::list Encode(const FloatArray& x, uint64_t seed, uint64_t max_frame_bytes,
                  const std::vector<uint64_t>& cuts) {
    if (x.ndim() != 1) throw py::value_error("encode takes a 1-D float32 array (x.reshape(-1))");
    for (size_t i = 0; i < cuts.size(); ++i) {
      if (cuts[i] == 0 || cuts[i] >= static_cast<uint64_t>(x.size()) ||
          (i > 0 && cuts[i] <= cuts[i - 1])) {
        throw py::value_error(StrCat("cuts must rise strictly within (0, ", x.size(),
                                     "); cut ", i, " is ", cuts[i]));
      }
    }
    std::span<const float> values(x.data(), static_cast<size_t>(x.size()));
    std::vector<codecs::Frame> frames;
    codecs::EncodeOptions opts;
    opts.seed = seed;
    opts.max_frame_bytes = max_frame_bytes;
    opts.cuts = cuts;
    absl::Status st;
    {
      py::gil_scoped_release release;
      st = codec_->Encode(values, opts, &frames);
    }
    if (!st.ok()) Throw(st);
    py::list out;
    for (const codecs::Frame& f : frames) out.append(py::bytes(f.bytes));
    return out;
  }

  // Frames into a vector of their dimension; coordinates no frame covers are 0.
  FloatArray Decode(const py::list& frames) const {
    std::vector<std::string> bytes;
    for (const py::handle f : frames) bytes.push_back(f.cast<std::string>());
    if (bytes.empty()) throw py::value_error("decode needs at least one frame");
    codecs::FrameLimits limits;
    auto first = codecs::ParseFrame(bytes[0], limits);
    if (!first.ok()) Throw(first.status());
    const uint64_t dim = first->dim;
    FloatArray out(static_cast<py::ssize_t>(dim));
    std::fill(out.mutable_data(), out.mutable_data() + dim, 0.0f);
    std::span<float> view(out.mutable_data(), dim);
    absl::Status st;
    {
      py::gil_scoped_release release;
      for (const std::string& b : bytes) {
        st = codecs::DecodeFrameInto(*codec_, b, limits, view);
        if (!st.ok()) break;
      }
    }
    if (!st.ok()) Throw(st);
    return out;
  }

 private:
  std::optional<codecs::ModelLayout> layout_;
  std::unique_ptr<codecs::Codec> codec_;
};

py::dict FrameInfo(const py::bytes& frame) {
  const std::string bytes = frame;
  auto view = codecs::ParseFrame(bytes, codecs::FrameLimits());
  if (!view.ok()) Throw(view.status());
  py::dict d;
  d["spec"] = std::string(view->spec);
  d["dim"] = view->dim;
  d["begin"] = view->begin;
  d["length"] = view->length;
  d["body_bytes"] = view->body.size();
  d["bytes"] = bytes.size();
  return d;
}

// The local step in Python: `round_fn(weights, info)` trains on the float32 array
// `weights` in place (a view of the C++ vector, valid during the call only) and returns
// (the loss or None, the seconds the user's training took, the figures for the round log:
// {name: float}, (the steps fedlgc.scaffold_step counted, their learning rates added up)).
// A Python exception ends the client; Client.run re-raises it.
class PyTrainer final : public edge_client::LocalTrainer {
 public:
  PyTrainer(py::object round_fn, py::object final_fn, py::object eval_fn, py::object stats_fn,
            uint64_t num_samples)
      : round_fn_(std::move(round_fn)),
        final_fn_(std::move(final_fn)),
        eval_fn_(std::move(eval_fn)),
        stats_fn_(std::move(stats_fn)),
        num_samples_(num_samples) {}

  void set_client(edge_client::EdgeClient* client) { client_ = client; }
  // The Python exception a round raised, if any.
  std::optional<py::error_already_set>& error() { return error_; }

  uint64_t NumSamples() override { return num_samples_; }
  std::optional<double> TrainSeconds() const override { return train_seconds_; }
  std::map<std::string, double> RoundFigures() const override { return figures_; }
  bool WantsFinalModel() const override { return !final_fn_.is_none(); }
  bool Evaluates() const override { return !eval_fn_.is_none(); }
  bool ReestimatesStatistics() const override { return !stats_fn_.is_none(); }

  // `eval_fn(weights, info)`: None (no evaluate hook: the client declines) or a dict of
  // examples, loss and accuracy, or per-class counts (class_examples, class_correct).
  absl::StatusOr<core::EvalResult> Evaluate(std::span<const float> weights, uint64_t round,
                                            uint64_t version) override {
    py::gil_scoped_acquire gil;
    if (eval_fn_.is_none()) return absl::NotFoundError("no evaluate hook (run_client(evaluate=...))");
    try {
      py::dict info = ModelInfo(version);
      info["round"] = round;
      py::object out = eval_fn_(CopyOf(weights), info);
      if (out.is_none()) return absl::NotFoundError("evaluate() returned None");
      py::dict d = out.cast<py::dict>();
      core::EvalResult r;
      r.examples = d["examples"].cast<uint64_t>();
      r.loss = d["loss"].cast<double>();
      r.accuracy = d.contains("accuracy") ? d["accuracy"].cast<double>()
                                          : std::numeric_limits<double>::quiet_NaN();
      if (d.contains("class_examples")) {
        r.class_examples = d["class_examples"].cast<std::vector<uint64_t>>();
        r.class_correct = d["class_correct"].cast<std::vector<uint64_t>>();
      }
      return r;
    } catch (py::error_already_set& e) {
      // An evaluate hook that raises costs that round's answer, not the client.
      return absl::InternalError(StrCat("evaluate() raised: ", e.what()));
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("evaluate() returned what is not read: ", e.what()));
    }
  }

  // `stats_fn(weights, info)`: None (no statistics hook: the client declines), or what
  // fedlgc.reestimate_statistics returned, as a tuple (examples, batches, mean, var,
  // skipped) of run_client's checking.
  absl::StatusOr<core::Statistics> ReestimateStatistics(
      std::span<const float> weights, const protos::StatisticsStart& start) override {
    py::gil_scoped_acquire gil;
    if (stats_fn_.is_none()) {
      return absl::NotFoundError("no statistics hook (run_client(statistics=...))");
    }
    try {
      py::dict info = ModelInfo(start.model_version());
      info["round"] = start.round();
      info["batches"] = start.batches();
      info["batch_size"] = start.batch_size();
      info["seed"] = start.seed();
      py::object out = stats_fn_(CopyOf(weights), info);
      if (out.is_none()) return absl::NotFoundError("statistics() returned None");
      py::tuple t = out.cast<py::tuple>();
      core::Statistics st;
      st.examples = t[0].cast<uint64_t>();
      st.batches = t[1].cast<uint32_t>();
      st.mean = t[2].cast<std::vector<float>>();
      st.var = t[3].cast<std::vector<float>>();
      st.skipped = t[4].cast<std::vector<uint32_t>>();
      return st;
    } catch (py::error_already_set& e) {
      // A statistics hook that raises costs that phase's answer, not the client.
      return absl::InternalError(StrCat("statistics() raised: ", e.what()));
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("statistics() returned what is not read: ", e.what()));
    }
  }

  // `final_fn(weights, info)`: the job's final global model, to load into the module.
  absl::Status TakeFinalModel(std::span<const float> weights, uint64_t version) override {
    py::gil_scoped_acquire gil;
    try {
      final_fn_(CopyOf(weights), ModelInfo(version));
      return absl::OkStatus();
    } catch (py::error_already_set& e) {
      const std::string what = e.what();
      error_.emplace(std::move(e));
      return absl::FailedPreconditionError(StrCat("loading the final model raised: ", what));
    }
  }

  absl::StatusOr<double> Train(const protos::RoundStart& start,
                               std::vector<float>* weights) override {
    auto trained = TrainWith(start, weights, edge_client::LocalTerms{});
    if (!trained.ok()) return trained.status();
    return trained->loss;
  }

  // The round's train() through run_client's round_fn; under SCAFFOLD its info carries the
  // correction c - c_i (info["scaffold_correction"], a float32 copy of the flat vector),
  // which fedlgc.scaffold_step applies after each of the loop's optimizer steps, counting
  // them and adding up their learning rates (round_fn's fourth value).
  absl::StatusOr<edge_client::LocalTrained> TrainWith(
      const protos::RoundStart& start, std::vector<float>* weights,
      const edge_client::LocalTerms& terms) override {
    py::gil_scoped_acquire gil;
    try {
      py::dict info;
      info["round"] = start.round();
      info["model_version"] = start.model_version();
      info["lr"] = start.lr();
      info["local_epochs"] = start.local_epochs();
      info["local_steps"] = start.local_steps();
      info["batch_size"] = start.batch_size();
      info["seed"] = start.seed();
      info["prox_mu"] = start.objective().prox_mu();
      if (!terms.correction.empty()) {
        py::array_t<float> correction(static_cast<py::ssize_t>(terms.correction.size()));
        std::copy(terms.correction.begin(), terms.correction.end(), correction.mutable_data());
        info["scaffold_correction"] = std::move(correction);
      }
      info["total_rounds"] = client_->job_rounds();
      info["mode"] = client_->mode() ? std::string(ModeName(*client_->mode())) : std::string();
      AddJobRules(info);
      const std::string& text = client_->job_layout().Text();
      if (text != layout_text_) {
        layout_text_ = text;
        layout_ = LayoutList(client_->job_layout());
      }
      info["layout"] = layout_;
      // A view of the vector, no copy: the callable writes the trained weights into it.
      py::array_t<float> view({static_cast<py::ssize_t>(weights->size())}, {sizeof(float)},
                              weights->data(), py::capsule(weights, [](void*) {}));
      // (loss or None, the seconds train() took, the round log's figures, and the steps
      // scaffold_step counted with their learning rates added up)
      py::tuple out = round_fn_(view, info).cast<py::tuple>();
      train_seconds_ = out[1].cast<double>();
      figures_ = out[2].cast<std::map<std::string, double>>();
      edge_client::LocalTrained t;
      t.loss = out[0].is_none() ? std::numeric_limits<double>::quiet_NaN() : out[0].cast<double>();
      py::tuple steps = out[3].cast<py::tuple>();
      t.steps = steps[0].cast<int64_t>();
      t.lr_sum = steps[1].cast<double>();
      return t;
    } catch (py::error_already_set& e) {
      const std::string what = e.what();
      error_.emplace(std::move(e));
      return absl::FailedPreconditionError(StrCat("the Python training step raised: ", what));
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(
          StrCat("the Python training step failed: ", e.what()));
    }
  }

 private:
  // What every call about a committed model tells Python: its version, the job's buffers
  // and layout.
  py::dict ModelInfo(uint64_t version) const {
    py::dict info;
    info["model_version"] = version;
    AddJobRules(info);
    info["layout"] = LayoutList(client_->job_layout());
    return info;
  }
  // The job's buffers rule and the parameters that do not travel: the frozen ones (which
  // the Python module freezes, with the job's values, told once) and the personal ones
  // (which it keeps to itself, starting from the job's where it has none of its own).
  void AddJobRules(py::dict& info) const {
    info["buffers"] = client_->job_buffers_local() ? "local" : "average";
    const core::ParameterGroups& groups = client_->job_parameter_groups();
    info["frozen"] = groups.frozen;
    info["local_params"] = groups.local;
    if (!initial_told_) {
      info["frozen_values"] = CopyOf(client_->job_initial_frozen());
      info["initial_own"] = CopyOf(client_->job_initial_own());
      initial_told_ = true;
    }
  }
  static py::array_t<float> CopyOf(std::span<const float> weights) {
    py::array_t<float> copy(static_cast<py::ssize_t>(weights.size()));
    std::copy(weights.begin(), weights.end(), copy.mutable_data());
    return copy;
  }

  py::object round_fn_;
  py::object final_fn_;  // None: the final model is not taken
  py::object eval_fn_;   // None: no evaluate hook
  py::object stats_fn_;  // None: no statistics hook
  uint64_t num_samples_;
  edge_client::EdgeClient* client_ = nullptr;
  std::string layout_text_;
  py::list layout_;
  mutable bool initial_told_ = false;  // AddJobRules gave the job's initial values
  std::optional<py::error_already_set> error_;
  std::optional<double> train_seconds_;
  std::map<std::string, double> figures_;
};

// Client options from a dict of the names below (the flags' names with underscores).
edge_client::EdgeClientOptions OptionsFrom(const py::dict& options) {
  edge_client::EdgeClientOptions o;
  for (const auto& [key, value] : options) {
    const std::string k = key.cast<std::string>();
    if (k == "data") o.data = value.cast<std::string>();
    else if (k == "data_dir") o.data_dir = value.cast<std::string>();
    else if (k == "label_column") o.label_column = value.cast<std::string>();
    else if (k == "targets") o.targets = value.cast<std::string>();
    else if (k == "inputs") o.inputs = value.cast<std::string>();
    else if (k == "train_limit") o.train_limit = value.cast<uint64_t>();
    else if (k == "shard") o.shard = value.cast<uint32_t>();
    else if (k == "num_shards") o.num_shards = value.cast<uint32_t>();
    else if (k == "partition") o.partition = value.cast<std::string>();
    else if (k == "partition_seed") o.partition_seed = value.cast<uint64_t>();
    else if (k == "eval_data") o.eval_data = value.cast<std::string>();
    else if (k == "server") o.server = value.cast<std::string>();
    else if (k == "client_id") o.client_id = value.cast<std::string>();
    else if (k == "state_dir") o.state_dir = value.cast<std::string>();
    else if (k == "tls_ca") o.tls_ca = value.cast<std::string>();
    else if (k == "tls_cert") o.tls_cert = value.cast<std::string>();
    else if (k == "tls_key") o.tls_key = value.cast<std::string>();
    else if (k == "tls_server_name") o.tls_server_name = value.cast<std::string>();
    else if (k == "insecure") o.insecure = value.cast<bool>();
    else if (k == "model") o.model = value.cast<std::string>();
    else if (k == "metrics_listen") o.metrics_listen = value.cast<std::string>();
    else if (k == "max_message_bytes") o.max_message_bytes = value.cast<uint32_t>();
    else if (k == "backoff_max_s") o.backoff_max_s = value.cast<double>();
    else if (k == "call_timeout_s") o.call_timeout_s = value.cast<double>();
    else if (k == "exit_after_rounds") o.exit_after_rounds = value.cast<uint32_t>();
    else if (k == "linger_s") o.linger_s = value.cast<double>();
    else if (k == "torch_threads") o.torch_threads = value.cast<int>();
    else throw py::value_error(StrCat("unknown client option '", k, "'"));
  }
  return o;
}

// x [n, shape...] (float32, or int64 token ids) and y (int64 labels, or float32 targets).
py::tuple Arrays(const core::Dataset& d) {
  std::vector<py::ssize_t> xs{static_cast<py::ssize_t>(d.size())};
  xs.insert(xs.end(), d.shape.begin(), d.shape.end());
  py::object x = d.integer_inputs ? py::object(py::array_t<int64_t>(xs, d.ids.data()))
                                  : py::object(py::array_t<float>(xs, d.x.data()));
  py::object y;
  if (d.classification()) {
    std::vector<int64_t> labels(d.labels.begin(), d.labels.end());
    y = py::array_t<int64_t>(std::vector<py::ssize_t>{static_cast<py::ssize_t>(d.size())},
                             labels.data());
  } else {
    std::vector<py::ssize_t> ys{static_cast<py::ssize_t>(d.size())};
    ys.insert(ys.end(), d.target_shape.begin(), d.target_shape.end());
    y = py::array_t<float>(ys, d.targets.data());
  }
  return py::make_tuple(x, y);
}

// A client's shard as the C++ client reads and splits it (--data, --partition, the
// seeds), and the share it holds out for federated evaluation at `eval_fraction` (or its
// --eval-data): {"x", "y", "classes", "eval_x", "eval_y", "source"}.
py::dict LoadShard(const py::dict& options, double eval_fraction) {
  const edge_client::EdgeClientOptions o = OptionsFrom(options);
  static edge_client::DataCache* const cache = new edge_client::DataCache();
  absl::StatusOr<std::shared_ptr<const edge_client::TrainingData>> data;
  {
    py::gil_scoped_release release;
    data = cache->Get(o);
  }
  if (!data.ok()) Throw(data.status());
  if (o.shard >= (*data)->shards.size()) throw py::value_error("shard must be < num_shards");
  const std::vector<uint32_t>& shard = (*data)->shards[o.shard];
  const core::HeldOutSplit split = core::SplitHeldOut(
      shard, o.eval_data.empty() ? eval_fraction : 0.0, o.held_out_seed());
  py::dict out;
  py::tuple train = Arrays(core::Subset((*data)->data, split.train));
  out["x"] = train[0];
  out["y"] = train[1];
  out["classes"] = (*data)->data.classes;
  out["source"] = (*data)->data.source;
  if (!o.eval_data.empty()) {
    core::DataOptions d = o.data_options();
    d.spec = o.eval_data;
    auto eval = core::LoadDataset(d, /*train=*/false);
    if (!eval.ok()) Throw(eval.status());
    py::tuple e = Arrays(*eval);
    out["eval_x"] = e[0];
    out["eval_y"] = e[1];
  } else if (!split.held.empty()) {
    py::tuple e = Arrays(core::Subset((*data)->data, split.held));
    out["eval_x"] = e[0];
    out["eval_y"] = e[1];
  }
  return out;
}

// The C++ edge client with a Python training step.
class PyClient {
 public:
  PyClient(const py::dict& options, py::object round_fn, uint64_t num_samples, py::object final_fn,
           py::object eval_fn, py::object stats_fn)
      : trainer_(std::make_unique<PyTrainer>(std::move(round_fn), std::move(final_fn),
                                             std::move(eval_fn), std::move(stats_fn),
                                             num_samples)) {
    edge_client::EdgeClientOptions o = OptionsFrom(options);
    if (num_samples == 0) throw py::value_error("num_samples must be > 0");
    o.device = "cpu";  // the client's own copy of the model only gives the layout
    auto c = edge_client::EdgeClient::Create(std::move(o), &modes::MakeClientMode, nullptr,
                                             trainer_.get());
    if (!c.ok()) Throw(c.status());
    client_ = *std::move(c);
    trainer_->set_client(client_.get());
  }

  // Runs until the job is done, stop() is called, or a fatal error; the GIL is released
  // except while the training step runs.
  void Run() {
    absl::Status st;
    {
      py::gil_scoped_release release;
      st = client_->Run();
    }
    if (auto& e = trainer_->error()) {
      py::error_already_set err = std::move(*e);
      e.reset();
      throw err;
    }
    if (!st.ok()) Throw(st);
  }

  void Stop() { client_->Stop(); }
  int metrics_port() const { return client_->metrics_port(); }
  uint64_t rounds_of_job() const { return client_->job_rounds(); }

 private:
  std::unique_ptr<PyTrainer> trainer_;  // outlives client_ (declared first)
  std::unique_ptr<edge_client::EdgeClient> client_;
};

}  // namespace
}  // namespace fedlgc::python

PYBIND11_MODULE(_fedlgc, m) {
  using fedlgc::python::PyClient;
  using fedlgc::python::PyCodec;
  m.doc() = "fedlgc's C++ edge client and codec library (use the fedlgc package)";
  m.attr("PROTOCOL_VERSION") = fedlgc::kProtocolVersion;
  m.attr("VERSION") = FEDLGC_VERSION;  // the project's (CMakeLists.txt)

  py::class_<PyCodec>(m, "Codec")
      .def(py::init<const std::string&, const py::object&>(), py::arg("spec"),
           py::arg("layout") = py::none())
      .def_property_readonly("spec", &PyCodec::spec)
      .def_property_readonly("wire_spec", &PyCodec::wire_spec)
      .def_property_readonly("traits", &PyCodec::traits)
      .def("max_frame_bytes", &PyCodec::max_frame_bytes, py::arg("n"))
      .def("encode", &PyCodec::Encode, py::arg("x"), py::arg("seed") = 0,
           py::arg("max_frame_bytes") = 0, py::arg("cuts") = std::vector<uint64_t>())
      .def("decode", &PyCodec::Decode, py::arg("frames"));
  m.def("frame_info", &fedlgc::python::FrameInfo, py::arg("frame"));
  m.def("load_shard", &fedlgc::python::LoadShard, py::arg("options"),
        py::arg("eval_fraction") = 0.0);

  py::class_<PyClient>(m, "Client")
      .def(py::init<const py::dict&, py::object, uint64_t, py::object, py::object, py::object>(),
           py::arg("options"), py::arg("round_fn"), py::arg("num_samples"),
           py::arg("final_fn") = py::none(), py::arg("eval_fn") = py::none(),
           py::arg("stats_fn") = py::none())
      .def("run", &PyClient::Run)
      .def("stop", &PyClient::Stop)
      .def_property_readonly("metrics_port", &PyClient::metrics_port)
      .def_property_readonly("job_rounds", &PyClient::rounds_of_job);
}
