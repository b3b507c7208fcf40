// LGC arithmetic at the coordinator (see lgc_aggregator.h).
#include "modes/lgc/lgc_aggregator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "autoencoder/lgc_codes.h"
#include "autoencoder/lgc_payload.h"
#include "codecs/crc32c.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/atomic_file.h"
#include "core/float_bytes.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x53474C46;  // "FLGS"
constexpr uint32_t kVersion = 2;         // 2 adds the echoes; 1 still loads
constexpr uint64_t kEchoRounds = 16;     // how many rounds an echo is kept

std::string StatePath(const std::string& dir, uint64_t round) {
  return core::RoundStatePath(dir, "lgc", round);
}

std::unique_ptr<codecs::DenseCodec> Dense(const std::string& spec) {
  auto c = codecs::MakeCodec(spec);
  if (!c.ok()) return nullptr;
  return std::unique_ptr<codecs::DenseCodec>(dynamic_cast<codecs::DenseCodec*>(c->release()));
}

absl::StatusOr<std::vector<float>> Floats(std::span<const uint8_t> body, uint64_t n) {
  if (body.size() != n * 4) {
    return absl::InvalidArgumentError(
        StrCat("lgc values: ", body.size(), " bytes for ", n, " values"));
  }
  std::vector<float> v(n);
  std::memcpy(v.data(), body.data(), body.size());
  for (float x : v) {
    if (!std::isfinite(x)) return codecs::NonFiniteError("lgc values: not finite");
  }
  return v;
}

// A rebuild that is not finite (a huge gain or scale overflowed) does not count.
template <typename Item>
void DropNonFinite(std::vector<Item>* items) {
  std::erase_if(*items, [](const Item& it) {
    return !std::all_of(it.v.begin(), it.v.end(), [](float x) { return std::isfinite(x); });
  });
}

}  // namespace

LgcAggregator::LgcAggregator(autoencoder::LgcPlan plan, uint64_t warmup, uint64_t dim,
                             std::string state_dir, autoencoder::AeOptions ae_options)
    : plan_(std::move(plan)),
      warmup_(warmup),
      dim_(dim),
      k_(plan_.SupportSize(dim)),
      k_inn_(plan_.InnovationSize(k_)),
      state_dir_(std::move(state_dir)),
      ae_options_(std::move(ae_options)) {}

absl::StatusOr<std::unique_ptr<LgcAggregator>> LgcAggregator::Create(
    autoencoder::LgcPlan plan, uint64_t warmup, uint64_t dim, std::string state_dir,
    uint64_t committed_round, uint64_t seed, std::string device) {
  if (warmup == 0 && !plan.predict) {
    return absl::InvalidArgumentError(
        "lgc with predict=0 needs at least one --codec-warmup round (its aggregate gives the "
        "first support)");
  }
  autoencoder::AeOptions ao;
  ao.optimizer = plan.ae_optimizer;
  ao.lr = plan.ae_lr;
  ao.seed = seed;
  ao.device = std::move(device);
  std::unique_ptr<LgcAggregator> d(
      new LgcAggregator(std::move(plan), warmup, dim, std::move(state_dir), ao));
  if (d->k_ < autoencoder::kMinLength) {
    return absl::InvalidArgumentError(StrCat("lgc: a support of ", d->k_,
                                             " values is below the autoencoder's minimum of ",
                                             autoencoder::kMinLength));
  }
  d->latent_codec_ = Dense(d->plan_.latent);
  d->fp32_ = Dense("fp32");
  if (!d->latent_codec_ || !d->fp32_) return absl::InternalError("lgc: codecs unavailable");
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(d->k_), d->ae_options_);
  if (!ae.ok()) return ae.status();
  d->latent_size_ = static_cast<size_t>((*ae)->latent_size());
  {
    absl::MutexLock lock(&d->ae_mu_);
    d->ae_ = std::move(ae).value();
  }
  if (committed_round > 0) {
    if (absl::Status st = d->Load(committed_round); !st.ok()) return st;
  }
  return d;
}

std::string LgcAggregator::SupportBytes() const { return autoencoder::SupportToBytes(support_); }

