// fedlgc-bench-lgc-probe: measurements for LGC's design on saved updates (the local updates
// a real run wrote with fedlgc-sim --dump-updates DIR). It replays LGC's compact codes
// (modes/lgc/lgc_codes.h) over them with exact error feedback, the leader rotating over
// the clients, and measures:
//   1. the lossless stage: zstd over each leader body and follower correction;
//   2. block supports: the energy of the top k/B aligned blocks of B coordinates against
//      element top-k at the same coordinate count, and the bytes of their index sets;
//   3. a temporal predictor: how well what the coordinator rebuilt from a client last round
//      predicts its values this round, against the leader's decoded values (the prediction
//      LGC uses), and both together;
//   4. the autoencoder against the cells at equal bytes: the autoencoder (autoencoder.h)
//      trains on the first rounds' rebuilds, as the coordinator does, then codes the later
//      rounds' leader values; its reconstruction and its prediction of the followers are
//      compared with the cells' (--ae 0 skips it: on wide supports it takes half an hour);
//   5. a learned entropy model (modes/lgc/lgc_entropy.h) in place of zstd: the support as a
//      context-coded bitmap, the cells and the corrections with context-adaptive
//      probabilities, each body from fresh probabilities, from those trained on the past
//      rounds' bodies, and (the leader's) with last round's support as a context; every
//      stream is decoded again and checked;
//   6. a learned follower predictor (lgc_predictor.h): a small network trained on the
//      first rounds' rebuilds predicts each follower's values from the leader's cells, its
//      own last rebuild and the coordinate's place, in place of the cells alone; on the
//      later rounds, the followers' miss and their rebuild error at the same bytes.
//   bench/lgc_probe DIR [--ratios 0.03,0.05] [--bits 2] [--train-rounds 10] [--ae-steps 120]
//                       [--ae 0|1] [--predictor-steps 600]
#include <zstd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "autoencoder/autoencoder.h"
#include "base/file.h"
#include "base/str.h"
#include "bench/lgc_predictor.h"
#include "codecs/dense_codec.h"
#include "codecs/elias_fano.h"
#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "modes/lgc/lgc_codes.h"
#include "modes/lgc/lgc_entropy.h"
#include "modes/lgc/lgc_payload.h"

namespace {

namespace ae = fedlgc::autoencoder;
namespace lgc = fedlgc::lgc;
using fedlgc::StrCat;

struct Options {
  std::string dir;
  std::vector<double> ratios = {0.03, 0.05};
  int bits = 2;
  uint32_t train_rounds = 10;
  uint32_t ae_steps = 120;
  std::string latent = "qsgd(bits=8,bucket=64)";
  bool ae = true;
  int predictor_steps = 600;
};

// updates[c][r]: client c's update of round r + 1.
using Updates = std::vector<std::vector<std::vector<float>>>;

Updates Load(const std::string& dir, std::vector<std::string>* ids) {
  std::vector<std::string> clients;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory()) clients.push_back(e.path().filename().string());
  }
  std::sort(clients.begin(), clients.end());
  Updates u;
  size_t rounds = SIZE_MAX;
  for (const std::string& c : clients) {
    std::vector<std::vector<float>> mine;
    for (uint64_t r = 1;; ++r) {
      auto bytes = fedlgc::ReadFileIfExists(StrCat(dir, "/", c, "/r", r, ".f32"));
      if (!bytes.ok() || !bytes->has_value()) break;
      auto v = fedlgc::core::FloatsFromBytes(**bytes, (*bytes)->size() / 4, "update");
      if (!v.ok()) break;
      mine.push_back(*std::move(v));
    }
    rounds = std::min(rounds, mine.size());
    u.push_back(std::move(mine));
  }
  for (auto& mine : u) mine.resize(rounds == SIZE_MAX ? 0 : rounds);
  *ids = clients;
  return u;
}

