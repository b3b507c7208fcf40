// fedlgc-bench-codecs: single-threaded codec throughput against memcpy, bits per
// coordinate against the information bound, and sampled vs exact top-k, all measured in
// one run on the same input so the ratios hold on a noisy machine.
//
//   fedlgc-bench-codecs [--n 16777216] [--reps 5] [--json FILE] [--codec SPEC]...
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "codecs/dense_codec.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "codecs/topk.h"

namespace fedlgc::codecs {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MedianSeconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string spec;
  double encode_gbps = 0, decode_gbps = 0, bits = 0, bound = 0;
  size_t frames = 0;
};

const char* const kDefaultSpecs[] = {
    "fp32",
    "fp16",
    "bf16",
    "qsgd(bits=8,bucket=512)",
    "qsgd(bits=4,bucket=512)",
    "qsgd(bits=2,bucket=512)",
    "qsgd(bits=4,bucket=512,elias=1)",
    "nuqsgd(bits=4,bucket=512)",
    "natdither(s=8,bucket=512)",
    "terngrad(bucket=4096)",
    "natural",
    "sign(bucket=4096)",
    "topk(ratio=0.01,values=qsgd(bits=8,bucket=512))",
    "topk(ratio=0.01,values=qsgd(bits=8,bucket=512),sampled=1)",
    "topk(ratio=0.001,values=fp32,sampled=1)",
    "randk(ratio=0.01,values=fp16)",
};

int Main(int argc, char** argv) {
  size_t n = size_t{1} << 24;
  int reps = 5;
  std::string json;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--n") {
      n = std::stoull(next());
    } else if (a == "--reps") {
      reps = std::max(1, std::stoi(next()));
    } else if (a == "--json") {
      json = next();
    } else if (a == "--codec") {
      specs.push_back(next());
    } else {
      std::fprintf(
          stderr,
          "usage: fedlgc-bench-codecs [--n N] [--reps R] [--json FILE] [--codec SPEC]...\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (specs.empty()) specs.assign(std::begin(kDefaultSpecs), std::end(kDefaultSpecs));

  std::printf("fedlgc codec benchmark: %zu floats (%.1f MB), median of %d, one thread\n", n,
              n * 4 / 1e6, reps);
  std::vector<float> x(n), y(n);
  {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (float& v : x) v = normal(rng);
    for (size_t i = 0; i < n / 100; ++i) x[rng() % n] *= 30.0f;
  }
  const double bytes = static_cast<double>(n) * 4;
  std::vector<float> dst(n);
  const double memcpy_s = MedianSeconds(reps, [&] {
    std::memcpy(dst.data(), x.data(), n * 4);
    asm volatile("" ::"r"(dst.data()) : "memory");
  });
  const double memcpy_gbps = bytes / memcpy_s / 1e9;
  std::printf("memcpy: %.2f GB/s\n\n", memcpy_gbps);
  std::printf("%-58s %9s %9s %8s %8s %7s %7s\n", "codec", "enc GB/s", "dec GB/s", "enc/mcp",
              "dec/mcp", "bits", "bound");

  std::vector<Row> rows;
  for (const std::string& spec : specs) {
    auto made = MakeCodec(spec);
    if (!made.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.c_str(), made.status().ToString().c_str());
      return 2;
    }
    auto& codec = **made;
    std::vector<Frame> frames;
    EncodeOptions opts;
    opts.shared_scale = 1.0f;
    bool ok = true;
    const double enc = MedianSeconds(reps, [&] {
      frames.clear();
      ++opts.seed;
      ok &= codec.Encode(x, opts, &frames).ok();
    });
    const double dec = MedianSeconds(reps, [&] { ok &= DecodeAll(codec, frames, y).ok(); });
    if (!ok) {
      std::fprintf(stderr, "%s: encode/decode failed\n", spec.c_str());
      return 1;
    }
    Row r;
    r.spec = codec.spec();
    r.encode_gbps = bytes / enc / 1e9;
    r.decode_gbps = bytes / dec / 1e9;
    size_t wire = 0;
    for (const Frame& f : frames) wire += f.bytes.size();
    r.frames = frames.size();
    r.bits = 8.0 * wire / n;
    if (auto* d = dynamic_cast<DenseCodec*>(&codec)) {
      r.bound = d->BoundBitsPerCoord();
    } else if (auto* s = dynamic_cast<SparseCodec*>(&codec)) {
      r.bound = s->BoundBits(n) / n;
    }
    std::printf("%-58s %9.2f %9.2f %7.0f%% %7.0f%% %7.3f %7.3f\n", spec.c_str(), r.encode_gbps,
                r.decode_gbps, 100 * r.encode_gbps / memcpy_gbps, 100 * r.decode_gbps / memcpy_gbps,
                r.bits, r.bound);
    rows.push_back(r);
  }

  // Top-k selection alone: exact nth_element vs sampled threshold, 1% of n.
  const size_t k = std::max<size_t>(1, n / 100);
  std::vector<uint32_t> exact_idx, sampled_idx;
  const double exact_s = MedianSeconds(reps, [&] { TopKExact(x, k, &exact_idx); });
  uint64_t seed = 0;
  const double sampled_s =
      MedianSeconds(reps, [&] { TopKSampled(x, k, 0.01, ++seed, &sampled_idx); });
  std::printf(
      "\ntop-k selection, k = %zu (1%%): exact nth_element %.1f ms, sampled %.1f ms "
      "(%.1fx), kept %zu, same set as exact: %s\n",
      k, exact_s * 1e3, sampled_s * 1e3, exact_s / sampled_s, sampled_idx.size(),
      sampled_idx == exact_idx ? "yes" : "no");

  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"n\": " << n << ", \"reps\": " << reps << ", \"memcpy_gbps\": " << memcpy_gbps
        << ", \"codecs\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << (i ? ", " : "") << "{\"spec\": \"" << r.spec
          << "\", \"encode_gbps\": " << r.encode_gbps << ", \"decode_gbps\": " << r.decode_gbps
          << ", \"bits_per_coord\": " << r.bits << ", \"bound_bits_per_coord\": " << r.bound
          << ", \"frames\": " << r.frames << "}";
    }
    out << "], \"topk\": {\"k\": " << k << ", \"exact_ms\": " << exact_s * 1e3
        << ", \"sampled_ms\": " << sampled_s * 1e3 << ", \"kept\": " << sampled_idx.size()
        << ", \"same_as_exact\": " << (sampled_idx == exact_idx ? "true" : "false") << "}}\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", json.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace fedlgc::codecs

int main(int argc, char** argv) { return fedlgc::codecs::Main(argc, argv); }
