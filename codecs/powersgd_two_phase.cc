// PowerSGD's two-phase arithmetic (see powersgd_two_phase.h).
#include "codecs/powersgd_two_phase.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/crc32c.h"
#include "base/spec.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "codecs/rng.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {

absl::StatusOr<PowerSgdTwoPhase> PowerSgdTwoPhase::Create(std::string_view spec,
                                                          const ModelLayout& layout) {
  auto codec = MakeCodec(spec, &layout);
  if (!codec.ok()) return codec.status();
  const auto* psgd = dynamic_cast<const PowerSgd*>(codec->get());
  if (psgd == nullptr || psgd->phases() != 2) {
    return absl::InvalidArgumentError(StrCat("not a two-phase powersgd spec: ", spec));
  }
  PowerSgdTwoPhase t;
  t.spec_ = psgd->spec();
  t.warm_ = psgd->warm();
  t.dim_ = layout.dim();
  t.blocks_ = psgd->blocks();
  for (const PowerSgd::Block& b : t.blocks_) {
    if (b.rank == 0) {
      t.dense_ += b.size;
    } else {
      t.p_floats_ += b.rows * b.rank;
      t.q_floats_ += b.cols * b.rank;
    }
  }
  return t;
}

uint64_t PowerSgdTwoPhase::FrameBytes(std::string_view spec, uint64_t floats) const {
  return FrameOverhead(spec.size()) + 4 + 4 * floats;
}

std::vector<float> PowerSgdTwoPhase::DrawQuery(uint64_t seed) const {
  std::vector<float> q(q_floats_);
  uint64_t at = 0;
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const PowerSgd::Block& b = blocks_[bi];
    if (b.rank == 0) continue;
    FillGaussian(Mix64(seed * 0x9E3779B97F4A7C15ull ^ Mix64(bi + 1)), b.rank,
                 std::span<float>(q).subspan(at, b.cols * b.rank));
    at += b.cols * b.rank;
  }
  return q;
}

std::vector<float> PowerSgdTwoPhase::NextQuery(std::span<const float> mean_message,
                                               uint64_t seed) const {
  std::vector<float> q(mean_message.begin(), mean_message.begin() + q_floats_);
  uint64_t at = 0;
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const PowerSgd::Block& b = blocks_[bi];
    if (b.rank == 0) continue;
    const std::span<float> block = std::span<float>(q).subspan(at, b.cols * b.rank);
    for (uint32_t k = 0; k < b.rank; ++k) {
      bool zero = true;
      for (uint64_t j = 0; zero && j < b.cols; ++j) zero = block[j * b.rank + k] == 0;
      if (zero) {
        FillGaussian(Mix64(seed * 0x9E3779B97F4A7C15ull ^ Mix64(bi + 1)), b.rank, block,
                     static_cast<int>(k));
      }
    }
    at += b.cols * b.rank;
  }
  return q;
}

std::vector<float> PowerSgdTwoPhase::Project(std::span<const float> m,
                                             std::span<const float> query) const {
  std::vector<float> p(p_floats_);
  uint64_t at_p = 0, at_q = 0;
  std::vector<double> acc;
  for (const PowerSgd::Block& b : blocks_) {
    if (b.rank == 0) continue;
    const uint64_t r = b.rank;
    const float* q = query.data() + at_q;
    acc.assign(r, 0.0);
    for (uint64_t i = 0; i < b.rows; ++i) {
      const float* row = m.data() + b.offset + i * b.cols;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint64_t j = 0; j < b.cols; ++j) {
        const double mij = row[j];
        for (uint64_t k = 0; k < r; ++k) acc[k] += mij * q[j * r + k];
      }
      for (uint64_t k = 0; k < r; ++k) p[at_p + i * r + k] = static_cast<float>(acc[k]);
    }
    at_p += b.rows * r;
    at_q += b.cols * r;
  }
  return p;
}

std::vector<float> PowerSgdTwoPhase::Orthonormalize(std::span<const float> p) const {
  std::vector<float> out(p_floats_);
  uint64_t at = 0;
  std::vector<double> block;
  for (const PowerSgd::Block& b : blocks_) {
    if (b.rank == 0) continue;
    const uint64_t n = b.rows * b.rank;
    block.assign(p.begin() + at, p.begin() + at + n);
    OrthonormalizeColumns(block, b.rows, b.rank);
    for (uint64_t i = 0; i < n; ++i) out[at + i] = static_cast<float>(block[i]);
    at += n;
  }
  return out;
}

