// Frames of values in Z_(2^b) (see zmod_frame.h).
#include "codecs/zmod_frame.h"

#include <algorithm>

#include "base/str.h"
#include "codecs/bit_io.h"
#include "codecs/input_error.h"
#include "codecs/packing.h"

namespace fedlgc::codecs {

std::string ZmodSpec(int bits) { return StrCat("zmod/1(bits=", bits, ")"); }

uint64_t ZmodFrameBytes(uint64_t n, int bits) {
  return FrameOverhead(ZmodSpec(bits).size()) + PackedBytes(n, bits);
}

absl::Status EncodeZmod(std::span<const uint64_t> words, int bits, uint64_t max_frame_bytes,
                        std::vector<Frame>* frames) {
  if (bits < 1 || bits > kMaxZmodBits || words.empty()) {
    return absl::InvalidArgumentError(
        StrCat("zmod frames of ", words.size(), " words of ", bits, " bits"));
  }
  const std::string spec = ZmodSpec(bits);
  uint64_t per = words.size();
  if (max_frame_bytes > 0) {
    const uint64_t overhead = FrameOverhead(spec.size());
    if (max_frame_bytes < overhead + PackedBytes(1, bits)) {
      return absl::InvalidArgumentError(
          StrCat("a frame budget of ", max_frame_bytes, " bytes holds no ", bits, "-bit word"));
    }
    // Whole bytes of words: 8 words fill `bits` bytes exactly.
    per = std::max<uint64_t>(1, (max_frame_bytes - overhead) * 8 / bits);
    if (per > 8) per -= per % 8;
  }
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  for (uint64_t begin = 0; begin < words.size(); begin += per) {
    const uint64_t n = std::min<uint64_t>(per, words.size() - begin);
    Frame f;
    f.begin = begin;
    f.length = n;
    const size_t body = BeginFrame(spec, words.size(), begin, n, &f.bytes);
    BitWriter w(&f.bytes);
    for (uint64_t i = begin; i < begin + n; ++i) w.Write(words[i] & mask, bits);
    w.Flush();
    FinishFrame(body, &f.bytes);
    frames->push_back(std::move(f));
  }
  return absl::OkStatus();
}

absl::Status ReadZmod(const FrameView& frame, int bits, uint64_t dim,
                      std::vector<uint32_t>* words) {
  if (frame.spec != ZmodSpec(bits) || frame.dim != dim) {
    return WrongCodecError(StrCat("a frame of ", frame.spec, " over ", frame.dim,
                                  " words where the round takes ", ZmodSpec(bits), " over ", dim));
  }
  if (frame.body.size() != PackedBytes(frame.length, bits)) {
    return absl::InvalidArgumentError(StrCat("a zmod frame of ", frame.length, " words of ", bits,
                                             " bits has a body of ", frame.body.size(), " bytes"));
  }
  words->resize(frame.length);
  BitReader r(frame.body);
  for (uint64_t i = 0; i < frame.length; ++i) {
    uint64_t v = 0;
    if (!r.Read(bits, &v)) return absl::InvalidArgumentError("a zmod frame's body ends early");
    (*words)[i] = static_cast<uint32_t>(v);
  }
  const int pad = static_cast<int>(frame.body.size() * 8 - frame.length * bits);
  uint64_t rest = 0;
  if (pad > 0 && (!r.Read(pad, &rest) || rest != 0)) {
    return absl::InvalidArgumentError("a zmod frame's padding bits are not zero");
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
