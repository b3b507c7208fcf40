// The compressed downlink (see downlink.h).
#include "coordinator/downlink.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "base/crc32c.h"
#include "base/log.h"
#include "base/spec.h"
#include "base/str.h"
#include "coordinator/downlink_state.h"
#include "core/state_file.h"

namespace fedlgc::coordinator {
namespace {

std::string FloatBytes(std::span<const float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Adds norm=linf to every qsgd node without a norm; true when it added one.
bool LinfNorms(SpecNode* node) {
  bool changed = false;
  for (SpecArg& a : node->args) {
    if (a.node) changed |= LinfNorms(a.node.get());
  }
  if (node->name != "qsgd") return changed;
  for (const SpecArg& a : node->args) {
    if (a.key == "norm") return changed;
  }
  SpecArg norm;
  norm.key = "norm";
  norm.node = std::make_unique<SpecNode>();
  norm.node->name = "linf";
  node->args.push_back(std::move(norm));
  return true;
}

codecs::BroadcastOptions BroadcastOptionsOf(const DownlinkOptions& o) {
  codecs::BroadcastOptions b;
  b.codec = EffectiveDownlinkCodec(o.codec);
  b.window = o.window;
  b.max_frame_bytes = o.max_frame_bytes;
  b.cuts = o.cuts;
  return b;
}

// The state files' prefix: "downlink" for the global model, "downlink-<name>" (letters
// and digits kept, anything else "_") for a mode's blob.
std::string PrefixOf(const std::string& name) {
  if (name.empty()) return "downlink";
  std::string p = "downlink-";
  for (char c : name) p += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return p;
}

// The versions of the state files <prefix>-<version>.bin in `dir`, ascending.
std::vector<uint64_t> SavedVersions(const std::string& dir, const std::string& prefix) {
  std::vector<uint64_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() <= prefix.size() + 5 || f.compare(0, prefix.size() + 1, prefix + "-") != 0 ||
        f.compare(f.size() - 4, 4, ".bin") != 0) {
      continue;
    }
    const std::string digits = f.substr(prefix.size() + 1, f.size() - prefix.size() - 5);
    if (digits.empty() || digits.size() > 19 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    out.push_back(std::stoull(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The newest broadcast saved at `at_most` or before; nullptr when there is none for this
// codec and job, or when the one saved at `at_most` follows another true model (left by a
// run that crashed before its checkpoint, or by another job).
absl::StatusOr<std::unique_ptr<codecs::BroadcastEncoder>> LoadSaved(
    const DownlinkOptions& o, const std::string& dir, const std::string& prefix,
    uint64_t at_most, uint32_t true_crc) {
  std::optional<uint64_t> saved;
  for (uint64_t v : SavedVersions(dir, prefix)) {
    if (v <= at_most) saved = v;
  }
  if (!saved) return nullptr;
  const uint64_t version = *saved;
  const std::string path = core::RoundStatePath(dir, prefix, version);
  auto saved_state = LoadDownlinkState(dir, prefix, version);
  if (!saved_state.ok()) {
    log::Warning("coordinator", "%s; clients download the model whole once",
                 std::string(saved_state.status().message()).c_str());
    return nullptr;
  }
  const DownlinkState& st = *saved_state;
  if (st.codec != o.codec || st.job != o.job || (version == at_most && st.true_crc != true_crc)) {
    log::Warning("coordinator", "%s belongs to another %s: clients download the model whole once",
                 path,
                 st.codec != o.codec ? "downlink codec"
                 : st.job != o.job   ? "job"
                                     : "model");
    return nullptr;
  }
  auto enc = codecs::BroadcastEncoder::Restore(BroadcastOptionsOf(o), st.encoder);
  if (!enc.ok()) return enc.status();
  if ((*enc)->version() != version) {
    return absl::DataLossError(StrCat(path, ": holds version ", (*enc)->version()));
  }
  return enc;
}

}  // namespace

absl::StatusOr<std::vector<float>> Downlink::SavedHeld(const DownlinkOptions& options,
                                                       const std::string& state_dir,
                                                       const std::string& name,
                                                       uint64_t version) {
  auto saved = LoadDownlinkState(state_dir, PrefixOf(name), version);
  if (!saved.ok()) return saved.status();
  codecs::BroadcastOptions b = BroadcastOptionsOf(options);
  b.codec = saved->codec;
  auto enc = codecs::BroadcastEncoder::Restore(b, saved->encoder);
  if (!enc.ok()) return enc.status();
  return std::vector<float>((*enc)->held().begin(), (*enc)->held().end());
}

bool DownlinkCompressed(const DownlinkOptions& options) {
  return !options.codec.empty() && options.codec != "fp32";
}

absl::StatusOr<std::unique_ptr<Downlink>> Downlink::Open(const DownlinkOptions& options,
                                                         const std::string& state_dir,
                                                         const std::string& name,
                                                         uint64_t version,
                                                         std::span<const float> model) {
  const std::string prefix = PrefixOf(name);
  const uint32_t true_crc = codecs::ModelCrc(model);
  auto saved = LoadSaved(options, state_dir, prefix, version, true_crc);
  if (!saved.ok()) return saved.status();
  std::unique_ptr<codecs::BroadcastEncoder> enc = *std::move(saved);
  if (enc != nullptr && enc->held().size() != model.size()) enc = nullptr;
  // Saved before `version` (its commit or first request came after the last state was
  // written): the delta to it, as it would have been made.
  if (enc != nullptr && enc->version() < version) {
    if (auto d = enc->Advance(version, model); !d.ok()) return d.status();
  }
  if (enc == nullptr) {
    auto made = codecs::BroadcastEncoder::Create(BroadcastOptionsOf(options),
                                                 std::vector<float>(model.begin(), model.end()),
                                                 version);
    if (!made.ok()) return made.status();
    enc = *std::move(made);
  }
  std::unique_ptr<Downlink> d(new Downlink(options, state_dir, prefix, std::move(enc)));
  absl::MutexLock lock(&d->mu_);
  d->true_crc_ = true_crc;
  if (absl::Status st = d->SaveLocked(); !st.ok()) return st;
  return d;
}

Downlink::Downlink(DownlinkOptions options, std::string state_dir, std::string prefix,
                   std::unique_ptr<codecs::BroadcastEncoder> encoder)
    : options_(std::move(options)),
      state_dir_(std::move(state_dir)),
      prefix_(std::move(prefix)),
      codec_spec_(encoder->codec().spec()),
      encoder_(std::move(encoder)) {
  absl::MutexLock lock(&mu_);
  ResetBlobsLocked();
}

void Downlink::ResetBlobsLocked() {
  full_ = MakeBlob(encoder_->version(), FloatBytes(encoder_->held()));
  chains_.clear();
}

absl::Status Downlink::SaveLocked() {
  const uint64_t version = encoder_->version();
  if (absl::Status st = SaveDownlinkState(
          state_dir_, prefix_, version,
          DownlinkState{options_.codec, options_.job, true_crc_, encoder_->SaveState()});
      !st.ok()) {
    return st;
  }
  saved_ = version;
  // Keep this version's state and the newest before it (the checkpoint on disk may still
  // be that one's); versions of a mode's blob are sparse, so list rather than count down.
  const std::vector<uint64_t> versions = SavedVersions(state_dir_, prefix_);
  std::optional<uint64_t> previous;
  for (uint64_t v : versions) {
    if (v < version) previous = v;
  }
  std::error_code ec;
  for (uint64_t v : versions) {
    if (v < version && v != previous) {
      std::filesystem::remove(core::RoundStatePath(state_dir_, prefix_, v), ec);
    }
  }
  return absl::OkStatus();
}

absl::Status Downlink::Publish(uint64_t version, std::span<const float> model) {
  absl::MutexLock lock(&mu_);
  if (version == encoder_->version()) {
    // Published already; a state whose write failed is written now.
    return saved_ == version ? absl::OkStatus() : SaveLocked();
  }
  if (version < encoder_->version()) {
    return absl::NotFoundError(StrCat("version ", version, " is superseded by ",
                                      encoder_->version()));
  }
  auto delta = encoder_->Advance(version, model);
  if (!delta.ok()) return delta.status();
  true_crc_ = codecs::ModelCrc(model);
  if (options_.keep_versions > 0) {
    past_.push_back(full_);
    while (past_.size() > options_.keep_versions) past_.pop_front();
  }
  ResetBlobsLocked();
  return SaveLocked();
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> Downlink::Serve(uint64_t version,
                                                                std::optional<uint64_t> held) {
  absl::MutexLock lock(&mu_);
  if (version != encoder_->version()) {
    for (const auto& past : past_) {
      if (past->version == version) return past;
    }
    return absl::NotFoundError(StrCat("model version ", version,
                                      " is not served; the current version is ",
                                      encoder_->version()));
  }
  if (!held.has_value() || *held > version) return full_;
  if (auto it = chains_.find(*held); it != chains_.end()) return it->second;
  const std::vector<const codecs::BroadcastDelta*> deltas = encoder_->ChainFrom(*held);
  if (deltas.empty() && *held != version) return full_;
  auto blob = std::make_shared<ModelBlob>();
  blob->version = version;
  blob->bytes = codecs::SerializeChain(version, encoder_->held_crc(), deltas);
  blob->crc32c = Crc32c(blob->bytes.data(), blob->bytes.size());
  blob->chain = true;
  blob->from = *held;
  blob->raw_bytes = full_->bytes.size();
  chains_.emplace(*held, blob);
  return std::shared_ptr<const ModelBlob>(std::move(blob));
}

std::vector<float> Downlink::Held() const {
  absl::MutexLock lock(&mu_);
  return std::vector<float>(encoder_->held().begin(), encoder_->held().end());
}

uint64_t Downlink::version() const {
  absl::MutexLock lock(&mu_);
  return encoder_->version();
}

std::string EffectiveDownlinkCodec(const std::string& spec, std::string* note) {
  if (note != nullptr) note->clear();
  auto node = ParseSpec(spec);
  if (!node.ok() || !LinfNorms(&*node)) return spec;
  std::string effective = FormatSpec(*node);
  if (note != nullptr) {
    *note = StrCat("--downlink-codec ", spec, " runs as ", effective,
                   ": levels of each bucket's largest magnitude keep the model clients hold "
                   "closer to the true one than the L2 norm at the same bytes (say norm=l2 to "
                   "keep it)");
  }
  return effective;
}

absl::StatusOr<std::unique_ptr<Downlinks>> Downlinks::Create(DownlinkOptions options,
                                                             std::string state_dir) {
  std::string note;
  EffectiveDownlinkCodec(options.codec, &note);
  if (!note.empty()) log::Warning("coordinator", "%s", note);
  codecs::BroadcastOptions b = BroadcastOptionsOf(options);
  auto probe = codecs::BroadcastEncoder::Create(b, {0.0f}, 0);
  if (!probe.ok()) return probe.status();
  std::string spec = (*probe)->codec().spec();
  return std::unique_ptr<Downlinks>(
      new Downlinks(std::move(options), std::move(state_dir), std::move(spec)));
}

absl::StatusOr<Downlink*> Downlinks::At(const std::string& name, uint64_t version,
                                        const std::function<std::vector<float>()>& model) {
  Downlink* d = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      auto opened = Downlink::Open(options_, state_dir_, name, version, model());
      if (!opened.ok()) return opened.status();
      it = by_name_.emplace(name, *std::move(opened)).first;
      return it->second.get();
    }
    d = it->second.get();  // never erased: the pointer outlives the lock
  }
  // Advanced outside the set's lock: one blob's encode and write stall no other blob.
  const uint64_t have = d->version();
  if (have <= version) {
    // The same version again only retries a state write that failed: no model needed.
    absl::Status st = have < version ? d->Publish(version, model()) : d->Publish(version, {});
    if (!st.ok()) return st;
  }
  return d;
}

Downlink* Downlinks::global() const {
  absl::MutexLock lock(&mu_);
  auto it = by_name_.find("");
  return it == by_name_.end() ? nullptr : it->second.get();
}

}  // namespace fedlgc::coordinator