double Dot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double Cos(std::span<const float> a, std::span<const float> b) {
  const double d = std::sqrt(Dot(a, a) * Dot(b, b));
  return d > 0 ? Dot(a, b) / d : 0;
}
// |v - fit|^2 / |v|^2 for the least-squares fit of v on the columns in `basis`.
double MissFraction(std::span<const float> v, const std::vector<std::vector<float>>& basis) {
  const double vv = Dot(v, v);
  if (vv == 0) return 0;
  if (basis.size() == 1) {
    const double c = Cos(v, basis[0]);
    return 1 - c * c;
  }
  // Two columns: the 2x2 normal equations.
  const double a11 = Dot(basis[0], basis[0]), a12 = Dot(basis[0], basis[1]),
               a22 = Dot(basis[1], basis[1]), b1 = Dot(v, basis[0]), b2 = Dot(v, basis[1]);
  const double det = a11 * a22 - a12 * a12;
  if (det <= 1e-30 * a11 * a22) return MissFraction(v, {basis[0]});
  const double x1 = (a22 * b1 - a12 * b2) / det, x2 = (a11 * b2 - a12 * b1) / det;
  return 1 - (x1 * b1 + x2 * b2) / vv;
}

size_t Zstd(const std::string& body, int level) {
  std::string out(ZSTD_compressBound(body.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), body.data(), body.size(), level);
  return ZSTD_isError(n) ? body.size() : n;
}

std::vector<float> Permute(std::span<const float> v, std::span<const uint32_t> order) {
  std::vector<float> out(order.size());
  for (size_t j = 0; j < order.size(); ++j) out[j] = v[order[j]];
  return out;
}

struct Mean {
  double sum = 0;
  size_t n = 0;
  void Add(double x) { sum += x, ++n; }
  double Get() const { return n ? sum / static_cast<double>(n) : NAN; }
};

// One LGC test round for the autoencoder: the leader's values, their cells and the
// followers' values, in the order of the cells (the leader's scaled by its RMS).
struct Test {
  std::string leader;
  std::vector<float> leader_values, cells;
  std::vector<std::pair<std::string, std::vector<float>>> followers;
};

// What the replay of one support width measured.
struct Replay {
  size_t k = 0;
  size_t leader_raw = 0, follower_raw = 0;
  size_t leader_z3 = 0, follower_z3 = 0, leader_z19 = 0, follower_z19 = 0;
  std::vector<size_t> blocks = {1, 2, 4, 8, 16, 32, 64};
  std::vector<Mean> block_energy = std::vector<Mean>(7), block_bytes = std::vector<Mean>(7);
  Mean cells_err, miss_leader, miss_temporal, miss_both, cos_temporal;
  // The learned entropy model's bodies: headers as the bodies carry them, and the streams.
  size_t leader_fresh = 0, leader_learned = 0, leader_prior = 0;
  size_t follower_fresh = 0, follower_learned = 0, follower_alone = 0;
  // The learned predictor on the rounds after the training rounds.
  Mean miss_cells_test, miss_net, err_cells_test, err_net;
  std::pair<double, double> predictor_loss{NAN, NAN};
  size_t predictor_rows = 0;
  // Autoencoder: training batches (clients' values in the order of the leader's decoded
  // values, RMS-scaled) of the first rounds; the later rounds for the test.
  std::vector<std::vector<ae::Sample>> batches;
  std::vector<Test> tests;
};

// Block supports on a leader's u: the energy of its top k/B aligned blocks of B coordinates
// and the bytes of their index set, for each B of r->blocks.
void MeasureBlocks(std::span<const float> u, size_t k, Replay* r) {
  const size_t dim = u.size();
  const double total = Dot(u, u);
  for (size_t b = 0; b < r->blocks.size(); ++b) {
    const size_t bs = r->blocks[b], nb = (dim + bs - 1) / bs, keep = (k + bs - 1) / bs;
    std::vector<float> energy(nb, 0.0f);
    for (size_t i = 0; i < dim; ++i) energy[i / bs] += u[i] * u[i];
    std::nth_element(energy.begin(), energy.begin() + (keep - 1), energy.end(),
                     std::greater<float>());
    const double e = std::accumulate(energy.begin(), energy.begin() + keep, 0.0);
    r->block_energy[b].Add(total > 0 ? e / total : 0);
    r->block_bytes[b].Add(static_cast<double>(fedlgc::codecs::EliasFanoBytes(keep, nb)));
  }
}

// The state the learned designs keep across rounds of one replay.
struct Learned {
  lgc::LeaderModels leader = lgc::LeaderModels::Fresh();  // trained on past leader bodies
  lgc::LeaderModels leader_with_prior = lgc::LeaderModels::Fresh();
  std::vector<uint8_t> last_support;              // a bitmap of dim, or empty
  lgc::EntropyModel correction, correction_next;  // this round's prior, and training
  fedlgc::bench::FollowerPredictor predictor;
  bool predictor_trained = false;
};

