// fedlgc-codec: the codec library on files, for researchers who want frames without a
// federation (and the reference the Python binding is checked against, byte for byte).
//
//   fedlgc-codec encode SPEC IN.f32 OUT.frames [--seed N] [--max-frame-bytes B]
//   fedlgc-codec decode IN.frames OUT.f32
//   fedlgc-codec info IN.frames
//
// IN.f32 / OUT.f32: little-endian float32 values, nothing else (numpy's x.tofile()).
// .frames: each frame as a u32 little-endian length and its bytes (codecs/frame.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "codecs/codec.h"
#include "codecs/registry.h"

namespace {

using fedlgc::codecs::Frame;

int Usage() {
  // not a log line: the tool's usage, as every command line tool prints it
  std::fprintf(stderr,
               "usage: fedlgc-codec encode SPEC IN.f32 OUT.frames [--seed N] "
               "[--max-frame-bytes B]\n"
               "       fedlgc-codec decode IN.frames OUT.f32\n"
               "       fedlgc-codec info IN.frames\n");
  return 2;
}

int Fail(const std::string& what) {
  fedlgc::log::Error("fedlgc-codec", "%s", what);
  return 1;
}

bool ReadAll(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out->append(buf, n);
  const bool ok = std::ferror(f) == 0;
  std::fclose(f);
  return ok;
}

bool WriteAll(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

// Splits a .frames file; false when a length runs past the end.
bool SplitFrames(const std::string& bytes, std::vector<std::string>* frames) {
  for (size_t at = 0; at < bytes.size();) {
    uint32_t n = 0;
    if (bytes.size() - at < 4) return false;
    std::memcpy(&n, bytes.data() + at, 4);
    at += 4;
    if (bytes.size() - at < n) return false;
    frames->push_back(bytes.substr(at, n));
    at += n;
  }
  return true;
}

int Encode(int argc, char** argv) {
  if (argc < 5) return Usage();
  fedlgc::codecs::EncodeOptions opts;
  for (int i = 5; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seed") {
      opts.seed = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--max-frame-bytes") {
      opts.max_frame_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      return Usage();
    }
  }
  std::string raw;
  if (!ReadAll(argv[3], &raw)) return Fail(std::string("cannot read ") + argv[3]);
  if (raw.size() % 4 != 0) return Fail(std::string(argv[3]) + ": not a whole number of floats");
  std::vector<float> x(raw.size() / 4);
  if (!x.empty()) std::memcpy(x.data(), raw.data(), raw.size());
  auto codec = fedlgc::codecs::MakeCodec(argv[2]);
  if (!codec.ok()) return Fail(std::string(codec.status().message()));
  std::vector<Frame> frames;
  if (auto st = (*codec)->Encode(x, opts, &frames); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  std::string out;
  for (const Frame& f : frames) {
    const uint32_t n = static_cast<uint32_t>(f.bytes.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += f.bytes;
  }
  if (!WriteAll(argv[4], out)) return Fail(std::string("cannot write ") + argv[4]);
  return 0;
}

int Decode(int argc, char** argv, bool info_only) {
  if (argc < (info_only ? 3 : 4)) return Usage();
  std::string bytes;
  std::vector<std::string> frames;
  if (!ReadAll(argv[2], &bytes) || !SplitFrames(bytes, &frames) || frames.empty()) {
    return Fail(std::string(argv[2]) + ": not a .frames file");
  }
  const fedlgc::codecs::FrameLimits limits;
  std::vector<float> out;
  for (const std::string& f : frames) {
    auto view = fedlgc::codecs::ParseFrame(f, limits);
    if (!view.ok()) return Fail(std::string(view.status().message()));
    if (info_only) {
      std::printf("%s dim=%llu begin=%llu length=%llu bytes=%zu\n", std::string(view->spec).c_str(),
                  static_cast<unsigned long long>(view->dim),
                  static_cast<unsigned long long>(view->begin),
                  static_cast<unsigned long long>(view->length), f.size());
      continue;
    }
    if (out.empty()) out.assign(view->dim, 0.0f);
    auto codec = fedlgc::codecs::MakeCodec(view->spec);
    if (!codec.ok()) return Fail(std::string(codec.status().message()));
    if (auto st = fedlgc::codecs::DecodeFrameInto(**codec, f, limits, out); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  if (info_only) return 0;
  const std::string raw(reinterpret_cast<const char*>(out.data()), out.size() * 4);
  if (!WriteAll(argv[3], raw)) return Fail(std::string("cannot write ") + argv[3]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  if (cmd == "encode") return Encode(argc, argv);
  if (cmd == "decode") return Decode(argc, argv, false);
  if (cmd == "info") return Decode(argc, argv, true);
  return Usage();
}
