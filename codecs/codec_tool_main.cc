// fedlgc-codec: the codec library on files, for researchers who want frames without a
// federation (and the reference the Python binding is checked against, byte for byte).
//
//   fedlgc-codec encode SPEC IN.f32 OUT.frames [--seed N] [--max-frame-bytes B]
//   fedlgc-codec decode IN.frames OUT.f32
//   fedlgc-codec info IN.frames
//
// IN.f32 / OUT.f32: little-endian float32 values, nothing else (numpy's x.tofile()).
// .frames: each frame as a u32 little-endian length and its bytes (codecs/frame.h).
// The command line is every binary's (base/flags.h): --help on the tool and on each
// command, --version, --config, and an error naming a bad value.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "codecs/codec.h"
#include "codecs/registry.h"

namespace {

using fedlgc::codecs::Frame;

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

struct EncodeArgs {
  std::string spec, in, out;
  fedlgc::codecs::EncodeOptions opts;
};

int Encode(const EncodeArgs& a) {
  std::string raw;
  if (!ReadAll(a.in, &raw)) return Fail("cannot read " + a.in);
  if (raw.size() % 4 != 0) return Fail(a.in + ": not a whole number of floats");
  std::vector<float> x(raw.size() / 4);
  if (!x.empty()) std::memcpy(x.data(), raw.data(), raw.size());
  auto codec = fedlgc::codecs::MakeCodec(a.spec);
  if (!codec.ok()) return Fail(std::string(codec.status().message()));
  std::vector<Frame> frames;
  if (auto st = (*codec)->Encode(x, a.opts, &frames); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  std::string out;
  for (const Frame& f : frames) {
    const uint32_t n = static_cast<uint32_t>(f.bytes.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += f.bytes;
  }
  if (!WriteAll(a.out, out)) return Fail("cannot write " + a.out);
  return 0;
}

// Decodes `in` into `out`, or with an empty `out` prints each frame's header.
int Decode(const std::string& in, const std::string& out_path) {
  const bool info_only = out_path.empty();
  std::string bytes;
  std::vector<std::string> frames;
  if (!ReadAll(in, &bytes) || !SplitFrames(bytes, &frames) || frames.empty()) {
    return Fail(in + ": not a .frames file");
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
  if (!WriteAll(out_path, raw)) return Fail("cannot write " + out_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "The codec library on files: float32 values (numpy's x.tofile()) to frames and back "
      "(docs/codecs.md).",
      "fedlgc-codec");
  fedlgc::AddCommonFlags(app);
  app.require_subcommand(1);
  EncodeArgs enc;
  CLI::App* encode = app.add_subcommand("encode", "encode IN.f32 with SPEC into OUT.frames");
  encode->add_option("spec", enc.spec, "codec spec, e.g. 'topk(ratio=0.01,values=qsgd(bits=8))'")
      ->required();
  encode->add_option("in", enc.in, "float32 values, little-endian")->required();
  encode->add_option("out", enc.out, "the frames, each a u32 little-endian length and its bytes")
      ->required();
  encode->add_option("--seed", enc.opts.seed, "seed of the codec's randomness")
      ->capture_default_str();
  encode
      ->add_option("--max-frame-bytes", enc.opts.max_frame_bytes,
                   "largest frame in bytes, a longer encoding cut into several (0: one frame)")
      ->capture_default_str();
  std::string in, out;
  CLI::App* decode = app.add_subcommand("decode", "decode IN.frames into OUT.f32");
  decode->add_option("in", in, "frames written by encode")->required();
  decode->add_option("out", out, "float32 values, little-endian")->required();
  CLI::App* info = app.add_subcommand("info", "print each frame's codec, span and size");
  info->add_option("in", in, "frames written by encode")->required();
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  if (encode->parsed()) return Encode(enc);
  if (decode->parsed()) return Decode(in, out);
  return Decode(in, "");
}
