// LGC arithmetic at the coordinator (see lgc_aggregator.h).
#include "modes/lgc/lgc_aggregator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/crc32c.h"
#include "base/log.h"
#include "base/str.h"
#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "modes/lgc/lgc_codes.h"
#include "modes/lgc/lgc_payload.h"
#include "modes/lgc/lgc_state.h"

namespace fedlgc::modes {
namespace {

std::string StatePath(const std::string& dir, uint64_t round) {
  return core::RoundStatePath(dir, "lgc", round);
}

std::unique_ptr<codecs::DenseCodec> Dense(const std::string& spec) {
  auto c = codecs::MakeCodec(spec);
  if (!c.ok()) return nullptr;
  return std::unique_ptr<codecs::DenseCodec>(dynamic_cast<codecs::DenseCodec*>(c->release()));
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A rebuild that is not finite (a huge gain overflowed) does not count.
template <typename Item>
void DropNonFinite(std::vector<Item>* items) {
  std::erase_if(*items, [](const Item& it) {
    return !std::all_of(it.v.begin(), it.v.end(), [](float x) { return std::isfinite(x); });
  });
}

// A training round's rebuilds, normalised, for the trainer (Item: LgcAggregator::Item,
// private to it, as in DropNonFinite).
template <typename Item>
std::vector<autoencoder::Sample> TrainingSamples(const std::vector<Item>& items) {
  std::vector<autoencoder::Sample> samples;
  for (const Item& it : items) {
    std::vector<float> v = it.v;
    const float scale = lgc::RmsScale(v);
    for (float& x : v) x /= scale;
    // The decoder reads no innovation in stage 3, so none in training either.
    samples.push_back({it.client, std::move(v), std::vector<float>(it.v.size(), 0.0f)});
  }
  return samples;
}

}  // namespace

LgcAggregator::LgcAggregator(lgc::LgcPlan plan, uint64_t warmup, uint64_t dim,
                             std::string state_dir, autoencoder::AeOptions ae_options)
    : plan_(std::move(plan)),
      warmup_(warmup),
      dim_(dim),
      k_(plan_.SupportSize(dim)),
      state_dir_(std::move(state_dir)),
      ae_options_(std::move(ae_options)) {}

absl::StatusOr<std::unique_ptr<LgcAggregator>> LgcAggregator::Create(
    lgc::LgcPlan plan, uint64_t warmup, uint64_t dim, std::string state_dir,
    uint64_t committed_round, uint64_t seed, std::string device, int nice) {
  autoencoder::AeOptions ao;
  ao.optimizer = plan.ae_optimizer;
  ao.lr = plan.ae_lr;
  ao.seed = seed;
  ao.device = std::move(device);
  std::unique_ptr<LgcAggregator> d(
      new LgcAggregator(std::move(plan), warmup, dim, std::move(state_dir), ao));
  if (d->plan_.autoencoder()) {
    if (d->k_ < autoencoder::kMinLength) {
      return absl::InvalidArgumentError(StrCat("lgc: a support of ", d->k_,
                                               " values is below the autoencoder's minimum of ",
                                               autoencoder::kMinLength));
    }
    d->latent_codec_ = Dense(d->plan_.latent);
    if (!d->latent_codec_) return absl::InternalError("lgc: latent codec unavailable");
    auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(d->k_), d->ae_options_);
    if (!ae.ok()) return ae.status();
    d->latent_size_ = static_cast<size_t>((*ae)->latent_size());
    absl::MutexLock lock(&d->ae_mu_);
    d->ae_ = std::move(ae).value();
  }
  uint64_t ae_steps = 0;
  if (committed_round > 0) {
    if (absl::Status st = d->Load(committed_round, &ae_steps); !st.ok()) return st;
  }
  if (d->plan_.autoencoder()) {
    LgcAggregator* a = d.get();
    AeTrainer::Options to;
    to.steps_per_batch = a->plan_.ae_steps;
    to.nice = nice;
    to.first_step = ae_steps;
    // Each step under ae_mu_, so that nothing waits for more than one step.
    a->trainer_ = std::make_unique<AeTrainer>(
        to,
        [a](const std::vector<autoencoder::Sample>& batch, uint64_t step) {
          absl::MutexLock ae_lock(&a->ae_mu_);
          return a->ae_->TrainStep(batch, step);
        },
        [a] {
          absl::MutexLock ae_lock(&a->ae_mu_);
          return a->ae_->Serialize();
        });
    a->trainer_->TakeSnapshot();
    if (a->switch_round_ == 0) a->trainer_->Start();
  }
  return d;
}

LgcAggregator::~LgcAggregator() {
  if (trainer_) trainer_->Stop();
}

void LgcAggregator::AwaitTraining() const {
  if (trainer_) trainer_->Await();
}

bool LgcAggregator::TrainingDone() const { return !trainer_ || trainer_->State().idle(); }

absl::StatusOr<LgcStage> LgcAggregator::BeginRound(uint64_t round) {
  const LgcStage stage = Stage(round);
  if (stage != LgcStage::kCells || !plan_.autoencoder() ||
      round <= warmup_ + plan_.train_rounds) {
    return stage;
  }
  if (plan_.ae_wait) trainer_->Await();
  const AeTrainer::Progress progress = trainer_->State();
  if (!progress.status.ok()) return progress.status;
  if (!progress.idle()) return stage;  // still training: the cells again
  trainer_->Stop();
  trainer_->TakeSnapshot();
  switch_round_ = round;
  // Before any client hears of it: a coordinator killed from here on resumes with the
  // switch and these weights.
  if (absl::Status st = Save(round - 1); !st.ok()) {
    switch_round_ = 0;
    return st;
  }
  log::Info("coordinator", "LGC: the autoencoder codes from round %llu (%llu training steps)",
            static_cast<unsigned long long>(round),
            static_cast<unsigned long long>(trainer_->State().steps));
  return LgcStage::kAutoencoder;
}

absl::Status LgcAggregator::Validate(uint64_t round, std::string_view spec,
                                     std::span<const uint8_t> body) const {
  const LgcStage stage = Stage(round);
  if (stage == LgcStage::kCells && spec == lgc::kLeaderCellsSpec) {
    return lgc::UnpackLeaderCells(plan_, body, dim_, KAt(round)).status();
  }
  if (stage == LgcStage::kCells && spec == lgc::kBitCorrectionSpec) {
    auto c = lgc::UnpackBitCorrection(plan_, body, KAt(round));
    if (!c.ok()) return c.status();
    if (c->bits != plan_.bits) {
      return absl::InvalidArgumentError(
          StrCat("lgc: ", int(c->bits), "-bit corrections in a job of ", plan_.bits));
    }
    return absl::OkStatus();
  }
  if (stage == LgcStage::kAutoencoder && spec == lgc::kLeaderSpec) {
    auto p = lgc::DecodeLeader(body, dim_, *latent_codec_, latent_size_);
    if (!p.ok()) return p.status();
    if (p->support.size() != k_) {
      return absl::InvalidArgumentError(
          StrCat("lgc: a support of ", p->support.size(), " indices, expected ", k_));
    }
    return absl::OkStatus();
  }
  if (stage == LgcStage::kAutoencoder && spec == lgc::kCorrectionSpec) {
    return lgc::DecodeCorrection(body, k_).status();
  }
  return codecs::WrongCodecError(StrCat("a stage-", static_cast<uint32_t>(stage),
                                        " LGC round does not take \"", spec, "\" frames"));
}

// One client's payload, decoded.
struct LgcAggregator::Item {
  std::string client;
  double weight = 0;       // the client's weight in the round
  std::vector<float> v;    // stage 2: the leader's decoded values or a follower's
                           // correction; stage 3: the innovation
  float gain = 1.0f;       // a correction's gain
  uint32_t reference = 0;  // the leader payload it was made against
  uint32_t sent_crc = 0;   // the client's CRC32C of its rebuild (not the stage-2 leader's)
  bool correction = false;  // v holds a correction still to be rebuilt
};

// What a round's leader payloads give: each is a reference (its support and, in stage 3,
// its latent; in stage 2 its decoded values) that follower payloads name.
struct LgcAggregator::Decoded {
  std::vector<Item> items;
  std::map<uint32_t, Reference> refs;
  uint32_t main_ref = 0;  // the reference of the round's leader (or any leader)
  bool has_main = false;
  uint64_t k = 0;  // the round's support size
};

void LgcAggregator::DecodeLeaderPayload(LgcStage stage, const std::string& client,
                                        const PayloadCollector::Payload& p,
                                        const std::string& leader, Decoded* d) const {
  uint32_t ref = 0;
  if (stage == LgcStage::kCells) {
    auto lc = lgc::UnpackLeaderCells(plan_, Bytes(p.body), dim_, d->k);
    if (!lc.ok()) return;  // validated on arrival; cannot happen
    ref = lgc::ReferenceOf(lc->support, lc->values);
    d->refs[ref] = {lc->support, lc->values};
    d->items.push_back({client, p.weight, std::move(lc->values), 1.0f, ref});
  } else if (stage == LgcStage::kAutoencoder) {
    auto lp = lgc::DecodeLeader(Bytes(p.body), dim_, *latent_codec_, latent_size_);
    if (!lp.ok()) return;  // validated on arrival; cannot happen
    ref = lgc::ReferenceOf(lp->support, lp->latent);
    d->refs[ref] = {lp->support, lp->latent};
    d->items.push_back(
        {client, p.weight, std::move(lp->innovation), lp->scale, ref, lp->sent_crc, true});
  } else {
    return;  // a warm-up round has no leader payloads
  }
  // The round's leader (or, without its payload, any leader payload) is the main one.
  if (client == leader || !d->has_main) {
    d->main_ref = ref;
    d->has_main = true;
  }
}

void LgcAggregator::DecodeFollowerPayload(LgcStage stage, const std::string& client,
                                          const PayloadCollector::Payload& p, Decoded* d) const {
  if (stage == LgcStage::kCells) {
    auto c = lgc::UnpackBitCorrection(plan_, Bytes(p.body), d->k);
    if (c.ok()) {
      d->items.push_back({client, p.weight, std::move(c->correction), c->gain, c->reference,
                          c->sent_crc, true});
    }
  } else if (stage == LgcStage::kAutoencoder) {
    auto c = lgc::DecodeCorrection(Bytes(p.body), k_);
    if (c.ok()) {
      d->items.push_back({client, p.weight, std::move(c->innovation), c->gain, c->reference,
                          c->sent_crc, true});
    }
  }
}

LgcAggregator::Decoded LgcAggregator::DecodePayloads(
    uint64_t round, LgcStage stage, const std::string& leader,
    const std::map<std::string, PayloadCollector::Payload>& payloads,
    const std::set<std::string>* leaders) const {
  Decoded d;
  d.k = KAt(round);
  for (const auto& [client, p] : payloads) {
    if (lgc::IsLeaderSpec(p.spec)) {
      // Only the round's leaders (chosen or promoted) set a support for others; a leader
      // payload from anyone else does not count (it goes back to its sender).
      const bool may_lead = leaders ? leaders->count(client) > 0 : client == leader;
      if (may_lead) DecodeLeaderPayload(stage, client, p, leader, &d);
    } else {
      DecodeFollowerPayload(stage, client, p, &d);
    }
  }
  // A payload made against no leader payload of this round cannot be placed: not counted.
  std::erase_if(d.items, [&](const Item& it) { return !d.refs.count(it.reference); });
  return d;
}

absl::Status LgcAggregator::RebuildStage3(uint64_t round, Decoded* d, Outcome* out) {
  // Rebuild gain * D_i(latent, 0) + innovation with the latent the client named, on the
  // CPU as the client does (a CUDA convolution may round otherwise).
  autoencoder::Autoencoder& cpu = cpu_ae_ ? *cpu_ae_ : *ae_;
  const std::vector<float> zeros(k_, 0.0f);
  for (Item& it : d->items) {
    auto p = cpu.Decode(it.client, d->refs[it.reference].latent, zeros);
    if (!p.ok()) return p.status();
    it.v = lgc::Rebuild(it.gain, *p, it.v);
    CountMismatch(round, it, out);
  }
  // A huge gain can overflow: such an update is not counted.
  DropNonFinite(&d->items);
  return absl::OkStatus();
}

void LgcAggregator::CountMismatch(uint64_t round, const Item& it, Outcome* out) {
  if (lgc::SentCrc(it.v) == it.sent_crc) return;
  ++out->rebuild_mismatches;
  log::Warning("lgc",
               "round %llu: %s's rebuild differs from what it computed (counted; its error "
               "feedback is off by the difference)",
               static_cast<unsigned long long>(round), it.client);
}

void LgcAggregator::RebuildCorrections(uint64_t round, Decoded* d, Outcome* out) const {
  // gain * the leader's decoded values + the correction, as the client computed it.
  for (Item& it : d->items) {
    if (!it.correction) continue;
    it.v = lgc::Rebuild(it.gain, d->refs.at(it.reference).latent, it.v);
    CountMismatch(round, it, out);
  }
  DropNonFinite(&d->items);
}

absl::StatusOr<std::vector<float>> LgcAggregator::CombineValues(
    const Decoded& d, const coordinator::AggregatorOptions& robust,
    const std::set<std::string>& excluded, std::set<std::string>* counted) const {
  // Each client's values on its support: one group per support (one in all unless two
  // leader payloads came in the round), combined apart, then weighted by the group's
  // share of the round's weight.
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
    const std::vector<uint32_t>& support = d.refs.at(ref).support;
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

absl::StatusOr<LgcAggregator::Outcome> LgcAggregator::Aggregate(
    uint64_t round, const std::string& leader,
    const std::map<std::string, PayloadCollector::Payload>& payloads,
    const std::set<std::string>* leaders, const coordinator::AggregatorOptions& robust,
    const Chooser& choose) {
  const LgcStage stage = Stage(round);
  Outcome out;
  out.delta.assign(dim_, 0.0f);
  Decoded d = DecodePayloads(round, stage, leader, payloads, leaders);
  if (stage == LgcStage::kAutoencoder) {
    if (!d.has_main) return out;  // no latent: nothing decodes, every client keeps its update
    out.latent = true;
    absl::MutexLock ae_lock(&ae_mu_);
    if (absl::Status st = RebuildStage3(round, &d, &out); !st.ok()) return st;
  } else {
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
  if (stage != LgcStage::kCells || !d.has_main) return out;
  // Training sees the clients' values on one support, the round leader's, read by value:
  // in the order of the leader's decoded values.
  std::erase_if(d.items, [&](const Item& it) { return it.reference != d.main_ref; });
  const std::vector<uint32_t> order = lgc::ValueOrder(d.refs.at(d.main_ref).latent);
  for (Item& it : d.items) {
    std::vector<float> v(it.v.size());
    for (size_t j = 0; j < order.size(); ++j) v[j] = it.v[order[j]];
    it.v = std::move(v);
  }
  if (d.items.size() >= 2) {
    out.values_cosine = ValuesCosine(d.items);
    // The autoencoder reads supports of the plan's k (not the ramp's wider ones).
    // (No switch falls within the training rounds.)
    if (lgc::TrainsAutoencoder(plan_, round, warmup_) && d.items.front().v.size() == k_) {
      trainer_->Enqueue(round, TrainingSamples(d.items));
    }
  }
  // Until the switch, every round says where the training stands.
  if (plan_.autoencoder() && switch_round_ == 0) {
    const AeTrainer::Progress p = trainer_->State();
    if (!p.status.ok()) return p.status;
    out.ae_reconstruction = p.reconstruction;
    out.ae_similarity = p.similarity;
    out.ae_trained_round = p.trained_round;
    out.ae_backlog = p.backlog;
  }
  return out;
}

void LgcAggregator::Freeze() {
  absl::MutexLock lock(&ae_mu_);
  if (frozen_ || !ae_) return;
  frozen_ = true;
  // Clients rebuild their predictions with their decoders on the CPU; so does the
  // coordinator.
  autoencoder::AeOptions cpu = ae_options_;
  cpu.device = "cpu";
  auto copy = autoencoder::Autoencoder::Deserialize(ae_->Serialize(), cpu);
  if (copy.ok()) cpu_ae_ = std::move(copy).value();
}

std::shared_ptr<const ModelBlob> LgcAggregator::Decoder(const std::string& client) {
  if (!frozen_) return nullptr;
  absl::MutexLock lock(&ae_mu_);
  auto& blob = decoders_[client];
  if (!blob) {
    blob = coordinator::MakeBlob(kEncoderVersion, ae_->SerializeDecoder(client));
  }
  return blob;
}

std::string LgcAggregator::EncoderBytes() const {
  absl::MutexLock lock(&ae_mu_);
  return ae_ ? ae_->SerializeEncoder() : std::string();
}

absl::StatusOr<LgcAggregator::LeaderBytes> LgcAggregator::LeaderPayloadBytes(
    uint64_t round, std::span<const uint8_t> leader_body) const {
  const LgcStage stage = Stage(round);
  if (stage == LgcStage::kWarmUp)
    return codecs::WrongCodecError("a warm-up round has no leader payload");
  if (stage == LgcStage::kCells) {
    auto lc = lgc::UnpackLeaderCells(plan_, leader_body, dim_, KAt(round));
    if (!lc.ok()) return lc.status();
    return LeaderBytes{"", "", std::string(leader_body.begin(), leader_body.end())};
  }
  auto lp = lgc::DecodeLeader(leader_body, dim_, *latent_codec_, latent_size_);
  if (!lp.ok()) return lp.status();
  return LeaderBytes{lgc::SupportToBytes(lp->support), core::FloatsToBytes(lp->latent), ""};
}

absl::Status LgcAggregator::Save(uint64_t round) const {
  LgcState state;
  if (trainer_) {
    AeTrainer::Snapshot snapshot = trainer_->LastSnapshot();
    state.ae_steps = snapshot.steps;
    state.autoencoder = std::move(snapshot.weights);
  }
  state.led = led_;
  state.switch_round = switch_round_;
  return SaveLgcState(state_dir_, round, state);
}

absl::Status LgcAggregator::Load(uint64_t round, uint64_t* ae_steps) {
  auto loaded = LoadLgcState(state_dir_, round);
  if (!loaded.ok()) return loaded.status();
  *ae_steps = loaded->ae_steps;
  led_ = std::move(loaded->led);
  if (!plan_.autoencoder()) return absl::OkStatus();
  if (loaded->switch_round != 0 && loaded->switch_round <= warmup_ + plan_.train_rounds) {
    return absl::DataLossError(StrCat(StatePath(state_dir_, round), ": stage 3 from round ",
                                      loaded->switch_round, ", within the training rounds"));
  }
  switch_round_ = loaded->switch_round;
  if (loaded->autoencoder.empty()) {
    return absl::DataLossError(
        StrCat(StatePath(state_dir_, round),
               ": no autoencoder in the state of a job with one (train > 0)"));
  }
  auto restored = autoencoder::Autoencoder::Deserialize(loaded->autoencoder, ae_options_);
  if (!restored.ok()) return restored.status();
  absl::MutexLock ae_lock(&ae_mu_);
  ae_ = std::move(restored).value();
  decoders_.clear();
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
