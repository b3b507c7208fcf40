// What a round asks of its participants (see round_terms.h).
#include "coordinator/round_terms.h"

#include "codecs/registry.h"
#include "codecs/rng.h"

namespace fedlgc::coordinator {

RoundTerms::RoundTerms(RoundPlan plan, double max_client_weight, uint64_t seed,
                       std::shared_ptr<const CodecChooser> chooser,
                       const codecs::ModelLayout* layout)
    : plan_(std::move(plan)),
      max_client_weight_(max_client_weight),
      seed_(seed),
      chooser_(std::move(chooser)) {
  // The coordinator validates the job options before building the engine.
  std::vector<std::string> specs = plan_.warmup_codecs;
  specs.push_back(plan_.codec);
  if (chooser_ != nullptr) {
    for (std::string& spec : chooser_->Specs()) specs.push_back(std::move(spec));
  }
  for (const std::string& spec : specs) {
    if (decoders_.count(spec)) continue;
    if (auto codec = codecs::MakeCodec(spec, layout); codec.ok())
      decoders_[spec] = std::move(codec).value();
  }
}

void RoundTerms::UseCodec(std::string spec, std::shared_ptr<const codecs::Codec> decoder) {
  absl::MutexLock lock(&mu_);
  codec_override_ = std::move(spec);
  decoder_override_ = codec_override_.empty() ? nullptr : std::move(decoder);
}

void RoundTerms::UseTraining(std::optional<LocalTraining> training) {
  absl::MutexLock lock(&mu_);
  training_override_ = training;
}

RoundCodec RoundTerms::ForRound(uint64_t round) const {
  absl::MutexLock lock(&mu_);
  RoundCodec rc;
  rc.training = training_override_.value_or(plan_.training());
  if (codec_override_.empty()) {
    rc.spec = plan_.CodecFor(round);
    rc.decoder = DecoderOf(rc.spec);
  } else {
    rc.spec = codec_override_;
    rc.decoder = decoder_override_.get();
    rc.decoder_ref = decoder_override_;
  }
  return rc;
}

std::string RoundTerms::CodecOf(const std::string& round_spec, const std::string& client,
                                Clock::duration window) const {
  if (chooser_ == nullptr) return round_spec;
  {
    absl::MutexLock lock(&mu_);
    if (!codec_override_.empty()) return round_spec;
  }
  return chooser_->Choose(client, window);
}

const codecs::Codec* RoundTerms::DecoderOf(const std::string& spec) const {
  auto it = decoders_.find(spec);
  return it == decoders_.end() ? nullptr : it->second.get();
}

std::string RoundTerms::MetricLabel(uint64_t round, const std::string& asked_spec) const {
  return chooser_ != nullptr && !asked_spec.empty() ? asked_spec : plan_.CodecFor(round);
}

uint64_t RoundTerms::ClientSeed(const std::string& client, uint64_t round) const {
  uint64_t h = codecs::Mix64(seed_ ^ round);
  for (char c : client) h = codecs::Mix64(h ^ static_cast<unsigned char>(c));
  return h;
}

uint64_t RoundTerms::SharedSeed(uint64_t round) const {
  return (codecs::Mix64(codecs::Mix64(seed_ ^ 0x5EED5EED5EED5EEDull) ^ round) >> 12) | 1;
}

}  // namespace fedlgc::coordinator
