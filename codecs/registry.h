// Name -> factory registry of codecs. Built explicitly: RegisterBuiltinCodecs() adds the
// codecs this library ships, and DefaultRegistry() builds one on first use. There is no
// static self-registration, so a static link never drops a codec.
#ifndef FEDLGC_CODECS_REGISTRY_H_
#define FEDLGC_CODECS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/round_kind.h"

namespace fedlgc::codecs {

class Registry;
class SliceBasis;  // gradiveq.h

// What a factory has besides its spec: the registry, for nested codecs, the model's
// layout when the caller has one (codecs that work per tensor need it; others ignore it)
// and GradiVeQ's bases when the job has fitted them (gradiveq.h; others ignore them).
class CodecContext {
 public:
  CodecContext(const Registry& registry, const ModelLayout* layout,
               std::shared_ptr<const SliceBasis> basis = nullptr)
      : registry_(registry), layout_(layout), basis_(std::move(basis)) {}
  const Registry& registry() const { return registry_; }
  const ModelLayout* layout() const { return layout_; }
  const std::shared_ptr<const SliceBasis>& basis() const { return basis_; }
  // Builds a nested codec with the same layout and bases.
  absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node) const;
  absl::StatusOr<std::unique_ptr<Codec>> Create(std::string_view spec) const;

 private:
  const Registry& registry_;
  const ModelLayout* layout_;
  std::shared_ptr<const SliceBasis> basis_;
};

using CodecFactory =
    std::function<absl::StatusOr<std::unique_ptr<Codec>>(const SpecNode&, const CodecContext&)>;

struct CodecEntry {
  std::string name;
  uint32_t version = 1;  // wire version: bumped whenever the byte format changes
  std::string summary;   // one line for --help listings
  CodecFactory make;
  // Specs that build (with a model layout when they need one) and together cover the
  // codec's main parameters and the codecs it wraps. The shared codec test suites run
  // every example of every codec, so a codec registered without examples fails them.
  std::vector<std::string> examples;
  // The factory refuses to build without the model's layout (a per-tensor codec): its
  // examples, and any spec that nests it, need one.
  bool needs_layout = false;
  // What the codec, as a spec node, needs of the round it is sent in (round_kind.h): a
  // seed the round names, a shared scale, served bases, two phases. Null: nothing; the
  // codecs it nests declare their own.
  RoundNeedsFn round_needs = nullptr;
};

// Thread-safety: Register must finish before the registry is shared; Create and List are
// const and thread-safe afterwards.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Fails with AlreadyExists on a duplicate name.
  absl::Status Register(CodecEntry entry);

  // Builds a codec from spec text or a parsed node. A version in the spec must equal the
  // registered one (frames from another wire version are refused, not misread). `layout`
  // (may be null) is the model's, for codecs that need it; it must outlive the call only.
  // `basis` (may be null): GradiVeQ's fitted bases, shared with the codec.
  absl::StatusOr<std::unique_ptr<Codec>> Create(
      std::string_view spec, const ModelLayout* layout = nullptr,
      std::shared_ptr<const SliceBasis> basis = nullptr) const;
  absl::StatusOr<std::unique_ptr<Codec>> Create(
      const SpecNode& node, const ModelLayout* layout = nullptr,
      std::shared_ptr<const SliceBasis> basis = nullptr) const;

  std::vector<const CodecEntry*> List() const;
  // The entry registered as `name`; null when none is.
  const CodecEntry* Find(std::string_view name) const;

 private:
  std::map<std::string, CodecEntry, std::less<>> entries_;
};

// Adds every codec of this library; fails if any name is already taken.
absl::Status RegisterBuiltinCodecs(Registry& registry);

// A registry holding the builtin codecs, built on first use (thread-safe).
const Registry& DefaultRegistry();

// Shorthand for DefaultRegistry().Create(spec, layout, basis).
absl::StatusOr<std::unique_ptr<Codec>> MakeCodec(std::string_view spec,
                                                 const ModelLayout* layout = nullptr,
                                                 std::shared_ptr<const SliceBasis> basis = nullptr);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_REGISTRY_H_
