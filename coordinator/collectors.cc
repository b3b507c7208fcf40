// Collection strategies (see collectors.h).
#include "coordinator/collectors.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/str.h"
#include "core/mixing.h"

namespace fedlgc::coordinator {

namespace {

// The chunk's frame, checked against the round: the round's codec, the model's dimension.
absl::StatusOr<codecs::FrameView> ParseCodecChunk(const ChunkIn& c, const RoundFacts& round) {
  if (round.decoder == nullptr) {
    return codecs::WrongCodecError("this round's codec has no decoder here");
  }
  auto view = codecs::ParseFrame(c.frame, round.frame_limits);
  if (!view.ok()) return view.status();
  const codecs::Codec& decoder = *round.decoder;
  if (view->spec != decoder.wire_spec()) {
    return codecs::WrongCodecError(StrCat("chunk encoded with \"", view->spec,
                                          "\"; this round uses \"", decoder.wire_spec(), "\""));
  }
  if (view->dim != round.dim) {
    return absl::OutOfRangeError(
        StrCat("chunk is for ", view->dim, " coordinates; the model has ", round.dim));
  }
  return view;
}

// Scales the values of `d` by the chunk's scale; what reaches the aggregate is checked
// after every scale: a finite value times a scale can overflow.
absl::Status ScaleChecked(const ChunkIn& c, DecodedChunk* d, std::string_view what) {
  if (c.scale != 1.0f) core::ScaleInPlace(d->values, c.scale);
  for (size_t i = 0; i < d->values.size(); ++i) {
    if (!std::isfinite(d->values[i])) {
      return codecs::NonFiniteError(StrCat(what, " ", i, " of the chunk is not finite after ",
                                           "the chunk's scale ", c.scale));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecodedChunk> DecodeCodecChunk(const ChunkIn& c, const RoundFacts& round) {
  auto view = ParseCodecChunk(c, round);
  if (!view.ok()) return view.status();
  DecodedChunk d;
  d.begin = view->begin;
  d.coordinates = view->length;
  d.values.resize(view->length);
  if (absl::Status st = round.decoder->Decode(*view, d.values); !st.ok()) return st;
  if (absl::Status st = ScaleChecked(c, &d, "coordinate"); !st.ok()) return st;
  return d;
}

absl::StatusOr<DecodedChunk> ReadCodeChunk(const ChunkIn& c, const RoundFacts& round,
                                           const codecs::LinearCode& code) {
  auto view = ParseCodecChunk(c, round);
  if (!view.ok()) return view.status();
  DecodedChunk d;
  d.begin = view->begin;
  d.coordinates = view->length;
  auto at = code.ReadCode(*view, &d.values);
  if (!at.ok()) return at.status();
  d.code_begin = *at;
  if (absl::Status st = ScaleChecked(c, &d, "code value"); !st.ok()) return st;
  return d;
}

// ---- WeightedSumCollector ----

WeightedSumCollector::WeightedSumCollector(uint64_t dim, double clip_bound,
                                           const codecs::LinearCode* code)
    : clip_bound_(clip_bound),
      code_(code),
      dim_(dim),
      sum_(code ? code->code_size() : dim, 0.0),
      weight_(sum_.size(), 0.0f) {}

absl::StatusOr<DecodedChunk> WeightedSumCollector::Decode(const ChunkIn& chunk,
                                                          const RoundFacts& round) const {
  if (code_ != nullptr) return ReadCodeChunk(chunk, round, *code_);
  return DecodeCodecChunk(chunk, round);
}

void WeightedSumCollector::Collect(const ChunkIn& chunk, DecodedChunk d, bool, bool,
                                   const RoundFacts&) {
  double sq = 0;
  for (float x : d.values) sq += double(x) * x;
  absl::MutexLock lock(&mu_);
  sent_sq_[chunk.client_id] += sq;
  double factor = 1;
  if (clip_bound_ > 0) {
    // What is left of the update's budget B^2 after its earlier chunks.
    double& counted = counted_sq_[chunk.client_id];
    const double left = std::max(0.0, clip_bound_ * clip_bound_ - counted);
    if (sq > left) {
      factor = std::sqrt(left / sq);
      clipped_.insert(chunk.client_id);
    }
    counted += sq * factor * factor;
  }
  const double w = chunk.weight * factor;
  const uint64_t at = code_ ? d.code_begin : d.begin;
  if (at + d.values.size() > sum_.size()) return;  // the decoder checked it; never here
  double* sum = sum_.data() + at;
  float* weight = weight_.data() + at;
  for (size_t i = 0; i < d.values.size(); ++i) {
    sum[i] += w * d.values[i];
    weight[i] += static_cast<float>(chunk.weight);
  }
}

std::map<std::string, double> WeightedSumCollector::Norms() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, double> norms;
  for (const auto& [client, sq] : sent_sq_) norms[client] = std::sqrt(sq);
  return norms;
}

int WeightedSumCollector::clipped() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(clipped_.size());
}

absl::StatusOr<std::vector<float>> WeightedSumCollector::Mean() const {
  absl::MutexLock lock(&mu_);
  std::vector<float> mean(sum_.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    mean[i] = weight_[i] > 0 ? static_cast<float>(sum_[i] / weight_[i]) : 0.0f;
  }
  if (code_ == nullptr) return mean;
  // One decode of the mean code: the mean of the decodes, the code being linear.
  std::vector<float> decoded(dim_);
  if (absl::Status st = code_->DecodeCode(mean, decoded); !st.ok()) return st;
  return decoded;
}

// ---- PerClientCollector ----

absl::StatusOr<DecodedChunk> PerClientCollector::Decode(const ChunkIn& chunk,
                                                        const RoundFacts& round) const {
  return DecodeCodecChunk(chunk, round);
}

void PerClientCollector::Collect(const ChunkIn& c, DecodedChunk d, bool fresh, bool complete,
                                 const RoundFacts& round) {
  double sq = 0;
  if (compact_) {
    for (float x : d.values) sq += double(x) * x;
  }
  absl::MutexLock lock(&mu_);
  facts_ = round;
  Update& u = updates_[c.client_id];
  if (fresh) {
    u = Update();
    if (!compact_) u.values.assign(round.dim, 0.0f);
    u.weight = c.weight;
    u.decoder = round.decoder;
    u.keep = round.keep;
  }
  if (compact_) {
    u.frames.push_back({d.begin, std::string(c.frame), c.scale, sq});
  } else {
    std::copy(d.values.begin(), d.values.end(), u.values.begin() + d.begin);
  }
  // The engine refused overlapping chunks: insert and merge with touching neighbours.
  const Range r{d.begin, d.begin + d.values.size()};
  if (r.second > r.first) {
    auto at = std::lower_bound(u.ranges.begin(), u.ranges.end(), r);
    at = u.ranges.insert(at, r);
    if (at + 1 != u.ranges.end() && at->second == (at + 1)->first) {
      at->second = (at + 1)->second;
      u.ranges.erase(at + 1);
    }
    if (at != u.ranges.begin() && (at - 1)->second == at->first) {
      (at - 1)->second = at->second;
      u.ranges.erase(at);
    }
  }
  if (complete && !u.complete) u.completed = ++completions_;
  u.complete = complete;
}

double PerClientCollector::Update::Norm() const {
  if (frames.empty()) return L2Norm(values);
  std::vector<std::pair<uint64_t, double>> parts;
  for (const Frame& f : frames) parts.emplace_back(f.begin, f.sum_sq);
  std::sort(parts.begin(), parts.end());
  double sq = 0;
  for (const auto& [begin, s] : parts) sq += s;
  return std::sqrt(sq);
}

std::map<std::string, PerClientCollector::Update> PerClientCollector::Updates() const {
  absl::MutexLock lock(&mu_);
  return updates_;
}

std::map<std::string, PerClientCollector::Update> PerClientCollector::UpdatesOf(
    const std::set<std::string>& clients) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, Update> out;
  for (const std::string& c : clients) {
    if (auto it = updates_.find(c); it != updates_.end()) out.emplace(c, it->second);
  }
  return out;
}

std::map<std::string, PerClientCollector::Update> PerClientCollector::TakeUpdates() {
  absl::MutexLock lock(&mu_);
  return std::exchange(updates_, {});
}

absl::Status PerClientCollector::Fill(const Update& update, std::span<float> dense) const {
  RoundFacts facts;
  {
    absl::MutexLock lock(&mu_);
    facts = facts_;
  }
  facts.decoder = update.decoder;
  facts.keep = update.keep;
  std::fill(dense.begin(), dense.end(), 0.0f);
  for (const Frame& f : update.frames) {
    ChunkIn c;
    c.frame = f.bytes;
    c.scale = f.scale;
    auto d = DecodeCodecChunk(c, facts);
    if (!d.ok()) return d.status();
    if (d->begin + d->values.size() > dense.size()) {
      return absl::OutOfRangeError(StrCat("a chunk ends at ", d->begin + d->values.size(), " of ",
                                          dense.size(), " coordinates"));
    }
    std::copy(d->values.begin(), d->values.end(), dense.begin() + d->begin);
  }
  return absl::OkStatus();
}

std::set<std::string> PerClientCollector::CompleteClients() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [client, u] : updates_) {
    if (u.complete) out.insert(client);
  }
  return out;
}