std::vector<float> PowerSgdTwoPhase::Message(std::span<const float> m,
                                             std::span<const float> p_hat) const {
  std::vector<float> msg(message_floats());
  uint64_t at_p = 0, at_q = 0, at_dense = q_floats_;
  std::vector<double> acc;
  for (const PowerSgd::Block& b : blocks_) {
    if (b.rank == 0) {
      std::memcpy(msg.data() + at_dense, m.data() + b.offset, b.size * sizeof(float));
      at_dense += b.size;
      continue;
    }
    const uint64_t r = b.rank;
    acc.assign(b.cols * r, 0.0);
    for (uint64_t i = 0; i < b.rows; ++i) {
      const float* row = m.data() + b.offset + i * b.cols;
      const float* pi = p_hat.data() + at_p + i * r;
      for (uint64_t j = 0; j < b.cols; ++j) {
        const double mij = row[j];
        for (uint64_t k = 0; k < r; ++k) acc[j * r + k] += mij * pi[k];
      }
    }
    for (uint64_t i = 0; i < b.cols * r; ++i) msg[at_q + i] = static_cast<float>(acc[i]);
    at_p += b.rows * r;
    at_q += b.cols * r;
  }
  return msg;
}

void PowerSgdTwoPhase::AddRebuilt(std::span<const float> p_hat, std::span<const float> message,
                                  double scale, std::span<float> out) const {
  uint64_t at_p = 0, at_q = 0, at_dense = q_floats_;
  for (const PowerSgd::Block& b : blocks_) {
    float* dst = out.data() + b.offset;
    if (b.rank == 0) {
      for (uint64_t i = 0; i < b.size; ++i) {
        dst[i] = static_cast<float>(dst[i] + scale * message[at_dense + i]);
      }
      at_dense += b.size;
      continue;
    }
    const uint64_t r = b.rank;
    for (uint64_t i = 0; i < b.rows; ++i) {
      const float* pi = p_hat.data() + at_p + i * r;
      for (uint64_t j = 0; j < b.cols; ++j) {
        const float* qj = message.data() + at_q + j * r;
        double s = 0;
        for (uint64_t k = 0; k < r; ++k) s += static_cast<double>(pi[k]) * qj[k];
        dst[i * b.cols + j] = static_cast<float>(dst[i * b.cols + j] + scale * s);
      }
    }
    at_p += b.rows * r;
    at_q += b.cols * r;
  }
}

void PowerSgdTwoPhase::DropDeadColumns(std::span<const float> p_hat,
                                       std::span<float> message) const {
  uint64_t at_p = 0, at_q = 0;
  for (const PowerSgd::Block& b : blocks_) {
    if (b.rank == 0) continue;
    const uint64_t r = b.rank;
    for (uint64_t k = 0; k < r; ++k) {
      bool dead = true;
      for (uint64_t i = 0; dead && i < b.rows; ++i) dead = p_hat[at_p + i * r + k] == 0;
      if (!dead) continue;
      for (uint64_t j = 0; j < b.cols; ++j) message[at_q + j * r + k] = 0;
    }
    at_p += b.rows * r;
    at_q += b.cols * r;
  }
}

uint32_t PowerSgdTwoPhase::Tag(std::span<const float> v) {
  return Crc32c(v.data(), v.size() * sizeof(float));
}

std::string PowerSgdTwoPhase::Frame(std::string_view spec, uint32_t tag,
                                    std::span<const float> values) const {
  std::string frame;
  const size_t body = BeginFrame(spec, dim_, 0, dim_, &frame);
  char t[4];
  std::memcpy(t, &tag, 4);
  frame.append(t, 4);
  frame.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  FinishFrame(body, &frame);
  return frame;
}

absl::StatusOr<std::vector<float>> PowerSgdTwoPhase::ReadBody(std::span<const uint8_t> body,
                                                              uint32_t tag, uint64_t floats) {
  if (body.size() != 4 + 4 * floats) {
    return InputErrorStatus(InputError::kMalformed,
                            StrCat("a two-phase PowerSGD payload of ", body.size(),
                                   " bytes; the round takes ", 4 + 4 * floats));
  }
  uint32_t got = 0;
  std::memcpy(&got, body.data(), 4);
  if (got != tag) {
    return WrongCodecError(
        StrCat("a two-phase PowerSGD payload made against factor ", got, "; the round's is ", tag));
  }
  std::vector<float> v(floats);
  if (floats > 0) std::memcpy(v.data(), body.data() + 4, floats * sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || std::fabs(v[i]) > 1e30f) {
      return NonFiniteError(StrCat("two-phase PowerSGD payload value ", i, " is ", v[i]));
    }
  }
  return v;
}

}  // namespace fedlgc::codecs
