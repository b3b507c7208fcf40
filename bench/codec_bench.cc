// fedlgc-bench-codecs: single-threaded codec throughput against memcpy, bits per
// coordinate against the information bound, and sampled vs exact top-k, all measured in
// one run on the same input so the ratios hold on a noisy machine.
//
//   fedlgc-bench-codecs [--n 16777216] [--reps 5] [--json FILE] [--codec SPEC]...
//
// Codecs that work per tensor (powersgd, gradiveq) see the vector as one matrix of 1,024
// rows (and a dense tail); their rows also give GFLOP/s of the matrix products. GradiVeQ's
// basis is fitted to the measured vector first (not timed).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/median_seconds.h"
#include "codecs/codec.h"
#include "codecs/dense_codec.h"
#include "codecs/dgc.h"
#include "codecs/gradiveq.h"
#include "codecs/layout.h"
#include "codecs/powersgd.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "codecs/topk.h"

namespace fedlgc::codecs {
namespace {


using fedlgc::bench::MedianSeconds;

struct Row {
  std::string spec;
  double encode_gbps = 0, decode_gbps = 0, bits = 0, bound = 0;
  double encode_gflops = 0, decode_gflops = 0;  // matrix codecs
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
    "alq(bits=3,bucket=512)",
    "amq(bits=3,bucket=512)",
    "alq(bits=4,bucket=512)",
    "natdither(s=8,bucket=512)",
    "terngrad(bucket=4096)",
    "natural",
    "sign(bucket=4096)",
    "topk(ratio=0.01,values=qsgd(bits=8,bucket=512))",
    "topk(ratio=0.01,values=qsgd(bits=8,bucket=512),sampled=1)",
    "topk(ratio=0.001,values=fp32,sampled=1)",
    "randk(ratio=0.01,values=fp16)",
    "adacomp(bin=50)",
    "adacomp(bin=500)",
    "dgc(ratio=0.001,warmup=0)",
    "topk(ratio=0.01,values=natdither(s=8,bucket=512),sampled=1)",
    "powersgd(rank=1)",
    "powersgd(rank=2)",
    "powersgd(rank=4)",
    "gradiveq(dims=8,slice=64)",
    "gradiveq(dims=4,slice=64)",
};

// The layout per-tensor codecs get: one matrix of 1,024 rows and a dense tail.
ModelLayout BenchLayout(size_t n) {
  if (n < 2048) return ModelLayout::Flat(n);
  std::vector<std::pair<std::string, std::vector<uint64_t>>> t = {{"m", {1024, n / 1024}}};
  if (n % 1024) t.push_back({"tail", {n % 1024}});
  return ModelLayout::Create(std::move(t)).value();
}

struct Args {
  size_t n = size_t{1} << 24;
  int reps = 5;
  std::string json;
  std::vector<std::string> specs;
};

// Parses the flags into *a; returns an exit code when the program should stop.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--n") {
      a->n = std::stoull(next());
    } else if (flag == "--reps") {
      a->reps = std::max(1, std::stoi(next()));
    } else if (flag == "--json") {
      a->json = next();
    } else if (flag == "--codec") {
      a->specs.push_back(next());
    } else {
      std::fprintf(
          stderr,
          "usage: fedlgc-bench-codecs [--n N] [--reps R] [--json FILE] [--codec SPEC]...\n");
      return flag == "--help" ? 0 : 2;
    }
  }
  if (a->specs.empty()) a->specs.assign(std::begin(kDefaultSpecs), std::end(kDefaultSpecs));
  return std::nullopt;
}

// Encode and decode speed (median of `reps`) and wire bits of one codec on x.
std::optional<Row> MeasureCodec(Codec& codec, const std::vector<float>& x, std::vector<float>& y,
                                int reps) {
  const size_t n = x.size();
  const double bytes = static_cast<double>(n) * 4;
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
  if (!ok) return std::nullopt;
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
  } else if (auto* g = dynamic_cast<Dgc*>(&codec)) {
    r.bound = g->BoundBits(n) / n;
  } else if (auto* p = dynamic_cast<PowerSgd*>(&codec)) {
    // Encode: P = M Q and Q = M^T P^ per power iteration, and its own decode P^ Q^T;
    // decode: P^ Q^T.
    double flops = 0;
    for (const PowerSgd::Block& b : p->blocks()) flops += 2.0 * b.rows * b.cols * b.rank;
    r.encode_gflops = (2 * p->iters() + 1) * flops / enc / 1e9;
    r.decode_gflops = flops / dec / 1e9;
  } else if (auto* g = dynamic_cast<GradiVeQ*>(&codec); g != nullptr && g->basis()) {
    // Encode U^T g and decode U c: 2 slice dims flops per slice each.
    double flops = 0;
    for (const SlicedTensor& t : g->basis()->tensors()) {
      flops += 2.0 * t.slices * g->slice() * g->dims();
    }
    r.encode_gflops = flops / enc / 1e9;
    r.decode_gflops = flops / dec / 1e9;
  }
  return r;
}