std::set<std::string> PerClientCollector::EarliestComplete(size_t k) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, std::string>> done;
  for (const auto& [client, u] : updates_) {
    if (u.complete) done.emplace_back(u.completed, client);
  }
  std::sort(done.begin(), done.end());
  std::set<std::string> out;
  for (size_t i = 0; i < done.size() && i < k; ++i) out.insert(done[i].second);
  return out;
}

size_t PerClientCollector::CompleteCount() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [client, u] : updates_) n += u.complete ? 1 : 0;
  return n;
}

void PerClientCollector::Forget(const std::string& client) {
  absl::MutexLock lock(&mu_);
  updates_.erase(client);
}

void PerClientCollector::Completed(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = updates_.find(client);
  if (it == updates_.end() || it->second.complete) return;
  it->second.complete = true;
  it->second.completed = ++completions_;
}

// ---- PayloadCollector ----

std::optional<Rejection> PayloadCollector::Admit(const ChunkIn& c, const HeldUpdate*,
                                                 const RoundFacts&) const {
  if (c.chunk_count != 1 || c.chunk_index != 0) {
    return Reject(RejectReason::kBadChunkIndex,
                  absl::InvalidArgumentError("a payload update is one chunk"));
  }
  return std::nullopt;
}

absl::StatusOr<DecodedChunk> PayloadCollector::Decode(const ChunkIn& c,
                                                      const RoundFacts& round) const {
  auto view = codecs::ParseFrame(c.frame, round.frame_limits);
  if (!view.ok()) return view.status();
  if (view->dim != round.dim || view->begin != 0 || view->length != round.dim) {
    return absl::OutOfRangeError(
        StrCat("a payload frame covers the whole model (", round.dim, " coordinates)"));
  }
  if (absl::Status st = validate_(view->spec, view->body); !st.ok()) return st;
  DecodedChunk d;
  d.spec = std::string(view->spec);
  d.body.assign(reinterpret_cast<const char*>(view->body.data()), view->body.size());
  d.coordinates = view->length;
  return d;
}

