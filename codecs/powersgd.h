// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization", NeurIPS 2019) as a sender-side codec, in its
// one-phase per-client form:
//
//   powersgd(rank=2, min_ratio=2, warm=1, iters=1)
//
// It needs the model's layout (layout.h), given by the job when the codec is built; its
// canonical spec then names the layout, powersgd/1(...,layout=l<hash>). Each tensor of
// two or more dimensions is a matrix M of shape[0] rows and size/shape[0] columns (a conv
// kernel out x in*kh*kw). With r = min(rank, rows, cols) a matrix is compressed when
// rows*cols >= min_ratio * r*(rows+cols); other tensors (biases, small matrices) go dense
// in fp32. For each compressed matrix, each Encode:
//   1. M <- update + residual (error feedback, the residual of ResidualCodec);
//   2. P = M Q, Q the one of the previous encode (warm start; warm=0: a fresh Gaussian Q
//      each time; the first is Gaussian);
//   3. P^ = P with orthonormal columns (modified Gram-Schmidt in double; a column with no
//      length left is zero);
//   4. Q = M^T P^; with iters=k > 1, steps 2-4 run k times on the same M, each from the
//      last Q (k power iterations per encode: P^ nearer M's top-r subspace, at k times the
//      products; the paper's one iteration per step suits many similar steps, a FedAvg
//      round's update is one large step);
//   5. P^ and Q go out (fp32), the receiver rebuilds M^ = P^ Q^T, and the residual keeps
//      M - M^ (exactly what the receiver lacks: the sender decodes its own frames).
// Q is the sender's state (SaveState), persisted with the residual by the edge client, so a
// restart continues the power iteration; the receiver needs none: frames carry P^ and Q,
// and any frame decodes alone. A column of Q that came out zero is drawn afresh for the
// next encode (otherwise its column of P would stay zero for good).
//
// Frames cover whole tensors, or whole rows of a compressed matrix (each such frame carries
// the matrix's Q, so small frame budgets cost bytes); dense tensors split anywhere. Body:
// for each tensor the frame touches, in order: a compressed one's P^ rows (rows x r fp32)
// then its Q (cols x r fp32), a dense one's values (fp32).
//
// Traffic: 32 r (rows + cols) bits per compressed matrix. Biased: keeps its own residual
// (no ef(...) around it).
//
// powersgd(rank=r, phases=2) names the paper's two-phase form instead: clients send
// P_i = M_i Q for one Q shared by the round, the coordinator averages and orthonormalizes
// them, clients send Q_i = M_i^T P^ for that P^. It is a round protocol of FedAvg jobs
// (powersgd_two_phase.h, modes/fedavg/powersgd_rounds.h): this codec only names it, and
// its Encode and Decode refuse.
#ifndef FEDLGC_CODECS_POWERSGD_H_
#define FEDLGC_CODECS_POWERSGD_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "codecs/registry.h"
#include "codecs/residual_codec.h"

namespace fedlgc::codecs {

// Not thread-safe: one sender owns it (Decode is const and may run concurrently).
class PowerSgd final : public ResidualCodec {
 public:
  // How one tensor of the layout travels.
  struct Block {
    std::string name;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t rows = 0;  // of the matrix view (compressed blocks)
    uint64_t cols = 0;
    uint32_t rank = 0;  // 0: dense
  };

  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node,
                                                       const CodecContext& context);

  const std::string& wire_spec() const override { return wire_spec_; }
  CodecTraits traits() const override;
  // Exact for the whole vector in one frame; an upper bound for any other n.
  uint64_t MaxFrameBytes(uint64_t n) const override;
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  // u32 magic 'PSGS', u32 version 1, u32 spec length, spec, u64 encodes, u32 matrices,
  // then per compressed matrix u64 m and m floats of Q (m = 0 before the first encode).
  // LoadState("") resets the codec to a sender that has not encoded yet.
  std::string SaveState() const override;
  absl::Status LoadState(std::string_view bytes) override;

  const std::vector<Block>& blocks() const { return blocks_; }
  const ModelLayout& layout() const { return layout_; }
  uint64_t encodes() const { return encodes_; }
  uint32_t iters() const { return iters_; }
  uint32_t phases() const { return phases_; }
  bool warm() const { return warm_; }
  // Q of compressed block b (cols x rank, row-major), empty before the first encode.
  std::span<const float> query(size_t b) const { return q_[b]; }
  // Floats a frame covering the whole vector carries.
  uint64_t FloatsPerUpdate() const;

 private:
  struct Cut {
    uint64_t begin = 0;
    uint64_t end = 0;
  };

  PowerSgd(std::string spec, std::string wire_spec, ModelLayout layout, uint32_t rank,
           double min_ratio, bool warm, uint32_t iters, uint32_t phases);
  absl::Status RefuseTwoPhase() const;

  // Frame ranges for a body budget of `max_frame_bytes` (0: one frame).
  absl::Status PlanFrames(uint64_t max_frame_bytes, std::vector<Cut>* cuts) const;
  // Splits the planned ranges at EncodeOptions::cuts, which must fall between rows.
  absl::Status SplitAt(std::span<const uint64_t> required, std::vector<Cut>* cuts) const;
  // P^ and the new Q of compressed block b from M (scratch_) and the current Q.
  void Factorize(size_t b, std::span<const float> m, std::span<const float> q,
                 std::vector<float>* p_hat, std::vector<float>* q_new) const;
  // A Gaussian Q for block b, drawn from (encode count, block, column).
  void DrawQuery(size_t b, uint64_t draw, std::span<float> q, int column = -1) const;
  void WriteBody(const Cut& cut, std::string* out) const;

  std::string wire_spec_;
  ModelLayout layout_;
  std::vector<Block> blocks_;
  uint32_t rank_;
  double min_ratio_;
  bool warm_;
  uint32_t iters_;
  uint32_t phases_;
  uint64_t encodes_ = 0;
  std::vector<std::vector<float>> q_;  // per block; empty for dense blocks
  // Per-encode work space.
  std::vector<std::vector<float>> p_hat_, q_new_;
  std::vector<float> iterate_;
  std::vector<float> recon_;
};

// The blocks of `layout` for `rank` and `min_ratio`: each tensor compressed or dense, as
// the header comment says.
std::vector<PowerSgd::Block> PowerSgdBlocks(const ModelLayout& layout, uint32_t rank,
                                            double min_ratio);
// Modified Gram-Schmidt on the r columns of `p`, a row-major rows x r matrix: orthonormal
// columns, and a column with no length left (or only rounding noise, below 1e-6 of its
// length before the projections) set to zero.
void OrthonormalizeColumns(std::span<double> p, uint64_t rows, uint64_t r);
// Standard normal values, from `key`, into `q` (row-major, r columns); column >= 0: only
// that column's.
void FillGaussian(uint64_t key, uint32_t r, std::span<float> q, int column = -1);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_POWERSGD_H_
