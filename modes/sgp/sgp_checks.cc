// SGP's end-of-run check (see sgp_checks.h).
#include "modes/sgp/sgp_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/str.h"
#include "core/model.h"
#include "edge_client/client_state.h"
#include "modes/local_model.h"
#include "modes/sgp/sgp_driver.h"

namespace fedlgc::modes {

absl::StatusOr<coordinator::RunCheck> CheckSgpMass(const coordinator::FinishedRun& run) {
  auto x0 = core::Model::Create(*run.model, run.init_seed);
  if (!x0.ok()) return x0.status();
  const std::vector<float> initial = (*x0)->GetFlat();
  const size_t d = initial.size();
  auto relay = SgpDriver::Create({}, d, run.dir + "/coordinator", run.rounds);
  if (!relay.ok()) return relay.status();
  auto [x, w] = (*relay)->MailTotals();
  std::vector<double> brought(d, 0.0);
  for (uint32_t i = 0; i < run.clients; ++i) {
    auto st = edge_client::LoadClientState(StrCat(run.dir, "/clients/client-", i, ".state"));
    absl::StatusOr<LocalModel> m =
        st.ok() ? LoadLocalModel(*st, "sgp") : absl::StatusOr<LocalModel>(st.status());
    if (!m.ok() || m->x.size() != d || m->contributed.size() != d) {
      return absl::NotFoundError(StrCat("client-", i, " has no SGP state"));
    }
    for (size_t k = 0; k < d; ++k) {
      x[k] += m->x[k];
      brought[k] += m->contributed[k];
    }
    w += m->w;
    if (st->pending && m->share.size() == d) {  // in flight
      for (size_t k = 0; k < d; ++k) x[k] += m->share[k];
      w += m->share_pw;
    }
  }
  double worst = 0, start_norm = 0, steps_norm = 0, sum_norm = 0;
  for (size_t k = 0; k < d; ++k) {
    const double start = run.clients * double(initial[k]);
    worst = std::max(worst, std::fabs(x[k] - brought[k]));
    start_norm += start * start;
    steps_norm += (brought[k] - start) * (brought[k] - start);
    sum_norm += x[k] * x[k];
  }
  const bool ok = worst < 1e-3 && std::fabs(w - run.clients) < 1e-9;
  std::printf(
      "SGP mass: |sum x| %.4f = |start + applied steps| (|start| %.4f, |steps| %.4f): largest "
      "coordinate gap %.3g; sum w %.12g for %u clients: %s\n",
      std::sqrt(sum_norm), std::sqrt(start_norm), std::sqrt(steps_norm), worst, w, run.clients,
      ok ? "conserved" : "NOT CONSERVED");
  coordinator::RunCheck check;
  check.name = "sgp_mass";
  check.figures = {{"sum_x_norm", std::sqrt(sum_norm)},
                   {"start_norm", std::sqrt(start_norm)},
                   {"steps_norm", std::sqrt(steps_norm)},
                   {"max_gap", worst},
                   {"sum_w", w}};
  check.verdict = "conserved";
  check.passed = ok;
  return check;
}

}  // namespace fedlgc::modes
