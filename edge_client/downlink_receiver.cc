// The edge client's side of the compressed downlink (see downlink_receiver.h).
#include "edge_client/downlink_receiver.h"

#include <cstdio>
#include <cstring>

#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "codecs/broadcast.h"
#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "protos/state.pb.h"

namespace fedlgc::edge_client {
namespace {

// <id>.downlink: u32 magic 'FLDR', u32 version 2, the message state::HeldModel
// (protos/state.proto, core/state_message.h), CRC32C (core/atomic_file.h). Version 1 had no
// magic: str codec, u64 version, floats model, CRC32C; its first word, a codec spec's
// length, is never the magic.
constexpr uint32_t kMagic = 0x52444C46;  // "FLDR"
constexpr uint32_t kVersion = 2;

struct Held {
  std::string codec;
  uint64_t version = 0;
  std::vector<float> model;
};

absl::StatusOr<Held> ReadHeld(std::string_view bytes, const std::string& path) {
  auto reader = core::StateReader::Open(bytes, path);
  if (!reader.ok()) return reader.status();
  Held h;
  uint32_t magic = 0, version = 0;
  if (bytes.size() >= 8) std::memcpy(&magic, bytes.data(), 4);
  if (magic != kMagic) {  // version 1
    if (!reader->Str(&h.codec) || !reader->U64(&h.version) || !reader->Floats(&h.model) ||
        !reader->done()) {
      return absl::DataLossError(StrCat(path, ": malformed held model"));
    }
    return h;
  }
  if (!reader->U32(&magic) || !reader->U32(&version) || version != kVersion) {
    return absl::DataLossError(StrCat(path, ": held model of version ", version));
  }
  state::HeldModel m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  auto model = core::FloatsFromBytes(m.model(), path);
  if (!model.ok()) return model.status();
  h.codec = m.codec();
  h.version = m.version();
  h.model = *std::move(model);
  return h;
}

}  // namespace

absl::Status DownlinkReceiver::Configure(const std::string& codec, uint64_t dim) {
  if (codec == spec_ && dim == dim_ && (codec_ != nullptr || codec.empty())) return absl::OkStatus();
  Forget();
  codec_.reset();
  spec_ = codec;
  dim_ = dim;
  if (codec.empty()) return absl::OkStatus();
  auto made = codecs::MakeCodec(codec);
  if (!made.ok()) return made.status();
  codec_ = *std::move(made);
  auto bytes = fedlgc::ReadFileIfExists(path_);
  if (!bytes.ok() || !bytes->has_value()) return absl::OkStatus();
  auto held = ReadHeld(**bytes, path_);
  if (!held.ok()) {
    log::Warning("", "%s does not load (%s): the next model download is whole", path_,
                 std::string(held.status().message()).c_str());
    return absl::OkStatus();
  }
  auto& [saved_codec, version, model] = *held;
  if (saved_codec == codec && model.size() == dim) {
    version_ = version;
    model_ = std::move(model);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DownlinkReceiver::Take(const Transport::ModelDownload& d,
                                                          uint64_t version) {
  if (!active()) return absl::FailedPreconditionError("no compressed downlink in this job");
  if (!d.chain) {
    auto floats = core::FloatsFromBytes(d.bytes, dim_, StrCat("model ", version));
    if (!floats.ok()) return floats.status();
    if (absl::Status st = Hold(version, *floats); !st.ok()) return st;
    return floats;
  }
  codecs::FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, dim_);
  auto chain = codecs::ParseChain(d.bytes, limits);
  absl::Status st = chain.status();
  if (st.ok() && (chain->to != version || !version_ || d.from != *version_)) {
    st = absl::InvalidArgumentError(StrCat("a chain from version ", d.from, " to ", chain->to,
                                           " for a client at ",
                                           version_ ? StrCat(*version_) : std::string("none"),
                                           " asking for ", version));
  }
  uint64_t v = version_.value_or(0);
  std::vector<float> m = model_;
  if (st.ok()) st = codecs::ApplyChain(*codec_, *chain, &v, &m);
  if (!st.ok()) {
    Forget();
    return absl::IsDataLoss(st) ? st : absl::InvalidArgumentError(st.message());
  }
  if (absl::Status saved = Hold(v, m); !saved.ok()) return saved;
  return m;
}

absl::Status DownlinkReceiver::Hold(uint64_t version, std::vector<float> model) {
  version_ = version;
  model_ = std::move(model);
  state::HeldModel m;
  m.set_codec(spec_);
  m.set_version(version);
  m.set_model(core::FloatsToBytes(model_));
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  if (absl::Status st = core::AppendMessage(m, &w, path_); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path_, w.Finish());
}

void DownlinkReceiver::Forget() {
  version_.reset();
  model_.clear();
}

}  // namespace fedlgc::edge_client
