// Little-endian scalar appends and a bounds-checked reader for byte formats outside the
// frame layout (broadcast deltas, the autoencoder's weights and LGC payloads).
#ifndef FEDLGC_CODECS_BYTE_IO_H_
#define FEDLGC_CODECS_BYTE_IO_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace fedlgc::codecs {

template <typename T>
void PutScalar(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Reads scalars and byte runs; every read fails (returns false) rather than overrun.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  explicit ByteReader(std::string_view b)
      : b_(reinterpret_cast<const uint8_t*>(b.data()), b.size()) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Take(size_t n, std::span<const uint8_t>* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_BYTE_IO_H_
