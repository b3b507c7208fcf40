// The compressed downlink (see downlink.h).
#include "coordinator/downlink.h"

#include <cstdio>
#include <utility>

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::coordinator {
namespace {


constexpr std::string_view kPrefix = "downlink";
constexpr uint32_t kMagic = 0x4C4E4C44;  // "DLNL"
constexpr uint32_t kVersion = 1;

std::string FloatBytes(std::span<const float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

codecs::BroadcastOptions BroadcastOptionsOf(const DownlinkOptions& o) {
  codecs::BroadcastOptions b;
  b.codec = o.codec;
  b.window = o.window;
  b.max_frame_bytes = o.max_frame_bytes;
  return b;
}

// The broadcast saved beside the checkpoint of `version`; nullptr when there is none for
// this codec (a fresh start, or the downlink codec changed).
absl::StatusOr<std::unique_ptr<codecs::BroadcastEncoder>> LoadSaved(const DownlinkOptions& o,
                                                                     const std::string& dir,
                                                                     uint64_t version) {
  std::string bytes;
  auto reader = core::ReadRoundState(dir, kPrefix, version, kMagic, kVersion, &bytes);
  if (absl::IsNotFound(reader.status())) return nullptr;
  if (!reader.ok()) return reader.status();
  std::string codec, state;
  if (!reader->Str(&codec) || !reader->Str(&state, size_t{1} << 34) || !reader->done()) {
    return absl::DataLossError(StrCat(core::RoundStatePath(dir, kPrefix, version), ": truncated"));
  }
  if (codec != o.codec) {
    std::fprintf(stderr,
                 "coordinator: the saved downlink used codec %s, this job %s: clients download "
                 "the model whole once\n",
                 codec.c_str(), o.codec.c_str());
    return nullptr;
  }
  auto enc = codecs::BroadcastEncoder::Restore(BroadcastOptionsOf(o), state);
  if (!enc.ok()) return enc.status();
  if ((*enc)->version() != version) {
    return absl::DataLossError(StrCat(core::RoundStatePath(dir, kPrefix, version),
                                      ": holds version ", (*enc)->version()));
  }
  return enc;
}

}  // namespace

bool DownlinkCompressed(const DownlinkOptions& options) {
  return !options.codec.empty() && options.codec != "fp32";
}

absl::StatusOr<std::unique_ptr<Downlink>> Downlink::Open(const DownlinkOptions& options,
                                                         const std::string& state_dir,
                                                         uint64_t version,
                                                         std::span<const float> model) {
  auto saved = LoadSaved(options, state_dir, version);
  if (!saved.ok()) return saved.status();
  std::unique_ptr<codecs::BroadcastEncoder> enc = *std::move(saved);
  if (enc != nullptr && enc->held().size() != model.size()) enc = nullptr;
  if (enc == nullptr) {
    auto made = codecs::BroadcastEncoder::Create(BroadcastOptionsOf(options),
                                                 std::vector<float>(model.begin(), model.end()),
                                                 version);
    if (!made.ok()) return made.status();
    enc = *std::move(made);
  }
  std::unique_ptr<Downlink> d(new Downlink(options, state_dir, std::move(enc)));
  absl::MutexLock lock(&d->mu_);
  if (absl::Status st = d->SaveLocked(); !st.ok()) return st;
  return d;
}

Downlink::Downlink(DownlinkOptions options, std::string state_dir,
                   std::unique_ptr<codecs::BroadcastEncoder> encoder)
    : options_(std::move(options)),
      state_dir_(std::move(state_dir)),
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
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, encoder_->version());
  w.Str(options_.codec);
  w.Str(encoder_->SaveState());
  return core::SaveRoundState(state_dir_, kPrefix, encoder_->version(), w.Finish());
}

absl::Status Downlink::Publish(uint64_t version, std::span<const float> model) {
  absl::MutexLock lock(&mu_);
  if (version == encoder_->version()) return absl::OkStatus();
  auto delta = encoder_->Advance(version, model);
  if (!delta.ok()) return delta.status();
  ResetBlobsLocked();
  return SaveLocked();
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> Downlink::Serve(uint64_t version,
                                                                std::optional<uint64_t> held) {
  absl::MutexLock lock(&mu_);
  if (version != encoder_->version()) {
    return absl::NotFoundError(StrCat("model version ", version,
                                      " is not served; the current version is ",
                                      encoder_->version()));
  }
  if (!held.has_value() || *held > version) return full_;
  if (auto it = chains_.find(*held); it != chains_.end()) return it->second;
  const std::vector<const codecs::BroadcastDelta*> deltas = encoder_->ChainFrom(*held);
  if (deltas.empty() && *held != version) return full_;
  auto blob = std::make_shared<ModelBlob>(
      *MakeBlob(version, codecs::SerializeChain(version, encoder_->held_crc(), deltas)));
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

}  // namespace fedlgc::coordinator