struct TopKTiming {
  size_t k = 0;
  double exact_s = 0, sampled_s = 0;
  size_t kept = 0;
  bool same = false;
};

bool WriteJson(const std::string& path, const Args& a, double memcpy_gbps,
               const std::vector<Row>& rows, const TopKTiming& t) {
  std::ofstream out(path);
  out << "{\"n\": " << a.n << ", \"reps\": " << a.reps << ", \"memcpy_gbps\": " << memcpy_gbps
      << ", \"codecs\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << (i ? ", " : "") << "{\"spec\": \"" << r.spec << "\", \"encode_gbps\": " << r.encode_gbps
        << ", \"decode_gbps\": " << r.decode_gbps << ", \"bits_per_coord\": " << r.bits
        << ", \"bound_bits_per_coord\": " << r.bound << ", \"frames\": " << r.frames;
    if (r.encode_gflops > 0) {
      out << ", \"encode_gflops\": " << r.encode_gflops
          << ", \"decode_gflops\": " << r.decode_gflops;
    }
    out << "}";
  }
  out << "], \"topk\": {\"k\": " << t.k << ", \"exact_ms\": " << t.exact_s * 1e3
      << ", \"sampled_ms\": " << t.sampled_s * 1e3 << ", \"kept\": " << t.kept
      << ", \"same_as_exact\": " << (t.same ? "true" : "false") << "}}\n";
  return static_cast<bool>(out);
}

int Main(int argc, char** argv) {
  Args a;
  if (auto code = ParseArgs(argc, argv, &a)) return *code;
  const size_t n = a.n;
  const int reps = a.reps;
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
  const ModelLayout layout = BenchLayout(n);
  for (const std::string& spec : a.specs) {
    auto made = MakeCodec(spec, &layout);
    if (auto* g = made.ok() ? dynamic_cast<GradiVeQ*>(made->get()) : nullptr) {
      auto basis = SliceBasis::Fit(layout, g->slice(), g->dims(), 1, x);
      if (!basis.ok()) {
        std::fprintf(stderr, "%s: %s\n", spec.c_str(), basis.status().ToString().c_str());
        return 2;
      }
      made = MakeCodec(spec, &layout, std::make_shared<const SliceBasis>(*std::move(basis)));
    }
    if (!made.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.c_str(), made.status().ToString().c_str());
      return 2;
    }
    std::optional<Row> r = MeasureCodec(**made, x, y, reps);
    if (!r) {
      std::fprintf(stderr, "%s: encode/decode failed\n", spec.c_str());
      return 1;
    }
    std::printf("%-58s %9.2f %9.2f %7.0f%% %7.0f%% %7.3f %7.3f\n", spec.c_str(), r->encode_gbps,
                r->decode_gbps, 100 * r->encode_gbps / memcpy_gbps,
                100 * r->decode_gbps / memcpy_gbps, r->bits, r->bound);
    if (r->encode_gflops > 0) {
      std::printf("%-58s matrix products: encode %.2f GFLOP/s, decode %.2f GFLOP/s\n", "",
                  r->encode_gflops, r->decode_gflops);
    }
    rows.push_back(*r);
  }

  // Top-k selection alone: exact nth_element vs sampled threshold, 1% of n.
  TopKTiming t;
  t.k = std::max<size_t>(1, n / 100);
  std::vector<uint32_t> exact_idx, sampled_idx;
  t.exact_s = MedianSeconds(reps, [&] { TopKExact(x, t.k, &exact_idx); });
  uint64_t seed = 0;
  t.sampled_s = MedianSeconds(reps, [&] { TopKSampled(x, t.k, 0.01, ++seed, &sampled_idx); });
  t.kept = sampled_idx.size();
  t.same = sampled_idx == exact_idx;
  std::printf(
      "\ntop-k selection, k = %zu (1%%): exact nth_element %.1f ms, sampled %.1f ms "
      "(%.1fx), kept %zu, same set as exact: %s\n",
      t.k, t.exact_s * 1e3, t.sampled_s * 1e3, t.exact_s / t.sampled_s, t.kept,
      t.same ? "yes" : "no");

  if (!a.json.empty()) {
    if (!WriteJson(a.json, a, memcpy_gbps, rows, t)) {
      std::fprintf(stderr, "cannot write %s\n", a.json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace fedlgc::codecs

int main(int argc, char** argv) { return fedlgc::codecs::Main(argc, argv); }