absl::Status LgcAggregator::Validate(uint64_t round, std::string_view spec,
                                     std::span<const uint8_t> body) const {
  const int stage = Stage(round);
  if (stage == 2 && plan_.cells) {
    if (spec == autoencoder::kLeaderCellsSpec) {
      return autoencoder::DecodeLeaderCells(body, dim_, KAt(round)).status();
    }
    if (spec == autoencoder::kBitCorrectionSpec) {
      auto c = autoencoder::DecodeBitCorrection(body, KAt(round));
      if (!c.ok()) return c.status();
      if (c->bits != plan_.bits) {
        return absl::InvalidArgumentError(StrCat("lgc: ", int(c->bits),
                                                 "-bit corrections in a job of ", plan_.bits));
      }
      return absl::OkStatus();
    }
    return codecs::WrongCodecError(
        StrCat("a stage-2 LGC round with code=cells does not take \"", spec, "\" frames"));
  }
  if (spec == autoencoder::kLeaderSpec) {
    const size_t latent = stage == 2 ? k_ : latent_size_;
    const codecs::DenseCodec& codec = stage == 2 ? *fp32_ : *latent_codec_;
    auto p = autoencoder::DecodeLeader(body, dim_, codec, latent, stage == 3 && plan_.predict);
    if (!p.ok()) return p.status();
    if (p->support.size() != k_) {
      return absl::InvalidArgumentError(
          StrCat("lgc: next support of ", p->support.size(), " indices, expected ", k_));
    }
    return absl::OkStatus();
  }
  if (stage == 2 && spec == autoencoder::kValuesSpec) {
    return plan_.predict ? autoencoder::DecodeReferencedValues(body, k_).status()
                         : Floats(body, k_).status();
  }
  if (stage == 3 && !plan_.predict && spec == autoencoder::kInnovationSpec) {
    return autoencoder::DecodeInnovation(body, k_).status();
  }
  if (stage == 3 && plan_.predict && spec == autoencoder::kCorrectionSpec) {
    return autoencoder::DecodeCorrection(body, k_).status();
  }
  return codecs::WrongCodecError(
      StrCat("a stage-", stage, " LGC round does not take \"", spec, "\" frames"));
}

// One client's payload of a stage-2 or stage-3 round, decoded.
struct LgcAggregator::Item {
  std::string client;
  double weight = 0;  // the client's weight in the round
  std::vector<float> v;    // values (stage 2) or innovation (stage 3)
  float scale = 1.0f;      // stage 3: the client's RMS of its values, or its gain
  uint32_t reference = 0;  // predict=1: the leader payload it was made against
  uint32_t sent_crc = 0;   // predict=1, stage 3: the client's CRC32C of the rebuild
  // code=cells, stage 2: a follower's correction (v holds it) still to be rebuilt.
  bool correction = false;
};

// What a round's leader payloads give: with predict=1 each is a reference (its support and
// latent) that follower payloads name; without, the round has one support (support_).
struct LgcAggregator::Decoded {
  std::vector<Item> items;
  std::map<uint32_t, Reference> refs;
  uint32_t main_ref = 0;  // predict=1: the reference of the round's leader (or any leader)
  std::vector<float> latent;
  std::vector<uint32_t> next_support;
  uint64_t k = 0;  // the round's support size
};

void LgcAggregator::DecodeLeaderPayload(int stage, const std::string& client,
                                        const PayloadCollector::Payload& p,
                                        const std::string& leader, Decoded* d) const {
  const bool predict = plan_.predict;
  const auto body =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.body.data()), p.body.size());
  if (stage == 2 && plan_.cells) {
    auto lc = autoencoder::DecodeLeaderCells(body, dim_, d->k);
    if (!lc.ok()) return;  // validated on arrival; cannot happen
    const uint32_t ref = autoencoder::ReferenceOf(lc->support, lc->values);
    d->refs[ref] = {lc->support, lc->values};
    d->items.push_back({client, p.weight, lc->values, 1.0f, ref});
    if (client == leader || d->next_support.empty()) {
      d->next_support = std::move(lc->support);
      d->main_ref = ref;
    }
    return;
  }
  const size_t n = stage == 2 ? k_ : latent_size_;
  auto lp = autoencoder::DecodeLeader(body, dim_, stage == 2 ? *fp32_ : *latent_codec_, n,
                                      stage == 3 && predict);
  if (!lp.ok()) return;  // validated on arrival; cannot happen
  uint32_t ref = 0;
  if (predict) {
    ref = autoencoder::ReferenceOf(lp->support, stage == 3 ? lp->latent : std::vector<float>());
    d->refs[ref] = {lp->support, stage == 3 ? lp->latent : std::vector<float>()};
  }
  if (stage == 2) {
    d->items.push_back({client, p.weight, std::move(lp->latent), 1.0f, ref});
  } else {
    d->items.push_back(
        {client, p.weight, std::move(lp->innovation), lp->scale, ref, lp->sent_crc});
  }
  // The round's leader (or, without its payload, any leader payload) gives the latent and
  // the next support.
  if (client == leader || d->next_support.empty()) {
    d->next_support = std::move(lp->support);
    d->main_ref = ref;
    if (stage == 3) d->latent = std::move(lp->latent);
  }
}

