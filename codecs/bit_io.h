// Bit-level writer and reader for variable-length codes (Elias gamma, Elias-Fano).
// Bits are written least-significant first into little-endian 64-bit words.
// The reader never reads past its span: every read reports overrun instead.
#ifndef FEDLGC_CODECS_BIT_IO_H_
#define FEDLGC_CODECS_BIT_IO_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace fedlgc::codecs {

// Appends bits to a std::string. Not thread-safe.
class BitWriter {
 public:
  explicit BitWriter(std::string* out) : out_(out) {}
  BitWriter(const BitWriter&) = delete;
  BitWriter& operator=(const BitWriter&) = delete;

  // Writes the low `n` bits of `v`, 0 <= n <= 57.
  void Write(uint64_t v, int n) {
    if (n == 0) return;
    acc_ |= (v & ((uint64_t{1} << n) - 1)) << fill_;
    fill_ += n;
    while (fill_ >= 8) {
      out_->push_back(static_cast<char>(acc_ & 0xff));
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void WriteBit(bool b) { Write(b ? 1 : 0, 1); }
  // Writes `n` zero bits then a one (unary code of n).
  void WriteUnary(uint64_t n) {
    while (n >= 32) {
      Write(0, 32);
      n -= 32;
    }
    Write(uint64_t{1} << n, static_cast<int>(n) + 1);
  }
  // Elias gamma code of v >= 1: floor(log2 v) zeros, then v in binary (MSB first is not
  // needed for decodability; we write the payload bits LSB-first after the unary length).
  void WriteGamma(uint64_t v) {
    const int nbits = 63 - std::countl_zero(v);  // floor(log2 v)
    WriteUnary(static_cast<uint64_t>(nbits));
    if (nbits > 0) {
      if (nbits > 57) {
        Write(v, 32);
        Write(v >> 32, nbits - 32);
      } else {
        Write(v, nbits);  // the leading one is implicit
      }
    }
  }
  // Flushes a partial byte (zero padded).
  void Flush() {
    if (fill_ > 0) {
      out_->push_back(static_cast<char>(acc_ & 0xff));
      acc_ = 0;
      fill_ = 0;
    }
  }
  static int GammaBits(uint64_t v) { return 2 * (63 - std::countl_zero(v)) + 1; }

 private:
  std::string* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// Reads bits written by BitWriter. Not thread-safe. All reads return false once the
// span is exhausted, and the reader then stays failed.
class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> in) : in_(in) {}

  bool Read(int n, uint64_t* v) {
    if (n == 0) {
      *v = 0;
      return true;
    }
    if (!Refill(n)) return false;
    *v = acc_ & ((n == 64) ? ~uint64_t{0} : ((uint64_t{1} << n) - 1));
    acc_ = (n >= 64) ? 0 : acc_ >> n;
    fill_ -= n;
    return true;
  }
  bool ReadBit(bool* b) {
    uint64_t v;
    if (!Read(1, &v)) return false;
    *b = v != 0;
    return true;
  }
  // Reads a unary code; fails when more than `limit` zeros precede the one.
  bool ReadUnary(uint64_t limit, uint64_t* n) {
    uint64_t count = 0;
    for (;;) {
      if (fill_ == 0 && !Refill(1)) return false;
      if (acc_ != 0) {
        const int tz = std::countr_zero(acc_);
        if (tz < fill_) {
          count += static_cast<uint64_t>(tz);
          if (count > limit) return false;
          acc_ >>= tz;
          acc_ >>= 1;
          fill_ -= tz + 1;
          *n = count;
          return true;
        }
      }
      count += static_cast<uint64_t>(fill_);
      if (count > limit) return false;
      acc_ = 0;
      fill_ = 0;
    }
  }
  bool ReadGamma(uint64_t* v) {
    uint64_t nbits;
    if (!ReadUnary(63, &nbits)) return false;
    uint64_t low = 0;
    if (nbits > 57) {
      uint64_t hi;
      if (!Read(32, &low) || !Read(static_cast<int>(nbits) - 32, &hi)) return false;
      low |= hi << 32;
    } else if (!Read(static_cast<int>(nbits), &low)) {
      return false;
    }
    *v = (uint64_t{1} << nbits) | low;
    return true;
  }
  // Whether the bits of the bytes taken so far that no Read has returned are all zero
  // (once every byte is consumed: the padding of the last one).
  bool UnreadBitsAreZero() const { return acc_ == 0; }
  // Bytes consumed so far, counting a partially read byte as consumed.
  size_t BytesConsumed() const { return pos_ - static_cast<size_t>(fill_ / 8); }

 private:
  bool Refill(int need) {
    while (fill_ < need) {
      if (pos_ >= in_.size()) return false;
      if (fill_ > 56) {
        // Cannot take a whole byte; take only what is needed (need <= 64 - fill_ + 8).
        return false;
      }
      acc_ |= static_cast<uint64_t>(in_[pos_++]) << fill_;
      fill_ += 8;
    }
    return true;
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_BIT_IO_H_
