// Frames of values in Z_(2^b): what a client of a secure aggregation round sends (its
// integer code plus its masks, mod 2^b; or, in a round without masks, its code in b-bit
// two's complement). A frame (frame.h) of spec "zmod/1(bits=B)" covers a range of the
// code's words; its body packs each word in B bits, least significant first, and the
// padding bits of its last byte are zero. No word can lie outside Z_(2^B): a frame of
// another width is another spec, refused by the receiver.
#ifndef FEDLGC_CODECS_ZMOD_FRAME_H_
#define FEDLGC_CODECS_ZMOD_FRAME_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codecs/frame.h"

namespace fedlgc::codecs {

inline constexpr int kMaxZmodBits = 32;

// "zmod/1(bits=B)".
std::string ZmodSpec(int bits);
// Bytes of a frame of `n` words of `bits` bits.
uint64_t ZmodFrameBytes(uint64_t n, int bits);

// Cuts `words` (each taken mod 2^bits) into frames of at most `max_frame_bytes` bytes
// (0: one frame), appended to *frames. INVALID_ARGUMENT for bits outside
// [1, kMaxZmodBits], no words, or a budget too small for one word.
absl::Status EncodeZmod(std::span<const uint64_t> words, int bits, uint64_t max_frame_bytes,
                        std::vector<Frame>* frames);

// The words of a parsed frame (ParseFrame) that must be of spec ZmodSpec(bits) and cover
// part of a code of `dim` words. WrongCodecError for another spec or dimension;
// INVALID_ARGUMENT (malformed) for a body of the wrong length or with padding bits set.
absl::Status ReadZmod(const FrameView& frame, int bits, uint64_t dim, std::vector<uint32_t>* words);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ZMOD_FRAME_H_
