// fedlgc-edge: an edge client of a fedlgc federation.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/flags.h"
#include "base/log.h"
#include "base/signals.h"
#include "base/str.h"
#include "core/preflight.h"
#include "edge_client/client_host.h"
#include "edge_client/edge_client.h"
#include "edge_client/flags.h"
#include "modes/clients.h"

namespace {

// The clients of --client-ids, in this process until each has ended.
int RunHost(const fedlgc::edge_client::HostFlags& h,
            const fedlgc::edge_client::EdgeClientOptions& base) {
  auto clients = fedlgc::edge_client::HostedClients(h, base);
  if (!clients.ok()) {
    fedlgc::log::Error("fedlgc-edge", "%s", clients.status().ToString().c_str());
    return 1;
  }
  fedlgc::edge_client::ClientHostOptions ho;
  ho.train_slots = h.train_slots;
  ho.metrics_listen = base.metrics_listen;
  auto host = fedlgc::edge_client::ClientHost::Create(*std::move(clients), ho,
                                                      &fedlgc::modes::MakeClientMode);
  if (!host.ok()) {
    fedlgc::log::Error("fedlgc-edge", "%s", host.status().ToString().c_str());
    return 1;
  }
  absl::Status st;
  {
    fedlgc::StopOnSignals stop([host = host->get()] { host->Stop(); });
    st = (*host)->Run();
  }
  if (!st.ok()) {
    fedlgc::log::Error("fedlgc-edge", "%s", st.ToString().c_str());
    return 1;
  }
  return 0;
}

// --check: the client, or with --client-ids the first of them (the others differ in their
// identity and shard only).
int Check(const fedlgc::edge_client::HostFlags& h,
          const fedlgc::edge_client::EdgeClientOptions& base) {
  fedlgc::core::Preflight p("fedlgc-edge");
  if (h.clients.empty()) {
    fedlgc::edge_client::EdgeClient::Check(base, &p);
    return p.Finish();
  }
  auto clients = fedlgc::edge_client::HostedClients(h, base);
  if (p.Report("client ids", clients.status(),
               clients.ok() ? fedlgc::StrCat(clients->size(), " clients; the first checked below")
                            : "")) {
    fedlgc::edge_client::EdgeClient::Check(clients->front(), &p);
  }
  return p.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  fedlgc::edge_client::EdgeClientOptions o;
  fedlgc::edge_client::HostFlags h;
  bool check = false;
  CLI::App app("Trains locally and streams compressed updates to a fedlgc coordinator.",
               "fedlgc-edge");
  fedlgc::AddCommonFlags(app);
  fedlgc::AddCheckFlag(app, &check);
  fedlgc::edge_client::AddEdgeClientFlags(app, &o);
  fedlgc::edge_client::AddHostFlags(app, &h);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  if (check) return Check(h, o);
  if (!h.clients.empty()) return RunHost(h, o);
  auto c = fedlgc::edge_client::EdgeClient::Create(o, &fedlgc::modes::MakeClientMode);
  if (!c.ok()) {
    fedlgc::log::Error("fedlgc-edge " + o.client_id, "%s", c.status().ToString().c_str());
    return 1;
  }
  absl::Status st;
  {
    fedlgc::StopOnSignals stop([client = c->get()] { client->Stop(); });
    st = (*c)->Run();
  }
  if (!st.ok()) {
    fedlgc::log::Error("fedlgc-edge " + o.client_id, "%s", st.ToString().c_str());
    return 1;
  }
  return 0;
}
