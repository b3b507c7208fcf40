// What LGC clients send in compressed rounds (docs/lgc.md),
// without libtorch: the common support, the innovation, the payload bodies and the error
// feedback rule. The autoencoder (autoencoder.h) turns supports' values into latents at
// the leader and latents plus innovations back into values at the coordinator.
//
// Support: the leader's k largest-magnitude coordinates of its update u (+ residual),
// ordered by value ascending: the order the autoencoder reads (a monotone signal).
// Innovation of a client on a support: its k_inn largest-magnitude values there, as a
// vector of length L = |support| in support order, zero elsewhere.
//
// Leader body: u32 L, u8 index_bits, L indices in support order at index_bits each
// (ceil(log2 dim): an ordered support costs ~log2 dim bits per entry whatever the code),
// u32 latent_bytes, the latent through a dense codec of the codec library (e.g. 4- or
// 8-bit QSGD), then the innovation. Innovation: f32 scale (the RMS of the client's values
// on the support: the autoencoder works on values divided by it), u32 count, positions at
// ceil(log2 L) bits each (ascending), fp32 values.
#ifndef FEDLGC_AUTOENCODER_LGC_PAYLOAD_H_
#define FEDLGC_AUTOENCODER_LGC_PAYLOAD_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/dense_codec.h"

namespace fedlgc::autoencoder {

// The k largest |u| coordinates (ties to the lower index), ordered by u ascending (ties by
// index). k is clamped to u.size().
std::vector<uint32_t> SelectSupport(std::span<const float> u, size_t k);

// A support on the wire (RoundStart's LgcRound.support, LgcLatent.support): u32
// little-endian in support order.
std::string SupportToBytes(std::span<const uint32_t> support);
// Refuses a size other than 4 k bytes (k = 0: any multiple of 4) and indices >= dim.
absl::StatusOr<std::vector<uint32_t>> SupportFromBytes(std::string_view bytes, size_t k,
                                                       uint64_t dim);

// u at `support`, in support order.
std::vector<float> Gather(std::span<const float> u, std::span<const uint32_t> support);

// The innovation: the k_inn largest |u[support[j]]| kept at their positions j, zeros
// elsewhere (length support.size()).
std::vector<float> Innovation(std::span<const float> u, std::span<const uint32_t> support,
                              size_t k_inn);
// The same from the values on the support (v = Gather(u, support)).
std::vector<float> InnovationOfValues(std::span<const float> v, size_t k_inn);

// Error feedback of LGC-PS: the support counts as sent (the coordinator rebuilds those
// values from the latent), everything else stays. `u` is update + old residual; the new
// residual is u with the support zeroed, so sent + residual == u exactly.
std::vector<float> ResidualAfter(std::span<const float> u, std::span<const uint32_t> support);

// The RMS of `values` (1 when it is 0 or not finite): the autoencoder's input scale.
float RmsScale(std::span<const float> values);

struct LeaderPayload {
  std::vector<uint32_t> support;  // in support order
  std::vector<float> latent;      // as the encoder produced it (encode) or decoded
  std::vector<float> innovation;  // length support.size()
  float scale = 1.0f;             // RmsScale of the leader's values; predict=1: the gain
  float step = 0;                 // predict=1: the innovation's 8-bit step
  uint32_t sent_crc = 0;          // predict=1: SentCrc of what the leader expects rebuilt
};

struct InnovationPart {
  float scale = 1.0f;
  std::vector<float> innovation;
};

// predict: the stage-3 body of predict=1, whose innovation is a correction's (gain, step,
// 8-bit values: see EncodeCorrection) in place of the RMS scale and fp32 values.
absl::StatusOr<std::string> EncodeLeader(const LeaderPayload& p, uint64_t dim,
                                         const codecs::DenseCodec& latent_codec, uint64_t seed,
                                         bool predict = false);
// Refuses truncated or trailing bytes, indices >= dim or repeated, a latent of another
// size than `latent_size`, non-finite values.
absl::StatusOr<LeaderPayload> DecodeLeader(std::span<const uint8_t> body, uint64_t dim,
                                           const codecs::DenseCodec& latent_codec,
                                           size_t latent_size, bool predict = false);

absl::StatusOr<std::string> EncodeInnovation(std::span<const float> innovation, float scale);
absl::StatusOr<InnovationPart> DecodeInnovation(std::span<const uint8_t> body, size_t length);

// predict=1 (lgc_plan.h). What the coordinator rebuilds from a prediction p (the decoder's
// output for the round's latent), a gain and an innovation: gain * p + innovation. Client
// and coordinator both use this, so the client knows exactly what counts.
std::vector<float> Rebuild(float gain, std::span<const float> prediction,
                           std::span<const float> innovation);

// What a predict=1 client sends of its values v on the support, given the prediction p of
// them (the decoder's output for the round's latent): a gain, an innovation in 8 bits, and
// the CRC32C of what they rebuild to, so the coordinator can tell when its rebuild is not
// the client's (another libtorch build, say).
struct Correction {
  uint32_t reference = 0;         // followers: the leader payload it was made against
  float gain = 0;                 // <v, p> / |p|^2 (0 when p = 0)
  float step = 0;                 // the innovation's 8-bit step: max |innovation| / 127
  uint32_t sent_crc = 0;          // SentCrc(sent)
  std::vector<float> innovation;  // the k_inn largest |v - gain p|, rounded to the step
  std::vector<float> sent;        // Rebuild(gain, p, innovation); not sent
};
// The client's side (reference 0): v - sent is its new residual on the support, and
// |v - sent| <= |v| (the rounding can only leave an entry's miss smaller).
Correction Correct(std::span<const float> v, std::span<const float> prediction, size_t k_inn);
uint32_t SentCrc(std::span<const float> sent);

// Correction body: u32 reference, f32 gain, f32 step, u32 sent_crc, u32 count, positions at
// ceil(log2 L) bits each (ascending), count int8 values (value = q * step, q in
// [-127, 127], never 0). A leader's predict=1 body ends with the same, less the reference.
// Refuses an innovation value that is not a nonzero multiple q * step, |q| <= 127, and a
// step whose 127 multiples are not finite.
absl::StatusOr<std::string> EncodeCorrection(const Correction& c);
// The wire fields (sent stays empty).
absl::StatusOr<Correction> DecodeCorrection(std::span<const uint8_t> body, size_t length);

// predict=1: what names a leader payload: the CRC32C of its support (u32s, in support
// order) followed by its latent (floats; none in stage 2). Followers send it with their
// values and corrections; the coordinator decodes each against the payload it names.
uint32_t ReferenceOf(std::span<const uint32_t> support, std::span<const float> latent);

// predict=1, stage 2: a follower's values body: u32 reference, then fp32 values.
std::string EncodeReferencedValues(uint32_t reference, std::span<const float> values);
struct ReferencedValues {
  uint32_t reference = 0;
  std::vector<float> values;
};
// Refuses another length than `length` values and non-finite values.
absl::StatusOr<ReferencedValues> DecodeReferencedValues(std::span<const uint8_t> body,
                                                        size_t length);

}  // namespace fedlgc::autoencoder

#endif  // FEDLGC_AUTOENCODER_LGC_PAYLOAD_H_
