// A secure aggregation round's collector (see secagg_collector.h).
#include "modes/fedavg/secagg_collector.h"

#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/input_error.h"
#include "codecs/zmod_frame.h"

namespace fedlgc::modes {

using coordinator::Rejection;
using coordinator::RejectReason;

int64_t SignExtend(uint64_t word, int bits) {
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  word &= mask;
  if (bits < 64 && (word >> (bits - 1)) & 1) return static_cast<int64_t>(word | ~mask);
  return static_cast<int64_t>(word);
}

ZmodSumCollector::ZmodSumCollector(uint64_t words, int frame_bits, int sum_bits, int levels)
    : words_(words), frame_bits_(frame_bits), sum_bits_(sum_bits), levels_(levels),
      sum_(words, 0) {}

void ZmodSumCollector::AllowOnly(std::optional<std::set<std::string>> clients) {
  absl::MutexLock lock(&mu_);
  allowed_ = std::move(clients);
}

std::optional<Rejection> ZmodSumCollector::Admit(const coordinator::ChunkIn& c,
                                                 const coordinator::HeldUpdate*,
                                                 const coordinator::RoundFacts&) const {
  absl::MutexLock lock(&mu_);
  if (allowed_ && !allowed_->count(c.client_id)) {
    return coordinator::Reject(
        RejectReason::kNotParticipant,
        absl::FailedPreconditionError(StrCat(c.client_id,
                                             " does not send masked input in this round (it has "
                                             "no peers' shares, or the input phase is over)")));
  }
  return std::nullopt;
}

absl::StatusOr<coordinator::DecodedChunk> ZmodSumCollector::Decode(
    const coordinator::ChunkIn& c, const coordinator::RoundFacts& round) const {
  auto view = codecs::ParseFrame(c.frame, round.frame_limits);
  if (!view.ok()) return view.status();
  coordinator::DecodedChunk d;
  if (absl::Status st = codecs::ReadZmod(*view, frame_bits_, words_, &d.words); !st.ok()) return st;
  if (levels_ > 0) {
    for (uint32_t w : d.words) {
      const int64_t v = SignExtend(w, frame_bits_);
      if (v < -levels_ || v > levels_) {
        return codecs::NonFiniteError(
            StrCat("a code ", v, " outside the round's levels [", -levels_, ", ", levels_, "]"));
      }
    }
  }
  d.begin = view->begin;
  d.coordinates = view->length;
  return d;
}

void ZmodSumCollector::Collect(const coordinator::ChunkIn& c, coordinator::DecodedChunk d,
                               bool fresh, bool complete, const coordinator::RoundFacts&) {
  absl::MutexLock lock(&mu_);
  auto& held = partial_[c.client_id];
  if (fresh) held.clear();
  held[d.begin] = std::move(d.words);
  if (!complete) return;
  uint64_t covered = 0;
  for (const auto& [begin, words] : held) covered += words.size();
  if (covered != words_) {
    // Whole by its chunk count but not by its words: it cannot be unmasked; dropped.
    partial_.erase(c.client_id);
    return;
  }
  const uint64_t mask = (uint64_t{1} << sum_bits_) - 1;
  for (const auto& [begin, words] : held) {
    for (size_t i = 0; i < words.size(); ++i) {
      const uint64_t w = levels_ > 0 ? static_cast<uint64_t>(SignExtend(words[i], frame_bits_))
                                     : words[i];
      sum_[begin + i] = (sum_[begin + i] + w) & mask;
    }
  }
  partial_.erase(c.client_id);
  complete_.insert(c.client_id);
}

std::set<std::string> ZmodSumCollector::Complete() const {
  absl::MutexLock lock(&mu_);
  return complete_;
}

std::vector<uint64_t> ZmodSumCollector::Sum() const {
  absl::MutexLock lock(&mu_);
  return sum_;
}

}  // namespace fedlgc::modes