void LgcAggregator::DecodeFollowerPayload(int stage, const std::string& client,
                                          const PayloadCollector::Payload& p, Decoded* d) const {
  const auto body =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.body.data()), p.body.size());
  if (stage == 2 && plan_.cells) {
    auto c = autoencoder::DecodeBitCorrection(body, d->k);
    if (c.ok()) {
      d->items.push_back({client, p.weight, std::move(c->correction), c->gain, c->reference,
                          c->sent_crc, true});
    }
  } else if (stage == 2 && plan_.predict) {
    auto v = autoencoder::DecodeReferencedValues(body, k_);
    if (v.ok())
      d->items.push_back({client, p.weight, std::move(v->values), 1.0f, v->reference});
  } else if (stage == 2) {
    auto v = Floats(body, k_);
    if (v.ok()) d->items.push_back({client, p.weight, std::move(v).value()});
  } else if (plan_.predict) {
    auto c = autoencoder::DecodeCorrection(body, k_);
    if (c.ok()) {
      d->items.push_back(
          {client, p.weight, std::move(c->innovation), c->gain, c->reference, c->sent_crc});
    }
  } else {
    auto inn = autoencoder::DecodeInnovation(body, k_);
    if (inn.ok()) {
      d->items.push_back({client, p.weight, std::move(inn->innovation), inn->scale});
    }
  }
}

LgcAggregator::Decoded LgcAggregator::DecodePayloads(
    uint64_t round, int stage, const std::string& leader,
    const std::map<std::string, PayloadCollector::Payload>& payloads,
    const std::set<std::string>* leaders) const {
  Decoded d;
  d.k = KAt(round);
  for (const auto& [client, p] : payloads) {
    if (autoencoder::IsLeaderSpec(p.spec)) {
      // predict=1: only the round's leaders (chosen or promoted) set a support for others;
      // a leader payload from anyone else does not count (it goes back to its sender).
      const bool may_lead = leaders ? leaders->count(client) > 0 : client == leader;
      if (plan_.predict && !may_lead) continue;
      DecodeLeaderPayload(stage, client, p, leader, &d);
    } else {
      DecodeFollowerPayload(stage, client, p, &d);
    }
  }
  // A payload made against no leader payload of this round cannot be placed: not counted.
  if (plan_.predict) {
    std::erase_if(d.items, [&](const Item& it) { return !d.refs.count(it.reference); });
  }
  return d;
}

absl::Status LgcAggregator::RebuildStage3(uint64_t round, Decoded* d, Outcome* out) {
  if (plan_.predict) {
    // Rebuild gain * D_i(latent, 0) + innovation with the latent the client named, on the
    // CPU as the client does (a CUDA convolution may round otherwise).
    autoencoder::Autoencoder& cpu = cpu_ae_ ? *cpu_ae_ : *ae_;
    const std::vector<float> zeros(k_, 0.0f);
    for (Item& it : d->items) {
      auto p = cpu.Decode(it.client, d->refs[it.reference].latent, zeros);
      if (!p.ok()) return p.status();
      it.v = autoencoder::Rebuild(it.scale, *p, it.v);
      CountMismatch(round, it, out);
    }
  } else {
    // The autoencoder works on values divided by their RMS: the decoder gets the client's
    // innovation at that scale and its output is scaled back.
    for (Item& it : d->items) {
      for (float& x : it.v) x /= it.scale;
      auto v = ae_->Decode(it.client, d->latent, it.v);
      if (!v.ok()) return v.status();
      it.v = std::move(v).value();
      for (float& x : it.v) x *= it.scale;
    }
  }
  // A huge gain or scale can overflow: such an update is not counted.
  DropNonFinite(&d->items);
  if (plan_.echo) KeepEchoes(round, d->items);
  return absl::OkStatus();
}

void LgcAggregator::CountMismatch(uint64_t round, const Item& it, Outcome* out) {
  if (autoencoder::SentCrc(it.v) == it.sent_crc) return;
  ++out->rebuild_mismatches;
  std::fprintf(stderr,
               "lgc: round %llu: %s's rebuild differs from what it computed (counted; its error "
               "feedback is off by the difference)\n",
               static_cast<unsigned long long>(round), it.client.c_str());
}

