// waste synth: write a synthetic container from a preset or a spec file.
#include <thread>

#include <memory>
#include <nlohmann/json.hpp>

#include "clients/waste/commands.h"
#include "engine/format/container.h"
#include "engine/plan/plan.h"
#include "engine/synth/synth.h"

namespace waste::cli {
namespace {

struct Options {
  std::string out, preset = "tiny-kimi", config_file, expert_format, print_preset;
  uint64_t seed = 0;
  int trunk_bits = 0, head_bits = 0;
  int jobs = 0;
  bool force = false, quiet = false;
};

int RunSynth(const Options& o) {
  if (!o.print_preset.empty()) {
    auto s = SynthPreset(o.print_preset);
    if (!s.ok()) {
      std::fprintf(stderr, "waste: %s\n", s.status().message().c_str());
      return 2;
    }
    std::printf("%s\n", s->ToJson().dump(2).c_str());
    return 0;
  }
  if (o.out.empty()) {
    std::fprintf(stderr, "waste synth: OUT is required\n");
    return 2;
  }
  Result<SynthSpec> spec = Status::Error("");
  if (!o.config_file.empty()) {
    auto text = ReadSmallFile(o.config_file, 16u << 20);
    if (!text.ok()) {
      std::fprintf(stderr, "waste: %s\n", text.status().message().c_str());
      return 2;
    }
    auto j = ParseJson(*text, o.config_file);
    if (!j.ok()) {
      spec = j.status();
    } else {
      spec = SynthSpec::FromJson(*j);
      if (!spec.ok()) spec = spec.status().Prefixed(o.config_file);
    }
  } else {
    spec = SynthPreset(o.preset);
  }
  if (!spec.ok()) {
    std::fprintf(stderr, "waste: %s\n", spec.status().message().c_str());
    return 2;
  }
  if (!o.expert_format.empty()) {
    nlohmann::json j = spec->ToJson();
    j["expert_format"] = o.expert_format;
    spec = SynthSpec::FromJson(j);
    if (!spec.ok()) {
      std::fprintf(stderr, "waste: --expert-format: %s\n", spec.status().message().c_str());
      return 2;
    }
  }
  if (o.seed) spec->seed = o.seed;
  if (o.trunk_bits) spec->trunk_bits = o.trunk_bits;
  if (o.head_bits) spec->head_bits = o.head_bits;
  const int jobs =
      o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto progress = [&](std::string_view line) {
    if (!o.quiet) std::fprintf(stderr, "synth: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto r = WriteSynthetic(*spec, o.out, o.force, jobs, progress);
  if (!r.ok()) {
    std::fprintf(stderr, "waste: synth %s: %s\n", o.out.c_str(), r.status().message().c_str());
    return 1;
  }
  std::printf(
      "wrote %s: %s in %.2f s (%.0f MB/s); routing skew %.3f: busiest 10%% of experts "
      "take %.0f%% of choices, %.0f%% overlap between independent tokens (router-only estimate)\n",
      o.out.c_str(), FormatSize(r->bytes).c_str(), r->seconds,
      static_cast<double>(r->bytes) / 1e6 / std::max(r->seconds, 1e-9), r->route_skew,
      100 * r->hot_share, 100 * r->independent_overlap);
  return 0;
}

}  // namespace

void AddSynth(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<Options>();
  std::string presets;
  for (const auto& n : SynthPresetNames()) presets += (presets.empty() ? "" : ", ") + n;
  auto* cmd =
      app.add_subcommand("synth", "Write a synthetic container of deterministic random weights");
  cmd->add_option("OUT", o->out, "Output directory");
  cmd->add_option("--preset", o->preset,
                  "One of: " + presets +
                      ". kimi-k3-slice is K3's real widths with 2 of its 93 layers (the dense "
                      "one and one MoE layer: 896 experts, about 10.6 GiB at VQ3R, and a "
                      "3 GB trunk); for more layers, edit num_hidden_layers and linear_attn_config in "
                      "what --print-preset prints and pass it as --config")
      ->capture_default_str();
  cmd->add_option("--config", o->config_file, "A spec file (JSON, as --print-preset prints)");
  cmd->add_option("--print-preset", o->print_preset, "Print a preset's spec as JSON and exit");
  cmd->add_option("--expert-format", o->expert_format, "vq3r, vq2r, vq4p, mxfp4, q4gr or int4 (default: the spec's)");
  cmd->add_option("--head-bits", o->head_bits, "The LM head: 8 or 4 (default: the spec's)")
      ->check(CLI::IsMember({4, 8}));
  cmd->add_option("--trunk-bits", o->trunk_bits, "4 or 8 (default: the spec's)")
      ->check(CLI::IsMember({4, 8}));
  cmd->add_option("--seed", o->seed, "Seed (default: the spec's); same seed, same bytes");
  cmd->add_option("--jobs", o->jobs, "Threads filling expert records (default: all cores)");
  cmd->add_flag("--force", o->force, "Replace a container already in OUT");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines");
  cmd->callback([o, exit_code] { *exit_code = RunSynth(*o); });
}

}  // namespace waste::cli