// A leader body with its support and cells range-coded from `models` (trained on it):
// u32 k, the 8 means and the stream; decoded again from a copy of the models and checked.
size_t CodedLeader(std::span<const uint32_t> support, std::span<const uint8_t> codes, uint64_t dim,
                   std::span<const uint8_t> prior, lgc::LeaderModels* models) {
  lgc::LeaderModels before = *models;
  const std::string stream = lgc::EncodeSupportAndCells(support, codes, dim, prior, models);
  auto back =
      lgc::DecodeSupportAndCells({reinterpret_cast<const uint8_t*>(stream.data()), stream.size()},
                                 support.size(), dim, prior, &before);
  if (!back.ok() || !std::equal(back->support.begin(), back->support.end(), support.begin()) ||
      !std::equal(back->codes.begin(), back->codes.end(), codes.begin())) {
    std::fprintf(stderr, "lgc_probe: a leader stream did not decode to itself\n");
    std::abort();
  }
  return sizeof(uint32_t) + lgc::kCells * sizeof(float) + stream.size();
}

// A correction body with its codes range-coded, the header and steps as lgc-correction/2's.
size_t CodedCorrection(const lgc::BitCorrection& c, std::span<const uint8_t> leader_codes,
                       lgc::EntropyModel* model) {
  lgc::EntropyModel before = *model;
  const std::string stream = lgc::EncodeCorrectionCodes(c.codes, c.bits, leader_codes, model);
  auto back =
      lgc::DecodeCorrectionCodes({reinterpret_cast<const uint8_t*>(stream.data()), stream.size()},
                                 c.codes.size(), c.bits, leader_codes, &before);
  if (!back.ok() || *back != c.codes) {
    std::fprintf(stderr, "lgc_probe: a correction stream did not decode to itself\n");
    std::abort();
  }
  return 3 * sizeof(uint32_t) + 1 + sizeof(float) * c.steps.size() + stream.size();
}

double RelativeError(std::span<const float> v, std::span<const float> sent) {
  double d = 0;
  for (size_t j = 0; j < v.size(); ++j) d += double(v[j] - sent[j]) * (v[j] - sent[j]);
  const double vv = Dot(v, v);
  return vv > 0 ? std::sqrt(d / vv) : 0;
}

// What a follower with values `v` on the support sends against the leader's cells `p`
// (its bit correction), counting its bytes and, after the first round (r > 0), how
// often the leader's cells and its own last values `q` miss its values; the learned
// designs' bytes and, in round `r`, the predictor's examples or its test.
std::vector<float> FollowerSends(const Options& o, const std::vector<float>& v,
                                 const std::vector<float>& p, const std::vector<float>& q,
                                 std::span<const uint32_t> support, uint64_t dim,
                                 std::span<const uint8_t> leader_codes, size_t r, Learned* L,
                                 Replay* R) {
  lgc::BitCorrection corr = lgc::CorrectBits(v, p, o.bits);
  // CorrectBits makes only codes its encoder takes.
  const std::string body = lgc::EncodeBitCorrection(corr).value();
  R->follower_raw += body.size();
  R->follower_z3 += Zstd(body, 3);
  R->follower_z19 += Zstd(body, 19);
  lgc::EntropyModel fresh = lgc::FreshCorrectionModel(o.bits), learned = L->correction;
  R->follower_fresh += CodedCorrection(corr, leader_codes, &fresh);
  R->follower_learned += CodedCorrection(corr, leader_codes, &learned);
  lgc::EntropyModel alone = lgc::FreshCorrectionModel(o.bits);
  R->follower_alone += CodedCorrection(corr, {}, &alone);
  CodedCorrection(corr, leader_codes, &L->correction_next);  // the coordinator learns it
  if (r > 0) {
    R->miss_leader.Add(MissFraction(v, {p}));
    R->miss_temporal.Add(MissFraction(v, {q}));
    R->miss_both.Add(MissFraction(v, {p, q}));
    R->cos_temporal.Add(std::fabs(Cos(v, q)));
    const std::vector<float> features =
        fedlgc::bench::FollowerPredictor::Features(p, q, support, dim);
    if (r < o.train_rounds) {
      L->predictor.Add(features, corr.sent);
    } else if (o.predictor_steps > 0) {
      if (!L->predictor_trained) {
        R->predictor_rows = L->predictor.rows();
        R->predictor_loss = L->predictor.Train(o.predictor_steps, 1);
        L->predictor_trained = true;
      }
      const std::vector<float> pred = L->predictor.Predict(features);
      R->miss_cells_test.Add(MissFraction(v, {p}));
      R->miss_net.Add(MissFraction(v, {pred}));
      R->err_cells_test.Add(RelativeError(v, corr.sent));
      R->err_net.Add(RelativeError(v, lgc::CorrectBits(v, pred, o.bits).sent));
    }
  }
  return std::move(corr.sent);
}