void LgcAggregator::RebuildCorrections(uint64_t round, Decoded* d, Outcome* out) const {
  // gain * the leader's decoded values + the correction, as the client computed it.
  for (Item& it : d->items) {
    if (!it.correction) continue;
    it.v = autoencoder::Rebuild(it.scale, d->refs.at(it.reference).latent, it.v);
    CountMismatch(round, it, out);
  }
  DropNonFinite(&d->items);
}

void LgcAggregator::KeepEchoes(uint64_t round, const std::vector<Item>& items) {
  absl::MutexLock lock(&echo_mu_);
  for (const Item& it : items) {
    echoes_[it.client] = coordinator::MakeBlob(round, core::FloatsToBytes(it.v));
  }
  // A client away for long has no use for its old echo.
  std::erase_if(echoes_, [&](const auto& e) { return e.second->version + kEchoRounds < round; });
}

absl::StatusOr<std::vector<float>> LgcAggregator::CombineValues(
    const Decoded& d, const coordinator::AggregatorOptions& robust,
    const std::set<std::string>& excluded, std::set<std::string>* counted) const {
  // Each client's values on its support: one group per support (one in all unless
  // predict=1 had two leader payloads in the round), combined apart, then weighted by the
  // group's share of the round's weight.
  std::vector<coordinator::Contribution> all;
  const uint64_t k = d.items.empty() ? k_ : d.items.front().v.size();  // the round's k
  const std::vector<coordinator::Range> whole = {{0, k}};
  std::map<uint32_t, std::vector<coordinator::Contribution>> groups;
  std::map<uint32_t, double> group_weight;
  double total = 0;
  for (const Item& it : d.items) {
    if (excluded.count(it.client)) continue;
    coordinator::Contribution c{it.client, it.weight, it.v, whole, true};
    all.push_back(c);
    groups[it.reference].push_back(c);
    group_weight[it.reference] += it.weight;
    total += it.weight;
  }
  std::vector<float> delta(dim_, 0.0f);
  if (!(total > 0)) return delta;
  const coordinator::Clipping clipping = coordinator::ClipByMedian(all, robust.clip);
  for (const auto& [ref, members] : groups) {
    auto agg = coordinator::AggregateUpdates(robust, members, clipping, k);
    if (!agg.ok()) return agg.status();
    const std::vector<uint32_t>& support = plan_.predict ? d.refs.at(ref).support : support_;
    const double share = group_weight[ref] / total;
    for (uint64_t j = 0; j < k; ++j) {
      delta[support[j]] += static_cast<float>(share * agg->values[j]);
    }
    counted->insert(agg->considered.begin(), agg->considered.end());
  }
  return delta;
}

double LgcAggregator::ValuesCosine(const std::vector<Item>& items) const {
  std::vector<double> norm(items.size(), 0.0);
  for (size_t a = 0; a < items.size(); ++a) {
    for (float x : items[a].v) norm[a] += double(x) * x;
    norm[a] = std::sqrt(norm[a]);
  }
  double cos_sum = 0;
  size_t pairs = 0;
  for (size_t a = 0; a < items.size(); ++a) {
    for (size_t b = a + 1; b < items.size(); ++b) {
      if (norm[a] == 0 || norm[b] == 0) continue;
      double ab = 0;
      for (size_t j = 0; j < items[a].v.size(); ++j) ab += double(items[a].v[j]) * items[b].v[j];
      cos_sum += ab / (norm[a] * norm[b]);
      ++pairs;
    }
  }
  return pairs > 0 ? cos_sum / static_cast<double>(pairs) : -2;
}

