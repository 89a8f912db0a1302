// waste convert: a Hugging Face checkpoint to a container; waste verify: check one.
#include <cstdio>
#include <memory>
#include <string>

#include "clients/waste/commands.h"
#include "engine/convert/convert.h"
#include "engine/convert/verify.h"
#include "engine/kernels/cpu.h"
#include "engine/plan/plan.h"

namespace waste::cli {
namespace {

struct ConvertArgs {
  std::string src, out, expert_format = "vq3r", isa;
  int jobs = 2, trunk_bits = 0, head_bits = 8, sample_experts = 8, iterations = 12;
  bool resume = false, quiet = false;
};

int RunConvert(const ConvertArgs& a) {
  auto fmt = convert::ParseExpertFormat(a.expert_format);
  if (!fmt.ok()) {
    std::fprintf(stderr, "waste convert: --expert-format: %s\n", fmt.status().message().c_str());
    return 2;
  }
  convert::ConvertOptions o;
  o.src = a.src;
  o.out = a.out;
  o.jobs = a.jobs;
  o.expert_fmt = *fmt;
  o.trunk_bits = a.trunk_bits;
  o.head_bits = a.head_bits;
  o.resume = a.resume;
  o.fit.sample_experts = a.sample_experts;
  o.fit.iterations = a.iterations;
  if (!a.isa.empty()) {  // the nearest-entry search's path: the same bytes on each
    o.fit.isa = a.isa == "scalar" ? kernels::Isa::kScalar
                : a.isa == "avx2" ? kernels::Isa::kAvx2
                                  : kernels::Isa::kAvx512;
    if (kernels::UsableIsa(o.fit.isa) != o.fit.isa) {
      std::fprintf(stderr, "waste convert: --isa %s is not supported by this CPU\n", a.isa.c_str());
      return 2;
    }
  }
  o.progress = [&](std::string_view line) {
    if (!a.quiet)
      std::fprintf(stderr, "convert: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto r = convert::Convert(o);
  if (!r.ok()) {
    std::fprintf(stderr, "waste convert: %s\n", r.status().message().c_str());
    return 1;
  }
  const convert::ConvertSummary& s = *r;
  std::printf("wrote %s (%s) from %s in %.1f s: source %s, container %s\n", a.out.c_str(),
              s.model_type.c_str(), a.src.c_str(), s.seconds, FormatSize(s.source_bytes).c_str(),
              FormatSize(s.written_bytes).c_str());
  std::printf("  trunk   %s, %.2f bits per weight\n", FormatSize(s.trunk_bytes).c_str(),
              s.trunk_bits_per_weight());
  std::printf("  experts %s, %.2f bits per weight (%s)\n", FormatSize(s.expert_bytes).c_str(),
              s.expert_bits_per_weight(), a.expert_format.c_str());
  if (s.layers_resumed)
    std::printf("  %d layers were written by an earlier run\n", s.layers_resumed);
  std::printf("  relative error of the expert weights ||W - Q|| / ||W||, per layer:\n");
  for (const auto& l : s.layers)
    std::printf("    layer %3d  mean %.5f  max %.5f\n", l.layer, l.mean_rel_error, l.max_rel_error);
  std::printf("  tokenizer: %s\n", s.tokenizer.c_str());
  if (!s.skipped_layers.empty()) {
    std::string list;
    for (int L : s.skipped_layers) list += (list.empty() ? "" : ", ") + std::to_string(L);
    std::printf("  multi-token-prediction layer%s %s skipped (past num_hidden_layers; not used "
                "to generate)\n",
                s.skipped_layers.size() > 1 ? "s" : "", list.c_str());
  }
  if (!s.skipped_vision.empty())
    std::printf("  the vision tower skipped: %zu tensors (e.g. %s); the container holds the text "
                "model\n",
                s.skipped_vision.size(), s.skipped_vision.front().c_str());
  if (!s.skipped_mtp.empty())
    std::printf(
        "  the multi-token-prediction weights skipped: %zu tensors (e.g. %s; not used to "
        "generate)\n",
        s.skipped_mtp.size(), s.skipped_mtp.front().c_str());
  if (!s.unused.empty())
    std::printf("  %zu checkpoint tensors not needed by the container, e.g. %s\n", s.unused.size(),
                s.unused.front().c_str());
  return 0;
}

int RunVerify(const std::string& container, const std::string& source, bool quiet) {
  convert::VerifyOptions o;
  o.container = container;
  o.source = source;
  o.progress = [&](std::string_view line) {
    if (!quiet) std::fprintf(stderr, "verify: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  auto r = convert::Verify(o);
  if (!r.ok()) {
    std::fprintf(stderr, "waste verify: %s\n", r.status().message().c_str());
    return 1;
  }
  std::printf("%s: %d trunk tensors and %d expert records (headers, crc32) checked\n",
              container.c_str(), r->trunk_tensors, r->records);
  if (r->compared) {
    std::printf("  against %s: worst trunk matrix %s, relative error %.5f\n", source.c_str(),
                r->trunk_worst.c_str(), r->trunk_max_rel_error);
    for (const auto& l : r->layers)
      std::printf("    layer %3d  experts' relative error mean %.5f  max %.5f\n", l.layer,
                  l.mean_rel_error, l.max_rel_error);
  }
  for (const auto& p : r->problems) std::printf("  problem: %s\n", p.c_str());
  if (!r->problems.empty()) {
    std::printf("%zu problems\n", r->problems.size());
    return 1;
  }
  std::printf("  no problems\n");
  return 0;
}

}  // namespace

void AddConvert(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand(
      "convert", "Convert a Hugging Face safetensors checkpoint of a family docs/MODELS.md lists");
  cmd->add_option("SRC", a->src, "Checkpoint directory (config.json, *.safetensors)")->required();
  cmd->add_option("OUT", a->out, "Container directory to write (new or empty)")->required();
  cmd->add_option("--jobs", a->jobs, "Threads encoding experts")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--expert-format", a->expert_format, "bf16 (lossless), mxfp4 (lossless from MXFP4 experts), int4 (lossless from compressed-tensors INT4 experts), q4gr (4-bit groups of 128), vq3r, vq2r or vq4p")
      ->capture_default_str();
  cmd->add_option("--trunk-bits", a->trunk_bits,
                  "4 (Q4G), 8 (Q8G) or 16 (BF16); default 16 with bf16 experts, else 4")
      ->check(CLI::IsMember({4, 8, 16}));
  cmd->add_option("--head-bits", a->head_bits,
                  "The LM head of a quantized trunk: 8 (Q8G) or 4 (Q4G, half its bytes, less exact)")
      ->capture_default_str()
      ->check(CLI::IsMember({4, 8}));
  cmd->add_option("--sample-experts", a->sample_experts,
                  "VQ: experts per layer the codebooks are fitted on")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--kmeans-iterations", a->iterations, "VQ: k-means iterations per stage")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--isa", a->isa,
                  "VQ: the nearest-entry search's instruction set: scalar, avx2, avx512 "
                  "(default: the best; the output is the same)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512"}));
  cmd->add_flag("--resume", a->resume, "Continue an interrupted conversion in OUT");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress lines");
  cmd->callback([a, exit_code] { *exit_code = RunConvert(*a); });

  struct VerifyArgs {
    std::string container, source;
    bool quiet = false;
  };
  auto v = std::make_shared<VerifyArgs>();
  auto* ver = app.add_subcommand(
      "verify", "Check a container's records, crc32s and trunk; with --source, its weights' error");
  ver->add_option("CONTAINER", v->container, "Container directory")->required();
  ver->add_option("--source", v->source, "The checkpoint it was converted from");
  ver->add_flag("-q,--quiet", v->quiet, "No progress lines");
  ver->callback([v, exit_code] { *exit_code = RunVerify(v->container, v->source, v->quiet); });
}

}  // namespace waste::cli