void PayloadCollector::Collect(const ChunkIn& c, DecodedChunk d, bool, bool, const RoundFacts&) {
  absl::MutexLock lock(&mu_);
  payloads_[c.client_id] = Payload{std::move(d.spec), std::move(d.body), c.weight};
}

std::map<std::string, PayloadCollector::Payload> PayloadCollector::Payloads() const {
  absl::MutexLock lock(&mu_);
  return payloads_;
}

size_t PayloadCollector::Count(std::string_view spec) const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [client, p] : payloads_) n += p.spec == spec ? 1 : 0;
  return n;
}

PartCollector::PartCollector(std::vector<Part> parts) : parts_(std::move(parts)) {}

RoundFacts PartCollector::FactsOf(uint32_t part, const RoundFacts& round) const {
  RoundFacts facts = round;
  if (part < parts_.size() && parts_[part].decoder != nullptr) {
    facts.decoder = parts_[part].decoder.get();
    facts.keep = parts_[part].decoder;
  }
  return facts;
}

std::optional<Rejection> PartCollector::Admit(const ChunkIn& chunk, const HeldUpdate* held,
                                              const RoundFacts& round) const {
  if (chunk.part >= parts_.size()) {  // the engine refuses it first (parts())
    return Rejection{RejectReason::kPart, absl::InvalidArgumentError(
                                              StrCat("part ", chunk.part, " of ", parts_.size()))};
  }
  return parts_[chunk.part].collector->Admit(chunk, held, FactsOf(chunk.part, round));
}

absl::StatusOr<DecodedChunk> PartCollector::Decode(const ChunkIn& chunk,
                                                   const RoundFacts& round) const {
  if (chunk.part >= parts_.size()) return absl::InvalidArgumentError("no such part");
  return parts_[chunk.part].collector->Decode(chunk, FactsOf(chunk.part, round));
}

void PartCollector::Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
                            const RoundFacts& round) {
  if (chunk.part >= parts_.size()) return;
  bool first_of_part;
  std::set<uint32_t> others;  // the update's other parts, told when it completes
  {
    absl::MutexLock lock(&mu_);
    std::set<uint32_t>& begun = begun_[chunk.client_id];
    if (fresh) begun.clear();
    first_of_part = begun.insert(chunk.part).second;
    if (complete) {
      others = begun;
      others.erase(chunk.part);
    }
  }
  parts_[chunk.part].collector->Collect(chunk, std::move(decoded), first_of_part, complete,
                                        FactsOf(chunk.part, round));
  for (uint32_t p : others) parts_[p].collector->Completed(chunk.client_id);
}

void PartCollector::Forget(const std::string& client) {
  {
    absl::MutexLock lock(&mu_);
    begun_.erase(client);
  }
  for (const Part& p : parts_) p.collector->Forget(client);
}

}  // namespace fedlgc::coordinator