absl::Status LgcAggregator::Train(const std::vector<Item>& items, Outcome* out) {
  std::vector<autoencoder::Sample> batch;
  for (const Item& it : items) {
    std::vector<float> v = it.v;
    const float scale = autoencoder::RmsScale(v);
    for (float& x : v) x /= scale;
    // predict=1: the decoder reads no innovation in stage 3, so none in training either.
    std::vector<float> inn = plan_.predict ? std::vector<float>(v.size(), 0.0f)
                                           : autoencoder::InnovationOfValues(v, k_inn_);
    batch.push_back({it.client, std::move(v), std::move(inn)});
  }
  replay_.push_front(std::move(batch));
  if (replay_.size() > 8) replay_.pop_back();
  for (uint32_t s = 0; s < plan_.ae_steps; ++s) {
    auto losses = ae_->TrainStep(replay_[s % replay_.size()], ae_steps_++);
    if (!losses.ok()) return losses.status();
    if (s == 0) {  // the losses on this round's batch before training on it
      out->ae_reconstruction = losses->reconstruction;
      out->ae_similarity = losses->similarity;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LgcAggregator::Outcome> LgcAggregator::Aggregate(
    uint64_t round, const std::string& leader,
    const std::map<std::string, PayloadCollector::Payload>& payloads,
    const std::set<std::string>* leaders, const coordinator::AggregatorOptions& robust,
    const Chooser& choose) {
  const int stage = Stage(round);
  Outcome out;
  out.delta.assign(dim_, 0.0f);
  absl::MutexLock ae_lock(&ae_mu_);
  Decoded d = DecodePayloads(round, stage, leader, payloads, leaders);
  if (stage == 3) {
    if (d.latent.empty()) return out;  // no latent: nothing decodes, every client keeps its update
    out.latent = true;
    if (absl::Status st = RebuildStage3(round, &d, &out); !st.ok()) return st;
  } else if (plan_.cells) {
    RebuildCorrections(round, &d, &out);
  }
  std::vector<coordinator::Contribution> items;
  for (const Item& it : d.items) items.push_back({it.client, it.weight, it.v, {}, true});
  const coordinator::Clipping clipping = coordinator::ClipByMedian(items, robust.clip);
  out.norms = clipping.norms;
  out.clip_bound = clipping.bound;
  out.clipped = clipping.clipped;
  if (choose) {
    auto excluded = choose(out.norms, [&](const std::set<std::string>& ex,
                                          std::set<std::string>* counted) {
      return CombineValues(d, robust, ex, counted);
    });
    if (!excluded.ok()) return excluded.status();
    out.excluded = *std::move(excluded);
    std::erase_if(d.items, [&](const Item& it) { return out.excluded.count(it.client) > 0; });
  }
  auto delta = CombineValues(d, robust, {}, &out.counted);
  if (!delta.ok()) return delta.status();
  out.delta = *std::move(delta);
  // Training sees the clients' values on one support: the round leader's.
  if (plan_.predict) {
    std::erase_if(d.items, [&](const Item& it) { return it.reference != d.main_ref; });
  }
  if (stage == 2 && plan_.cells && d.refs.count(d.main_ref)) {
    // The autoencoder reads the support by value: the order of the leader's decoded values.
    const std::vector<uint32_t> order = autoencoder::ValueOrder(d.refs.at(d.main_ref).latent);
    for (Item& it : d.items) {
      std::vector<float> v(it.v.size());
      for (size_t j = 0; j < order.size(); ++j) v[j] = it.v[order[j]];
      it.v = std::move(v);
    }
  }
  if (stage == 2 && d.items.size() >= 2) {
    out.values_cosine = ValuesCosine(d.items);
    // The autoencoder reads supports of the plan's k (not the ramp's wider ones).
    if (d.items.front().v.size() == k_) {
      if (absl::Status st = Train(d.items, &out); !st.ok()) return st;
    }
  }
  if (d.next_support.size() == k_) support_ = std::move(d.next_support);
  return out;
}

std::shared_ptr<const ModelBlob> LgcAggregator::Echo(const std::string& client,
                                                     uint64_t round) const {
  absl::MutexLock lock(&echo_mu_);
  auto it = echoes_.find(client);
  if (it == echoes_.end() || it->second->version != round) return nullptr;
  return it->second;
}

void LgcAggregator::Freeze() {
  absl::MutexLock lock(&ae_mu_);
  if (frozen_) return;
  frozen_ = true;
  if (!plan_.predict) return;
  // predict=1 rebuilds what clients computed with their decoders on the CPU.
  autoencoder::AeOptions cpu = ae_options_;
  cpu.device = "cpu";
  auto copy = autoencoder::Autoencoder::Deserialize(ae_->Serialize(), cpu);
  if (copy.ok()) cpu_ae_ = std::move(copy).value();
}

std::shared_ptr<const ModelBlob> LgcAggregator::Decoder(const std::string& client) {
  if (!plan_.predict || !frozen_) return nullptr;
  absl::MutexLock lock(&ae_mu_);
  auto& blob = decoders_[client];
  if (!blob) {
    blob = coordinator::MakeBlob(kEncoderVersion, ae_->SerializeDecoder(client));
  }
  return blob;
}

std::string LgcAggregator::EncoderBytes() const {
  absl::MutexLock lock(&ae_mu_);
  return ae_->SerializeEncoder();
}

absl::StatusOr<LgcAggregator::LeaderBytes> LgcAggregator::LeaderPayloadBytes(
    uint64_t round, std::span<const uint8_t> leader_body) const {
  const bool stage3 = Stage(round) == 3;
  if (!stage3 && plan_.cells) {
    auto lc = autoencoder::DecodeLeaderCells(leader_body, dim_, KAt(round));
    if (!lc.ok()) return lc.status();
    return LeaderBytes{"", "", std::string(leader_body.begin(), leader_body.end())};
  }
  auto lp = autoencoder::DecodeLeader(leader_body, dim_, stage3 ? *latent_codec_ : *fp32_,
                                      stage3 ? latent_size_ : k_, stage3 && plan_.predict);
  if (!lp.ok()) return lp.status();
  LeaderBytes out;
  out.support = autoencoder::SupportToBytes(lp->support);
  if (stage3) out.latent = core::FloatsToBytes(lp->latent);
  return out;
}

void LgcAggregator::ObservePlainRound(std::span<const float> before, std::span<const float> after) {
  std::vector<float> change(dim_);
  for (uint64_t i = 0; i < dim_; ++i) change[i] = after[i] - before[i];
  support_ = autoencoder::SelectSupport(change, k_);
}

absl::Status LgcAggregator::Save(uint64_t round) const {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, round);
  w.U64(ae_steps_);
  w.Str(SupportBytes());
  {
    absl::MutexLock ae_lock(&ae_mu_);
    w.Str(ae_->Serialize());
  }
  absl::MutexLock lock(&echo_mu_);
  w.U32(static_cast<uint32_t>(echoes_.size()));
  for (const auto& [client, blob] : echoes_) {
    w.Str(client);
    w.U64(blob->version);
    w.Str(blob->bytes);
  }
  return core::SaveRoundState(state_dir_, "lgc", round, w.Finish());
}

absl::Status LgcAggregator::Load(uint64_t round) {
  const std::string path = StatePath(state_dir_, round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir_, "lgc", round, kMagic, kVersion, &bytes);
  bool echoes = true;
  if (!reader.ok()) {  // a version 1 state: the same without echoes
    auto v1 = core::ReadRoundState(state_dir_, "lgc", round, kMagic, 1, &bytes);
    if (!v1.ok()) return reader.status();
    reader = std::move(v1);
    echoes = false;
  }
  core::StateReader& r = *reader;
  std::string support, ae;
  if (!r.U64(&ae_steps_) || !r.Str(&support, 64u << 20) || !r.Str(&ae, 1u << 30) ||
      (support.size() != k_ * 4 && !(plan_.predict && support.empty()))) {
    return absl::DataLossError(StrCat(path, ": malformed LGC state"));
  }
  // predict=1 without warm-up rounds: no support before the first leader payload.
  auto restored_support = autoencoder::SupportFromBytes(support, support.empty() ? 0 : k_, dim_);
  if (!restored_support.ok()) {
    return absl::DataLossError(
        StrCat(path, ": ", std::string(restored_support.status().message())));
  }
  support_ = *std::move(restored_support);
  uint32_t n = 0;
  if (echoes && !r.U32(&n)) return absl::DataLossError(StrCat(path, ": malformed LGC echoes"));
  std::map<std::string, std::shared_ptr<const ModelBlob>> kept;
  for (uint32_t i = 0; i < n; ++i) {
    std::string client, values;
    uint64_t version = 0;
    if (!r.Str(&client) || !r.U64(&version) || !r.Str(&values, 64u << 20) ||
        values.size() != k_ * 4 || version > round) {
      return absl::DataLossError(StrCat(path, ": malformed LGC echoes"));
    }
    if (plan_.echo) kept[client] = coordinator::MakeBlob(version, std::move(values));
  }
  if (!r.done()) return absl::DataLossError(StrCat(path, ": malformed LGC state"));
  auto restored = autoencoder::Autoencoder::Deserialize(ae, ae_options_);
  if (!restored.ok()) return restored.status();
  // One lock at a time, in the order Aggregate takes them (ae_mu_, then echo_mu_).
  {
    absl::MutexLock ae_lock(&ae_mu_);
    ae_ = std::move(restored).value();
    decoders_.clear();
  }
  absl::MutexLock lock(&echo_mu_);
  echoes_ = std::move(kept);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
