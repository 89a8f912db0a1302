// A tiny synthetic container for targets that need a real one (the record
// check, a session of a real model): $WASTE_FUZZ_CONTAINER (the libFuzzer
// build, which has no engine to write one; scripts/fuzz.sh writes it with
// `waste synth --preset tiny-kimi`), else written into a scratch directory
// removed at exit.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/format/container.h"
#ifdef WASTE_FUZZ_WITH_ENGINE
#include "engine/synth/synth.h"
#endif

namespace waste::fuzz {

struct Tiny {
  std::string dir;
  bool owned = false;
  std::unique_ptr<waste::Container> ct;
  Tiny() {
    if (const char* given = std::getenv("WASTE_FUZZ_CONTAINER")) {
      dir = given;
    } else {
#ifdef WASTE_FUZZ_WITH_ENGINE
      dir = (std::filesystem::temp_directory_path() /
             ("waste-tiny-fuzz-" + std::to_string(getpid())))
                .string();
      auto spec = waste::SynthPreset("tiny-kimi");
      if (!spec.ok() || !waste::WriteSynthetic(*spec, dir, true, 1, nullptr).ok()) std::abort();
      owned = true;
#else
      std::fprintf(stderr, "fuzz: set WASTE_FUZZ_CONTAINER to a tiny-kimi container\n");
      std::abort();
#endif
    }
    auto c = waste::Container::Open(dir);
    if (!c.ok()) std::abort();
    ct = std::make_unique<waste::Container>(std::move(*c));
  }
  ~Tiny() {
    ct.reset();
    std::error_code ec;
    if (owned) std::filesystem::remove_all(dir, ec);
  }
  static const waste::Container& Get() {
    static Tiny t;
    return *t.ct;
  }
};

}  // namespace waste::fuzz
