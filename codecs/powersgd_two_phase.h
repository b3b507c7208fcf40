// PowerSGD's two-phase form (Vogels, Karimireddy and Jaggi 2019, Algorithm 1) for a
// federation: the arithmetic both ends share, for `powersgd(rank=r, phases=2)`.
//
// Per round, with M_i the update plus residual of client i, for each compressed matrix
// (the blocks of powersgd.h):
//   phase 1: every client sends P_i = M_i Q (rows x r) for the round's query Q (cols x r),
//            the same for all (the coordinator names it in RoundStart: last round's mean
//            Q, warm start; the first round, or every round with warm=0, a Gaussian drawn
//            from a seed);
//   the coordinator averages the P_i (weighted) and orthonormalizes the columns: P^;
//   phase 2: every client sends Q_i = M_i^T P^ (cols x r) and its dense tensors in fp32,
//            keeps M_i - P^ Q_i^T (and nothing of the dense tensors) as its residual;
//   the coordinator commits the weighted mean of P^ Q_i^T, which is P^ (mean Q_i)^T: the
//   messages add up before one rebuild (linear), and with P^'s columns orthonormal a
//   message's L2 norm is exactly the norm of the update it stands for, so clipping needs
//   no rebuild either.
// The mean Q_i is the next round's query. All clients project onto one subspace P^ that
// the whole federation's updates chose, which the one-phase form (a subspace per client)
// cannot: the average of rank-r updates is then rank r, and nothing is lost between them.
//
// Payloads are one frame over the whole model (a round protocol's, not a codec's): spec
// "powersgd-p/1" or "powersgd-q/1", body u32 tag (CRC32C of the query or P^ the payload was
// made against, as RoundStart or the factor event gave it), then the floats.
#ifndef FEDLGC_CODECS_POWERSGD_TWO_PHASE_H_
#define FEDLGC_CODECS_POWERSGD_TWO_PHASE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "codecs/powersgd.h"

namespace fedlgc::codecs {

inline constexpr std::string_view kPowerSgdProjectionSpec = "powersgd-p/1";
inline constexpr std::string_view kPowerSgdMessageSpec = "powersgd-q/1";


// Immutable: safe to share between threads.
class PowerSgdTwoPhase {
 public:
  // From powersgd(..., phases=2), unwrapped (RoundKind::two_phase at the top), and the
  // model's layout.
  static absl::StatusOr<PowerSgdTwoPhase> Create(std::string_view spec, const ModelLayout& layout);

  const std::string& spec() const { return spec_; }  // canonical
  bool warm() const { return warm_; }
  uint64_t dim() const { return dim_; }
  const std::vector<PowerSgd::Block>& blocks() const { return blocks_; }
  uint64_t projection_floats() const { return p_floats_; }  // sum of rows x r
  uint64_t query_floats() const { return q_floats_; }       // sum of cols x r
  uint64_t message_floats() const { return q_floats_ + dense_; }
  // Bytes of a payload frame carrying `floats` values.
  uint64_t FrameBytes(std::string_view spec, uint64_t floats) const;

  // A Gaussian query drawn from `seed`.
  std::vector<float> DrawQuery(uint64_t seed) const;
  // The next round's query from a mean message: its Q part, with any column that came out
  // zero drawn afresh from `seed` (a zero column of Q would keep P's column zero for good).
  std::vector<float> NextQuery(std::span<const float> mean_message, uint64_t seed) const;
  // Phase 1: P = M Q of each compressed block of `m` (dim floats), in double.
  std::vector<float> Project(std::span<const float> m, std::span<const float> query) const;
  // P^: each block's P with orthonormal columns (OrthonormalizeColumns).
  std::vector<float> Orthonormalize(std::span<const float> p) const;
  // Phase 2: each compressed block's M^T P^, then the dense tensors' values.
  std::vector<float> Message(std::span<const float> m, std::span<const float> p_hat) const;
  // out += scale * the update `message` stands for: P^ Q^T per compressed block, the dense
  // values elsewhere. `out` holds dim floats.
  void AddRebuilt(std::span<const float> p_hat, std::span<const float> message, double scale,
                  std::span<float> out) const;
  // Zeroes the columns of each Q in `message` whose column of P^ is zero (Gram-Schmidt found
  // nothing left there): they rebuild to nothing, and without them the message's L2 norm is
  // exactly its update's.
  void DropDeadColumns(std::span<const float> p_hat, std::span<float> message) const;

  // The tag a payload made against `v` (a query or a P^) carries.
  static uint32_t Tag(std::span<const float> v);
  // A payload frame: `spec` (one of the two above), tag, values.
  std::string Frame(std::string_view spec, uint32_t tag, std::span<const float> values) const;
  // The values of a payload body: exactly `floats` of them after the u32 tag, which must be
  // `tag`; each finite and at most 1e30 in magnitude (sums of them stay finite in double).
  static absl::StatusOr<std::vector<float>> ReadBody(std::span<const uint8_t> body, uint32_t tag,
                                                     uint64_t floats);

 private:
  PowerSgdTwoPhase() = default;

  std::string spec_;
  bool warm_ = true;
  uint64_t dim_ = 0;
  std::vector<PowerSgd::Block> blocks_;
  uint64_t p_floats_ = 0, q_floats_ = 0, dense_ = 0;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_POWERSGD_TWO_PHASE_H_