// What the leader sends for its values `vl` on `support` (its decoded cells into *p),
// counting its body's bytes plain, with zstd and with the learned entropy model, and its
// cells' error; returns the body's cell codes.
std::vector<uint8_t> LeaderSends(std::span<const uint32_t> support, const std::vector<float>& vl,
                                 uint64_t dim, std::vector<float>* p, Learned* L, Replay* R) {
  const std::string lbody = lgc::EncodeLeaderCells(support, vl, dim, p);
  R->leader_raw += lbody.size();
  R->leader_z3 += Zstd(lbody, 3);
  R->leader_z19 += Zstd(lbody, 19);
  const std::vector<uint8_t> lcodes = lgc::LeaderCellCodes(lbody, support.size(), dim);
  lgc::LeaderModels fresh = lgc::LeaderModels::Fresh();
  R->leader_fresh += CodedLeader(support, lcodes, dim, {}, &fresh);
  R->leader_learned += CodedLeader(support, lcodes, dim, {}, &L->leader);
  R->leader_prior += CodedLeader(support, lcodes, dim, L->last_support, &L->leader_with_prior);
  L->last_support.assign(dim, 0);
  for (uint32_t i : support) L->last_support[i] = 1;
  std::vector<float> diff(vl);
  for (size_t j = 0; j < vl.size(); ++j) diff[j] -= (*p)[j];
  R->cells_err.Add(std::sqrt(Dot(diff, diff) / Dot(vl, vl)));
  return lcodes;
}

// The compact codes with exact error feedback over every round of `updates`, the leader
// rotating over the clients, at a support of `ratio`.
Replay ReplayWidth(const Options& o, const Updates& updates, const std::vector<std::string>& ids,
                   double ratio) {
  const size_t n = updates.size(), rounds = updates[0].size(), dim = updates[0][0].size();
  Replay R;
  const size_t k = R.k = std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * dim)));
  std::vector<std::vector<float>> residual(n, std::vector<float>(dim, 0.0f));
  std::vector<std::vector<float>> rebuilt(n, std::vector<float>(dim, 0.0f));  // last round's
  Learned L;
  L.correction = L.correction_next = lgc::FreshCorrectionModel(o.bits);
  for (size_t r = 0; r < rounds; ++r) {
    const size_t lead = r % n;
    std::vector<std::vector<float>> u(n);
    for (size_t c = 0; c < n; ++c) {
      u[c] = updates[c][r];
      for (size_t i = 0; i < dim; ++i) u[c][i] += residual[c][i];
    }
    const std::vector<uint32_t> support = lgc::SelectSupportSet(u[lead], k);
    const std::vector<float> vl = lgc::Gather(u[lead], support);
    std::vector<float> p;
    const std::vector<uint8_t> lcodes = LeaderSends(support, vl, dim, &p, &L, &R);
    MeasureBlocks(u[lead], k, &R);
    const std::vector<uint32_t> order = lgc::ValueOrder(p);
    std::vector<ae::Sample> batch;
    Test test{ids[lead], {}, {}, {}};
    const float lscale = lgc::RmsScale(vl);
    for (size_t c = 0; c < n; ++c) {
      std::vector<float> sent;
      const std::vector<float> v = lgc::Gather(u[c], support);
      if (c == lead) {
        sent = p;
      } else {
        sent = FollowerSends(o, v, p, lgc::Gather(rebuilt[c], support), support, dim, lcodes, r, &L,
                             &R);
      }
      // Exact error feedback: what is not sent stays.
      residual[c] = u[c];
      std::fill(rebuilt[c].begin(), rebuilt[c].end(), 0.0f);
      for (size_t j = 0; j < k; ++j) {
        residual[c][support[j]] -= sent[j];
        rebuilt[c][support[j]] = sent[j];
      }
      std::vector<float> x = Permute(sent, order);
      const float s = lgc::RmsScale(x);
      for (float& y : x) y /= s;
      if (r < o.train_rounds) {
        batch.push_back({ids[c], x, std::vector<float>(k, 0.0f)});
      } else if (c == lead) {
        test.leader_values = Permute(vl, order);
        for (float& y : test.leader_values) y /= lscale;
        test.cells = Permute(p, order);
        for (float& y : test.cells) y /= lscale;
      } else {
        test.followers.push_back({ids[c], Permute(v, order)});
      }
    }
    L.correction = L.correction_next;  // shipped with the next round's RoundStart
    if (r < o.train_rounds) {
      R.batches.push_back(std::move(batch));
    } else {
      R.tests.push_back(std::move(test));
    }
  }
  return R;
}

