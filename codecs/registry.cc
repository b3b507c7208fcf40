// Registry implementation and the default registry.
#include "codecs/registry.h"

#include <cstdio>
#include <cstdlib>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/str.h"

namespace fedlgc::codecs {

absl::Status Registry::Register(CodecEntry entry) {
  if (entry.name.empty() || !entry.make) {
    return absl::InvalidArgumentError("a codec entry needs a name and a factory");
  }
  if (entries_.count(entry.name) != 0) {
    return absl::AlreadyExistsError(StrCat("codec '", entry.name, "' is already registered"));
  }
  std::string name = entry.name;
  entries_.emplace(std::move(name), std::move(entry));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Codec>> CodecContext::Create(const SpecNode& node) const {
  return registry_.Create(node, layout_, basis_);
}

absl::StatusOr<std::unique_ptr<Codec>> CodecContext::Create(std::string_view spec) const {
  return registry_.Create(spec, layout_, basis_);
}

absl::StatusOr<std::unique_ptr<Codec>> Registry::Create(
    std::string_view spec, const ModelLayout* layout,
    std::shared_ptr<const SliceBasis> basis) const {
  FEDLGC_ASSIGN_OR_RETURN(SpecNode node, ParseSpec(spec));
  return Create(node, layout, std::move(basis));
}

absl::StatusOr<std::unique_ptr<Codec>> Registry::Create(
    const SpecNode& node, const ModelLayout* layout,
    std::shared_ptr<const SliceBasis> basis) const {
  auto it = entries_.find(node.name);
  if (it == entries_.end()) {
    std::vector<std::string_view> names;
    for (const auto& [name, e] : entries_) names.push_back(name);
    return absl::NotFoundError(StrCat("unknown codec '", node.name, "' (column ", node.column,
                                      "); known: ", StrJoin(names, ", ")));
  }
  const CodecEntry& e = it->second;
  if (node.version != 0 && node.version != e.version) {
    return absl::UnimplementedError(StrCat("codec '", node.name, "' version ", node.version,
                                           " is not supported (this build speaks version ",
                                           e.version, ")"));
  }
  return e.make(node, CodecContext(*this, layout, std::move(basis)));
}

std::vector<const CodecEntry*> Registry::List() const {
  std::vector<const CodecEntry*> out;
  for (const auto& [name, e] : entries_) out.push_back(&e);
  return out;
}

const CodecEntry* Registry::Find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

const Registry& DefaultRegistry() {
  static const Registry* const kRegistry = [] {
    auto* r = new Registry();
    absl::Status st = RegisterBuiltinCodecs(*r);
    if (!st.ok()) {
      // A broken builtin table is a programming error, not bad input.
      log::Error("fedlgc", "RegisterBuiltinCodecs failed: %s", st.ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *kRegistry;
}

absl::StatusOr<std::unique_ptr<Codec>> MakeCodec(std::string_view spec, const ModelLayout* layout,
                                                 std::shared_ptr<const SliceBasis> basis) {
  return DefaultRegistry().Create(spec, layout, std::move(basis));
}

}  // namespace fedlgc::codecs
