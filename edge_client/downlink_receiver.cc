// The edge client's side of the compressed downlink (see downlink_receiver.h).
#include "edge_client/downlink_receiver.h"

#include <cstdio>

#include "codecs/broadcast.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/atomic_file.h"
#include "core/float_bytes.h"

namespace fedlgc::edge_client {


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
  auto bytes = core::ReadFileIfExists(path_);
  if (!bytes.ok() || !bytes->has_value()) return absl::OkStatus();
  auto reader = core::StateReader::Open(**bytes, path_);
  std::string saved_codec;
  uint64_t version = 0;
  std::vector<float> model;
  if (!reader.ok() || !reader->Str(&saved_codec) || !reader->U64(&version) ||
      !reader->Floats(&model) || !reader->done()) {
    std::fprintf(stderr, "%s does not load: the next model download is whole\n", path_.c_str());
    return absl::OkStatus();
  }
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
  core::StateWriter w;
  w.Str(spec_);
  w.U64(version);
  w.Floats(model_);
  return core::AtomicWriteFile(path_, w.Finish());
}

void DownlinkReceiver::Forget() {
  version_.reset();
  model_.clear();
}

}  // namespace fedlgc::edge_client
