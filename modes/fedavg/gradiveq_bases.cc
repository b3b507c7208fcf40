// GradiVeQ's bases at the coordinator (see gradiveq_bases.h).
#include "modes/fedavg/gradiveq_bases.h"

#include <cstdio>

#include "base/log.h"
#include "base/str.h"
#include "codecs/registry.h"
#include "modes/fedavg/fedavg_state.h"

namespace fedlgc::modes {
namespace {

absl::StatusOr<std::shared_ptr<const codecs::GradiVeQ>> Build(
    const std::string& spec, const codecs::ModelLayout& layout,
    std::shared_ptr<const codecs::SliceBasis> basis) {
  auto made = codecs::MakeCodec(spec, &layout, std::move(basis));
  if (!made.ok()) return made.status();
  auto* g = dynamic_cast<codecs::GradiVeQ*>(made->get());
  if (g == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("\"", spec, "\": a GradiVeQ job's codec is gradiveq(...) itself (clients add ",
               "what they keep of its error; ef(gradiveq(...)) is not taken)"));
  }
  made->release();
  return std::shared_ptr<const codecs::GradiVeQ>(g);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GradiveqBases>> GradiveqBases::Create(
    const std::string& codec, const codecs::ModelLayout& layout, std::string state_dir,
    uint64_t committed_round) {
  auto plain = Build(codec, layout, nullptr);
  if (!plain.ok()) return plain.status();
  std::unique_ptr<GradiveqBases> b(
      new GradiveqBases(*std::move(plain), layout, std::move(state_dir)));
  if (committed_round > 0) {
    if (absl::Status st = b->Load(committed_round); !st.ok()) return st;
  }
  return b;
}

absl::Status GradiveqBases::Use(std::shared_ptr<const codecs::SliceBasis> basis) {
  auto coded = Build(plain_->spec(), layout_, basis);
  if (!coded.ok()) return coded.status();
  coded_ = *std::move(coded);
  absl::MutexLock lock(&mu_);
  blob_ = coordinator::MakeBlob(basis->version(), basis->bytes());
  basis_ = std::move(basis);
  return absl::OkStatus();
}

const codecs::LinearCode* GradiveqBases::BeginRound(coordinator::RoundEngine& engine,
                                                    uint64_t round) {
  if (engine.terms().plan().CodecFor(round) != engine.terms().plan().codec) {
    // A warm-up round (--codec-warmup) runs its own codec; the fits start after them.
    fitting_ = false;
    coded_round_ = false;
    engine.terms().UseCodec("", nullptr);
    return nullptr;
  }
  coded_round_ = true;
  uint64_t fitted = 0;
  {
    absl::MutexLock lock(&mu_);
    if (basis_) fitted = basis_->version();
  }
  // A basis fitted from round f serves rounds f+1 .. f+refit-1; round f+refit refits.
  fitting_ = fitted == 0 || round >= fitted + plain_->refit();
  const std::shared_ptr<const codecs::GradiVeQ>& codec = fitting_ ? plain_ : coded_;
  engine.terms().UseCodec(codec->spec(), codec);
  return codec.get();
}

absl::Status GradiveqBases::EndRound(uint64_t round, std::span<const float> step,
                                     RoundReport* report) {
  if (!coded_round_) return absl::OkStatus();
  if (fitting_) {
    double sq = 0;
    for (float v : step) sq += double(v) * v;
    if (sq > 0) {  // a round that counted nothing fits nothing: the next one tries again
      auto fit = codecs::SliceBasis::Fit(layout_, plain_->slice(), plain_->dims(), round, step);
      if (!fit.ok()) return fit.status();
      auto basis = std::make_shared<const codecs::SliceBasis>(*std::move(fit));
      double kept = 0;
      for (double k : basis->kept()) kept += k;
      if (!basis->kept().empty()) report->figures["gradiveq_kept"] = kept / basis->kept().size();
      log::Info("coordinator", "round %llu: GradiVeQ bases %s fitted (%zu tensors)",
                static_cast<unsigned long long>(round), basis->word().c_str(),
                basis->tensors().size());
      if (absl::Status st = Use(std::move(basis)); !st.ok()) return st;
    }
  }
  absl::MutexLock lock(&mu_);
  report->figures["gradiveq_basis"] = basis_ ? static_cast<double>(basis_->version()) : 0.0;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> GradiveqBases::Blob(
    uint64_t version) const {
  absl::MutexLock lock(&mu_);
  if (!blob_ || blob_->version != version) {
    return absl::NotFoundError(StrCat("GradiVeQ basis ", version, " is not served (",
                                      blob_ ? StrCat("the basis in force is ", blob_->version)
                                            : std::string("none is fitted yet"),
                                      ")"));
  }
  return blob_;
}

absl::Status GradiveqBases::Save(uint64_t round) const {
  std::shared_ptr<const codecs::SliceBasis> basis;
  {
    absl::MutexLock lock(&mu_);
    basis = basis_;
  }
  return SaveGradiveqBasis(state_dir_, round, basis ? basis->bytes() : std::string());
}

absl::Status GradiveqBases::Load(uint64_t round) {
  auto basis = LoadGradiveqBasis(state_dir_, round);
  if (absl::IsNotFound(basis.status())) {
    log::Warning(
        "coordinator",
        "no GradiVeQ bases beside the checkpoint of round %llu: the next round fits new ones",
        static_cast<unsigned long long>(round));
    return absl::OkStatus();
  }
  if (!basis.ok()) return basis.status();
  if (basis->empty()) return absl::OkStatus();
  auto parsed = codecs::SliceBasis::Parse(*basis, layout_);
  if (!parsed.ok()) {
    return absl::DataLossError(
        StrCat(GradiveqBasisPath(state_dir_, round), ": ", std::string(parsed.status().message())));
  }
  return Use(std::make_shared<const codecs::SliceBasis>(*std::move(parsed)));
}

}  // namespace fedlgc::modes
