// fedlgc-edge: an edge client of a fedlgc federation.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "core/cli.h"
#include "edge_client/edge_client.h"
#include "edge_client/flags.h"
#include "modes/clients.h"

namespace {
fedlgc::edge_client::EdgeClient* g_client = nullptr;
void OnSignal(int) {
  if (g_client) g_client->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  fedlgc::edge_client::EdgeClientOptions o;
  CLI::App app("Trains locally and streams compressed updates to a fedlgc coordinator.",
               "fedlgc-edge");
  fedlgc::core::AddCommonFlags(app);
  fedlgc::edge_client::AddEdgeClientFlags(app, &o);
  if (auto code = fedlgc::core::ParseFlags(app, argc, argv)) return *code;
  auto c = fedlgc::edge_client::EdgeClient::Create(o, &fedlgc::modes::MakeClientMode);
  if (!c.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(),
                 c.status().ToString().c_str());
    return 1;
  }
  g_client = c->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto st = (*c)->Run();
  g_client = nullptr;
  if (!st.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(), st.ToString().c_str());
    return 1;
  }
  return 0;
}
