// Fuzz target for the spec grammar and the registry: any text must parse or fail with a
// status, and a codec that builds must rebuild from its canonical spec.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "codecs/registry.h"

extern "C" const char* FedlgcFuzzSpec() { return ""; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto codec = fedlgc::codecs::MakeCodec(text);
  if (codec.ok()) {
    auto again = fedlgc::codecs::MakeCodec((*codec)->spec());
    if (!again.ok() || (*again)->spec() != (*codec)->spec()) std::abort();
  }
  return 0;
}