void PrintReplay(const Replay& r) {
  std::printf("| payload | bytes over the run | zstd -3 | zstd -19 | saving (-19) |\n");
  std::printf("|---|---|---|---|---|\n");
  std::printf("| leader bodies (lgc-leader/2) | %zu | %zu | %zu | %.1f%% |\n", r.leader_raw,
              r.leader_z3, r.leader_z19, 100.0 * (1.0 - double(r.leader_z19) / r.leader_raw));
  std::printf("| follower corrections (lgc-correction/2) | %zu | %zu | %zu | %.1f%% |\n\n",
              r.follower_raw, r.follower_z3, r.follower_z19,
              100.0 * (1.0 - double(r.follower_z19) / r.follower_raw));
  std::printf(
      "| block of B coordinates | energy of top k/B blocks / element top-k's | index set bytes "
      "|\n");
  std::printf("|---|---|---|\n");
  for (size_t b = 0; b < r.blocks.size(); ++b) {
    std::printf("| %zu | %.3f | %.0f |\n", r.blocks[b],
                r.block_energy[b].Get() / r.block_energy[0].Get(), r.block_bytes[b].Get());
  }
  std::printf("\n(element top-k keeps %.3f of the leader's |u|^2)\n\n", r.block_energy[0].Get());
  std::printf("| follower prediction | miss |v - fit|^2 / |v|^2, mean |\n|---|---|\n");
  std::printf("| leader's cells (LGC today) | %.3f |\n", r.miss_leader.Get());
  std::printf("| own rebuild of last round (temporal; mean |cos| %.3f) | %.3f |\n",
              r.cos_temporal.Get(), r.miss_temporal.Get());
  std::printf("| both, least squares | %.3f |\n\n", r.miss_both.Get());
  const auto pct = [](size_t a, size_t b) { return 100.0 * (1.0 - double(a) / double(b)); };
  std::printf("learned entropy model (lossless) against zstd -3 (what LGC sends today):\n\n");
  std::printf(
      "| payload | zstd -3 | fresh model | model trained on past rounds | + last round's support "
      "|\n");
  std::printf("|---|---|---|---|---|\n");
  std::printf("| leader bodies | %zu | %zu (%+.1f%%) | %zu (%+.1f%%) | %zu (%+.1f%%) |\n",
              r.leader_z3, r.leader_fresh, -pct(r.leader_fresh, r.leader_z3), r.leader_learned,
              -pct(r.leader_learned, r.leader_z3), r.leader_prior,
              -pct(r.leader_prior, r.leader_z3));
  std::printf("| follower corrections | %zu | %zu (%+.1f%%) | %zu (%+.1f%%) | - |\n", r.follower_z3,
              r.follower_fresh, -pct(r.follower_fresh, r.follower_z3), r.follower_learned,
              -pct(r.follower_learned, r.follower_z3));
  std::printf(
      "| follower corrections, without the leader's cells as context | %zu | %zu (%+.1f%%) | - | - "
      "|\n",
      r.follower_z3, r.follower_alone, -pct(r.follower_alone, r.follower_z3));
  const size_t z3 = r.leader_z3 + r.follower_z3;
  std::printf("| all | %zu | %zu (%+.1f%%) | %zu (%+.1f%%) | %zu (%+.1f%%) |\n", z3,
              r.leader_fresh + r.follower_fresh, -pct(r.leader_fresh + r.follower_fresh, z3),
              r.leader_learned + r.follower_learned,
              -pct(r.leader_learned + r.follower_learned, z3), r.leader_prior + r.follower_learned,
              -pct(r.leader_prior + r.follower_learned, z3));
  const size_t sent = r.leader_fresh + r.follower_alone;
  std::printf(
      "| as LGC sends them (entropy=1: fresh models, followers without the leader's "
      "cells) | %zu | %zu (%+.1f%%) | - | - |\n\n",
      z3, sent, -pct(sent, z3));
  if (r.miss_net.n > 0) {
    std::printf(
        "learned follower predictor: %zu examples, training MSE %.4f -> %.4f; on the "
        "later rounds, at the same bytes:\n\n",
        r.predictor_rows, r.predictor_loss.first, r.predictor_loss.second);
    std::printf(
        "| follower prediction | miss |v - fit|^2 / |v|^2 | rebuild error |v - sent| / |v| |\n");
    std::printf("|---|---|---|\n");
    std::printf("| leader's cells, least-squares gain (LGC today) | %.4f | %.4f |\n",
                r.miss_cells_test.Get(), r.err_cells_test.Get());
    std::printf("| learned predictor | %.4f | %.4f |\n\n", r.miss_net.Get(), r.err_net.Get());
  }
}

