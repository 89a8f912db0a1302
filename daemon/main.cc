// wasted: the expert I/O daemon. This version validates a container and
// works out its memory budget (--check); the shared-memory cache and the RPC
// server arrive with issue 4.
#include <chrono>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "engine/format/container.h"
#include "engine/plan/plan.h"
#include "waste/version.h"

namespace {

std::string DefaultSocket() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/wasted.sock" : "/run/wasted/wasted.sock";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wasted: owns a model's weights and shares an expert cache with its clients"};
  app.set_version_flag("--version", "wasted " WASTE_VERSION);
  std::string container, socket = DefaultSocket(), budget_text, level = "info";
  int context = 4096;
  bool check = false;
  app.add_option("CONTAINER", container, "Container directory")->required();
  app.add_option("--socket", socket, "Unix socket to listen on")->capture_default_str();
  app.add_option("--budget", budget_text,
                 "Memory for trunk + cache + daemon (default: from this machine)");
  app.add_option("--ctx", context, "Context length each client's state is planned for")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_flag("--check", check, "Validate the container and the budget, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e wasted %l: %v");

  const auto t0 = std::chrono::steady_clock::now();
  auto ct = waste::Container::Open(container);
  if (!ct.ok()) {
    spdlog::error("{}: {}", container, ct.status().message());
    return 1;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const waste::ModelConfig& c = ct->config();
  spdlog::info(
      "container {}: {} ({} layers, {} experts top-{}), {} on disk, validated in {:.1f} ms",
      container, c.architecture, c.n_layers, c.n_experts, c.top_k,
      waste::FormatSize(ct->total_bytes()), ms);

  const waste::MemoryPlan plan = waste::PlanMemory(ct->manifest(), context);
  const waste::MemoryLimit limit = waste::ProcessMemoryLimit();
  uint64_t budget;
  if (!budget_text.empty()) {
    auto b = waste::ParseSize(budget_text);
    if (!b.ok()) {
      spdlog::error("--budget: {}", b.status().message());
      return 2;
    }
    budget = *b;
    if (budget < plan.floor()) {
      spdlog::error("--budget {} is below the floor of {} (run `waste plan {}` for its parts)",
                    waste::FormatSize(budget), waste::FormatSize(plan.floor()), container);
      return 1;
    }
  } else {
    auto b = waste::DefaultBudget(plan, limit);
    if (!b.ok()) {
      spdlog::error("{}", b.status().message());
      return 1;
    }
    budget = *b;
  }
  spdlog::info("budget {} (floor {}, {} may be used: {})", waste::FormatSize(budget),
               waste::FormatSize(plan.floor()), waste::FormatSize(limit.bytes), limit.source);
  if (check) {
    spdlog::info("check passed; would listen on {}", socket);
    return 0;
  }
  spdlog::error("serving is not built yet in this version (issue 4); use --check");
  return 2;
}
