// LGC's stage-3 payloads (docs/lgc.md), without libtorch: the ordered support, the
// innovation, the leader and correction bodies and the exact rebuild both ends compute.
// The autoencoder (autoencoder.h) turns the support's values into a latent at the leader
// and the latent into each client's prediction.
//
// Support: the leader's k largest-magnitude coordinates of its update u (+ residual),
// ordered by value ascending: the order the autoencoder reads (a monotone signal).
// Innovation of a client on a support: its k_inn largest-magnitude values there, as a
// vector of length L = |support| in support order, zero elsewhere.
//
// Leader body (lgc-leader/1): u32 L, u8 index_bits, L indices in support order at
// index_bits each (ceil(log2 dim): an ordered support costs ~log2 dim bits per entry
// whatever the code), u32 latent_bytes, the latent through a dense codec of the codec
// library (e.g. 8-bit QSGD), then the leader's correction against its own latent: the
// correction body below less its reference.
#ifndef FEDLGC_MODES_LGC_LGC_PAYLOAD_H_
#define FEDLGC_MODES_LGC_LGC_PAYLOAD_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/dense_codec.h"

namespace fedlgc::lgc {

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

// The innovation of values v on a support: the k_inn largest |v[j]| kept at their
// positions j, zeros elsewhere.
std::vector<float> InnovationOfValues(std::span<const float> v, size_t k_inn);

// The RMS of `values` (1 when it is 0 or not finite): the autoencoder's input scale.
float RmsScale(std::span<const float> values);

struct LeaderPayload {
  std::vector<uint32_t> support;  // in support order
  std::vector<float> latent;      // as the encoder produced it (encode) or decoded
  std::vector<float> innovation;  // length support.size()
  float scale = 1.0f;             // the leader's gain against its own latent's prediction
  float step = 0;                 // the innovation's 8-bit step
  uint32_t sent_crc = 0;          // SentCrc of what the leader expects rebuilt
};

// The innovation part is a correction's (gain, step, 8-bit values: see EncodeCorrection).
absl::StatusOr<std::string> EncodeLeader(const LeaderPayload& p, uint64_t dim,
                                         const codecs::DenseCodec& latent_codec, uint64_t seed);
// Refuses truncated or trailing bytes, indices >= dim or repeated, a latent of another
// size than `latent_size`, non-finite values.
absl::StatusOr<LeaderPayload> DecodeLeader(std::span<const uint8_t> body, uint64_t dim,
                                           const codecs::DenseCodec& latent_codec,
                                           size_t latent_size);

// What the coordinator rebuilds from a prediction p (the decoder's
// output for the round's latent), a gain and an innovation: gain * p + innovation. Client
// and coordinator both use this, so the client knows exactly what counts.
std::vector<float> Rebuild(float gain, std::span<const float> prediction,
                           std::span<const float> innovation);

// What a stage-3 client sends of its values v on the support, given the prediction p of
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
// [-127, 127], never 0). A leader's body ends with the same, less the reference.
// Refuses an innovation value that is not a nonzero multiple q * step, |q| <= 127, and a
// step whose 127 multiples are not finite.
absl::StatusOr<std::string> EncodeCorrection(const Correction& c);
// The wire fields (sent stays empty).
absl::StatusOr<Correction> DecodeCorrection(std::span<const uint8_t> body, size_t length);

// What names a leader payload: the CRC32C of its support (u32s, in support order)
// followed by its latent (floats; in stage 2 the leader's decoded values). Followers send
// it with their corrections; the coordinator decodes each against the payload it names.
uint32_t ReferenceOf(std::span<const uint32_t> support, std::span<const float> latent);

}  // namespace fedlgc::lgc

#endif  // FEDLGC_MODES_LGC_LGC_PAYLOAD_H_