// The autoencoder's figures on the test rounds, beside the cells'.
struct AeFigures {
  Mean ae_err, ae_err_q, cells_err, ae_miss, cells_miss;
};

// Reconstruction of each test round's leader values (with a float32 latent and with the
// latent through `latent`) and prediction of its followers', by `net` and by the cells.
absl::Status MeasureOnTests(ae::Autoencoder& net, const fedlgc::codecs::DenseCodec& latent,
                            const std::vector<Test>& tests, size_t k, AeFigures* f) {
  const auto quantize = [&](std::span<const float> z) -> absl::StatusOr<std::vector<float>> {
    std::string body;
    fedlgc::codecs::BodyContext ctx;
    ctx.seed = 1;
    if (absl::Status st = latent.EncodeBody(z, ctx, &body); !st.ok()) return st;
    std::vector<float> out(z.size());
    const auto* b = reinterpret_cast<const uint8_t*>(body.data());
    if (absl::Status st = latent.DecodeBody({b, body.size()}, out); !st.ok()) return st;
    return out;
  };
  for (const Test& t : tests) {
    auto z = net.Encode(t.leader_values);
    if (!z.ok()) return z.status();
    const std::vector<float> zero(k, 0.0f);
    auto rec = net.Decode(t.leader, *z, zero);
    auto zq = quantize(*z);
    if (!rec.ok()) return rec.status();
    if (!zq.ok()) return zq.status();
    auto rec_q = net.Decode(t.leader, *zq, zero);
    if (!rec_q.ok()) return rec_q.status();
    const auto rel = [&](std::span<const float> x) {
      // after the least-squares gain, as a follower would fit it
      return std::sqrt(MissFraction(t.leader_values, {std::vector<float>(x.begin(), x.end())}));
    };
    f->ae_err.Add(rel(*rec));
    f->ae_err_q.Add(rel(*rec_q));
    f->cells_err.Add(rel(t.cells));
    for (const auto& [id, v] : t.followers) {
      auto pred = net.Decode(id, *z, zero);
      if (!pred.ok()) return pred.status();
      f->ae_miss.Add(MissFraction(v, {*pred}));
      f->cells_miss.Add(MissFraction(v, {t.cells}));
    }
  }
  return absl::OkStatus();
}

