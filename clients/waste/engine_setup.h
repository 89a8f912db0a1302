// What the compute subcommands share: opening a container with its expert
// cache, model and tokenizer under a memory budget, and the options for it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste::cli {

struct EngineOptions {
  std::string container;
  std::string budget;  // empty: this machine's default
  int threads = 0;     // 0: all usable CPUs
  int context = 4096;
  int chunk = 32;
  int readers = 4;
  bool verify = false;  // crc32 of every record read
  std::string isa;      // scalar, avx2, avx512; empty: the best available
  std::function<void(int, int, std::span<const int>)> on_route;  // routing trace sink
};

// Adds --budget, --threads, --ctx, --chunk, --readers, --verify, --isa.
void AddEngineFlags(CLI::App* cmd, EngineOptions* o);

struct Engine {
  std::unique_ptr<Container> container;
  std::unique_ptr<ExpertCache> cache;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;  // when the container has one
  uint64_t budget = 0;
  uint64_t cache_slots = 0;
};

// Opens everything; errors are printed by the caller.
Result<Engine> OpenEngine(const EngineOptions& o);

// The prompt: the argument, or a file's contents with "@FILE", or standard input with "-".
Result<std::string> ReadPrompt(const std::string& arg);

}  // namespace waste::cli
