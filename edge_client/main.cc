// fedlgc-edge: an edge client of a fedlgc federation.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/flags.h"
#include "base/log.h"
#include "base/signals.h"
#include "edge_client/edge_client.h"
#include "edge_client/flags.h"
#include "modes/clients.h"

int main(int argc, char** argv) {
  fedlgc::edge_client::EdgeClientOptions o;
  CLI::App app("Trains locally and streams compressed updates to a fedlgc coordinator.",
               "fedlgc-edge");
  fedlgc::AddCommonFlags(app);
  fedlgc::edge_client::AddEdgeClientFlags(app, &o);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
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