// The autoencoder trained on `batches` as the coordinator would, against the cells on
// `tests`: reconstruction of the leader's values and prediction of the followers'.
int CompareAutoencoder(const Options& o, size_t k,
                       const std::vector<std::vector<ae::Sample>>& batches,
                       const std::vector<Test>& tests) {
  // The autoencoder: trained on the first rounds' rebuilds, as the coordinator does.
  if (batches.empty() || tests.empty() || k < static_cast<size_t>(ae::kMinLength)) return 0;
  ae::AeOptions aeo;
  aeo.optimizer = "adam";
  aeo.lr = 1e-3;
  aeo.device = "cpu";
  auto net = ae::Autoencoder::Create(static_cast<int64_t>(k), aeo);
  if (!net.ok()) {
    std::fprintf(stderr, "lgc_probe: %s\n", net.status().ToString().c_str());
    return 1;
  }
  ae::Losses first, last;
  for (uint32_t s = 0; s < o.ae_steps; ++s) {
    auto l = (*net)->TrainStep(batches[s % batches.size()], s);
    if (!l.ok()) return 1;
    if (s == 0) first = *l;
    last = *l;
  }
  auto made = fedlgc::codecs::MakeCodec(o.latent);
  const auto* latent_codec =
      made.ok() ? dynamic_cast<const fedlgc::codecs::DenseCodec*>(made->get()) : nullptr;
  if (latent_codec == nullptr) {
    std::fprintf(stderr, "lgc_probe: --latent %s is not a dense codec\n", o.latent.c_str());
    return 1;
  }
  AeFigures f;
  if (absl::Status st = MeasureOnTests(**net, *latent_codec, tests, k, &f); !st.ok()) {
    std::fprintf(stderr, "lgc_probe: %s\n", st.ToString().c_str());
    return 1;
  }
  const size_t cells_bytes = lgc::CellsBytes(k);
  const size_t latent_floats = static_cast<size_t>((*net)->latent_size());
  const uint64_t qbytes = latent_codec->MaxBodyBytes(latent_floats);
  std::printf(
      "autoencoder: %u steps on %zu rounds' rebuilds (loss %.3f -> %.3f), tested on %zu "
      "later rounds\n\n",
      o.ae_steps, batches.size(), first.reconstruction, last.reconstruction, tests.size());
  std::printf(
      "| code of the leader's values | bytes a round | relative error (after the gain) | "
      "followers' miss |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| cells (sign + 3-bit log-magnitude, 8 means) | %zu | %.3f | %.3f |\n", cells_bytes,
              f.cells_err.Get(), f.cells_miss.Get());
  std::printf("| autoencoder, float32 latent | %zu | %.3f | %.3f |\n", latent_floats * 4,
              f.ae_err.Get(), f.ae_miss.Get());
  std::printf("| autoencoder, latent=%s | %zu | %.3f | - |\n\n", o.latent.c_str(),
              static_cast<size_t>(qbytes), f.ae_err_q.Get());
  std::printf(
      "(the autoencoder reads the values in the cells' order, which it gets for free "
      "here; without the cells it would need that order sent)\n\n");
  return 0;
}

int Run(const Options& o) {
  std::vector<std::string> ids;
  const Updates updates = Load(o.dir, &ids);
  const size_t n = updates.size();
  const size_t rounds = n ? updates[0].size() : 0;
  if (n < 2 || rounds < 2) {
    std::fprintf(stderr, "lgc_probe: %s: need two clients with two rounds each\n", o.dir.c_str());
    return 1;
  }
  const size_t dim = updates[0][0].size();
  std::printf("# %s: %zu clients, %zu rounds, %zu coordinates, %d-bit corrections\n\n",
              o.dir.c_str(), n, rounds, dim, o.bits);
  // Temporal correlation of the raw updates: each client's round r against its round r - 1.
  Mean raw_cos;
  for (size_t c = 0; c < n; ++c) {
    for (size_t r = 1; r < rounds; ++r) raw_cos.Add(Cos(updates[c][r], updates[c][r - 1]));
  }
  std::printf("raw updates, cos(round r, round r-1) of one client, mean: %.3f\n\n", raw_cos.Get());

  for (double ratio : o.ratios) {
    const Replay r = ReplayWidth(o, updates, ids, ratio);
    std::printf("## support %.1f%% (k = %zu)\n\n", 100 * ratio, r.k);
    PrintReplay(r);
    if (!o.ae) continue;
    if (int rc = CompareAutoencoder(o, r.k, r.batches, r.tests); rc != 0) return rc;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  CLI::App app{"LGC design measurements on saved updates (fedlgc-sim --dump-updates)"};
  app.add_option("dir", o.dir, "the dump folder: <client>/r<round>.f32")->required();
  app.add_option("--ratios", o.ratios, "support widths")->delimiter(',');
  app.add_option("--bits", o.bits, "correction bits: 1, 2 or 4");
  app.add_option("--train-rounds", o.train_rounds, "rounds the autoencoder trains on");
  app.add_option("--ae-steps", o.ae_steps, "autoencoder steps");
  app.add_option("--latent", o.latent, "dense codec of the latent");
  app.add_option("--ae", o.ae, "1: train and test the autoencoder (slow on wide supports)");
  app.add_option("--predictor-steps", o.predictor_steps,
                 "learned predictor's Adam steps (0: none)");
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
