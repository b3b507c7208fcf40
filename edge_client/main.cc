// fedlgc-edge: an edge client of a fedlgc federation.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/cli.h"
#include "core/signals.h"
#include "edge_client/edge_client.h"
#include "edge_client/flags.h"
#include "modes/clients.h"

int main(int argc, char** argv) {
  fedlgc::edge_client::EdgeClientOptions o;
  CLI::App app("Trains locally and streams compressed updates to a fedlgc coordinator.",
               "fedlgc-edge");
  fedlgc::core::AddCommonFlags(app);
  fedlgc::edge_client::AddEdgeClientFlags(app, &o);
  if (auto code = fedlgc::core::ParseFlags(app, argc, argv)) return *code;
  fedlgc::core::InitProcess();
  auto c = fedlgc::edge_client::EdgeClient::Create(o, &fedlgc::modes::MakeClientMode);
  if (!c.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(),
                 c.status().ToString().c_str());
    return 1;
  }
  absl::Status st;
  {
    fedlgc::core::StopOnSignals stop([client = c->get()] { client->Stop(); });
    st = (*c)->Run();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(), st.ToString().c_str());
    return 1;
  }
  return 0;
}
