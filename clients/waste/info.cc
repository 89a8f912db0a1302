// waste info and waste plan: what a container holds and what it needs.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "clients/waste/commands.h"
#include "engine/format/container.h"
#include "engine/gguf/gguf.h"
#include "engine/plan/plan.h"
#include "shm/segment.h"
#include "shm/table.h"

namespace waste::cli {
namespace {

using nlohmann::json;

std::string Millions(int64_t n) {
  char buf[32];
  if (n >= 1'000'000'000)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  return buf;
}

Result<Container> OpenOrReport(const std::string& dir) {
  auto c = Container::Open(dir);
  if (!c.ok()) std::fprintf(stderr, "waste: %s: %s\n", dir.c_str(), c.status().message().c_str());
  return c;
}

json InfoJson(const Container& ct) {
  const Manifest& m = ct.manifest();
  const ModelConfig& c = m.config;
  const ParamCount p = CountParams(c);
  std::string mix;
  // One letter per layer: K KDA, M MLA, G GQA, D Gated DeltaNet.
  for (int L = 0; L < c.n_layers; ++L) {
    switch (c.layer_kind[L]) {
      case LayerKind::kKda:
        mix += 'K';
        break;
      case LayerKind::kMla:
        mix += 'M';
        break;
      case LayerKind::kGqa:
        mix += 'G';
        break;
      case LayerKind::kGatedDeltaNet:
        mix += 'D';
        break;
    }
  }
  std::map<std::string, json> fmts;
  uint64_t resident = 0, embed = 0, ignored_bytes = 0;
  int ignored = 0;
  for (const TrunkTensor& t : m.trunk) {
    std::string f(format::FmtName(t.fmt));
    if (t.bf16) f = "BF16";
    auto& e = fmts[f];
    if (e.is_null()) e = {{"tensors", 0}, {"bytes", 0}};
    e["tensors"] = e["tensors"].get<int>() + 1;
    e["bytes"] = e["bytes"].get<uint64_t>() + t.stored_bytes();
    if (!t.name.starts_with(m.tensor_prefix)) {  // not the text model's: never read
      ++ignored;
      ignored_bytes += t.stored_bytes();
      continue;
    }
    (t.name == m.tensor_prefix + "model.embed_tokens.weight" ? embed : resident) +=
        t.stored_bytes();
  }
  json j = {
      {"container", ct.dir()},
      {"bytes", ct.total_bytes()},
      {"architecture", c.architecture},
      {"model_type", c.model_type},
      {"layers", c.n_layers},
      {"dense_layers", c.n_layers - c.n_moe_layers()},
      {"moe_layers", c.n_moe_layers()},
      {"kda_layers", c.n_kda_layers()},
      {"mla_layers", c.n_layers_of(LayerKind::kMla)},
      {"gqa_layers", c.n_layers_of(LayerKind::kGqa)},
      {"gated_deltanet_layers", c.n_layers_of(LayerKind::kGatedDeltaNet)},
      {"layer_mix", mix},
      {"hidden", c.hidden},
      {"vocab", c.vocab},
      {"params_total", p.total()},
      {"params_active", p.active},
      {"trunk_formats", fmts},
      {"trunk_resident_bytes", resident},
      {"embedding_bytes_on_disk", embed},
      {"tokenizer", ct.has_tokenizer()},
      {"specials", ct.specials().size()},
      {"chat_template", ct.chat().has_value()},
  };
  if (c.n_layers_of(LayerKind::kGqa) > 0)
    j["gqa"] = {{"heads", c.n_heads},         {"kv_heads", c.n_kv_heads},
                {"head_dim", c.head_dim},     {"rotary_dim", c.rotary_dim},
                {"qk_norm", c.qk_norm},       {"bias", c.attn_bias},
                {"rope_theta", c.rope_theta}, {"yarn_factor", c.yarn.factor}};
  if (ignored > 0)  // K3's vision tower and projector: the text model alone is built
    j["ignored_tensors"] = {{"prefix", m.tensor_prefix},
                            {"tensors", ignored},
                            {"bytes", ignored_bytes}};
  if (c.arch == Arch::kKimiK3)
    j["kimi_k3"] = {{"latent", c.latent},
                    {"latent_norm", c.latent_norm},
                    {"attn_res_block", c.attn_res_block},
                    {"attn_res_blocks", c.attn_res_blocks()},
                    {"situ", c.situ},
                    {"situ_beta", c.situ_beta},
                    {"situ_linear_beta", c.situ_linear_beta},
                    {"kda_full_rank_gate", c.kda_full_rank_gate},
                    {"kda_lower_bound", c.kda_lower_bound},
                    {"mla_output_gate", c.mla_output_gate},
                    {"q_lora", c.q_lora}};
  if (c.n_experts > 0) {
    j["experts"] = {
        {"per_layer", c.n_experts},
        {"input_width", c.expert_width()},
        {"top_k", c.top_k},
        {"shared", c.n_shared},
        {"format", std::string(format::FmtName(m.quant.fmt))},
        {"stages", m.quant.stages},
        {"entries", m.quant.entries},
        {"bits_per_weight", m.quant.bits_per_weight()},
        {"record_bytes", m.record.record_bytes},
        {"bank_bytes", uint64_t{m.record.record_bytes} * c.n_experts * c.n_moe_layers()},
        {"routing",
         {{"scores", c.sigmoid_router ? "sigmoid" : "softmax"},
          {"correction_bias", c.router_bias},
          {"groups", c.n_group},
          {"topk_group", c.topk_group},
          {"renormalize", c.renormalize},
          {"routed_scaling", c.routed_scale}}}};
  }
  return j;
}

int RunInfo(const std::string& dir, bool as_json, const std::string& chat_format) {
  if (gguf::IsGgufFile(dir)) return RunGgufInfo(dir, as_json, chat_format);
  if (!chat_format.empty()) {
    std::fprintf(stderr, "waste: --chat-format: waste info takes it for a GGUF file\n");
    return 2;
  }
  auto ct = OpenOrReport(dir);
  if (!ct.ok()) return 1;
  const json j = InfoJson(*ct);
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("container   %s (%s)\n", dir.c_str(), FormatSize(j["bytes"]).c_str());
  std::printf("model       %s (%s)\n", j["architecture"].get<std::string>().c_str(),
              j["model_type"].get<std::string>().c_str());
  // The attention kinds the model has, by count.
  std::string kinds;
  for (const auto& [key, name] : {std::pair{"kda_layers", "KDA"}, std::pair{"mla_layers", "MLA"},
                                  std::pair{"gqa_layers", "GQA"},
                                  std::pair{"gated_deltanet_layers", "Gated DeltaNet"}}) {
    if (j[key].get<int>() == 0) continue;
    kinds += (kinds.empty() ? "" : " + ") + std::to_string(j[key].get<int>()) + " " + name;
  }
  std::printf("layers      %d: %d dense + %d MoE; attention %s\n", j["layers"].get<int>(),
              j["dense_layers"].get<int>(), j["moe_layers"].get<int>(), kinds.c_str());
  std::printf(
      "layer mix   %s  (K = Kimi Delta Attention, M = latent attention, G = grouped-query "
      "attention, D = Gated DeltaNet)\n",
      j["layer_mix"].get<std::string>().c_str());
  if (j.contains("gqa")) {
    const json& g = j["gqa"];
    std::printf("attention   %d query heads over %d KV heads of %d, %d dims rotate%s%s\n",
                g["heads"].get<int>(), g["kv_heads"].get<int>(), g["head_dim"].get<int>(),
                g["rotary_dim"].get<int>(), g["qk_norm"].get<bool>() ? ", q/k norms" : "",
                g["bias"].get<bool>() ? ", q/k/v biases" : "");
  }
  std::printf("hidden      %d, vocabulary %d\n", j["hidden"].get<int>(), j["vocab"].get<int>());
  if (j.contains("experts")) {
    const json& e = j["experts"];
    std::printf(
        "experts     %d per layer, top-%d, %d shared; %s (%d stages x %d entries, %.2f "
        "bits/weight)\n",
        e["per_layer"].get<int>(), e["top_k"].get<int>(), e["shared"].get<int>(),
        e["format"].get<std::string>().c_str(), e["stages"].get<int>(), e["entries"].get<int>(),
        e["bits_per_weight"].get<double>());
    std::printf("records     %s each, %s in all banks\n", FormatSize(e["record_bytes"]).c_str(),
                FormatSize(e["bank_bytes"]).c_str());
    if (e["input_width"].get<int>() != j["hidden"].get<int>())
      std::printf("latent MoE  experts read and write %d wide (routed_expert_down_proj from %d, "
                  "%sup_proj back); shared experts on the hidden state\n",
                  e["input_width"].get<int>(), j["hidden"].get<int>(),
                  j["kimi_k3"]["latent_norm"].get<bool>() ? "RMSNorm, " : "");
  }
  if (j.contains("kimi_k3")) {
    const json& k = j["kimi_k3"];
    if (k["attn_res_block"].get<int>() > 0)
      std::printf("attn res    blocks of %d layers: up to %d block representations per token, "
                  "mixed before every sublayer and at the output (none kept between tokens)\n",
                  k["attn_res_block"].get<int>(), k["attn_res_blocks"].get<int>());
    std::string parts;
    if (k["situ"].get<bool>())
      parts += "SiTU (beta " + json(k["situ_beta"]).dump() + ", linear beta " +
               json(k["situ_linear_beta"]).dump() + ")";
    if (k["kda_full_rank_gate"].get<bool>()) parts += "; KDA full-rank output gate";
    if (k["kda_lower_bound"].get<float>() < 0)
      parts += "; KDA decay bounded below by " + json(k["kda_lower_bound"]).dump();
    if (k["mla_output_gate"].get<bool>()) parts += "; MLA output gate";
    if (k["q_lora"].get<int>() > 0) parts += "; MLA q_lora " + json(k["q_lora"]).dump();
    std::printf("kimi k3     %s\n", parts.c_str());
  }
  if (j.contains("ignored_tensors")) {
    const json& g = j["ignored_tensors"];
    std::printf("ignored     %d tensors outside %s (%s; K3's vision tower and projector): the "
                "text model alone is built\n",
                g["tensors"].get<int>(), g["prefix"].get<std::string>().c_str(),
                FormatSize(g["bytes"]).c_str());
  }
  std::string fmts;
  for (const auto& [name, f] : j["trunk_formats"].items())
    fmts += (fmts.empty() ? "" : ", ") + name + " x" + std::to_string(f["tensors"].get<int>()) +
            " (" + FormatSize(f["bytes"]) + ")";
  std::printf("trunk       %s\n", fmts.c_str());
  std::printf("            %s resident, embedding table %s read per row from disk\n",
              FormatSize(j["trunk_resident_bytes"]).c_str(),
              FormatSize(j["embedding_bytes_on_disk"]).c_str());
  std::printf("parameters  %s total, %s active per token\n", Millions(j["params_total"]).c_str(),
              Millions(j["params_active"]).c_str());
  std::printf("tokenizer   %s, %zu special tokens, chat template %s\n",
              ct->has_tokenizer() ? "yes" : "no", ct->specials().size(),
              ct->chat() ? "yes" : "no");
  return 0;
}

int RunPlan(const std::string& dir, const std::string& budget_text, int context, bool as_json) {
  auto ct = OpenOrReport(dir);
  if (!ct.ok()) return 1;
  const MemoryPlan p = PlanMemory(ct->manifest(), context);
  // wasted's own budget, as `wasted --check` plans it (daemon/budget.cc)
  // with huge pages asked for, its default.
  const DaemonPlan d = PlanDaemon(
      ct->manifest(), {[](uint64_t n) { return shm::Segment::SizeFor(n, true); },
                       shm::SlotTable::BytesFor, sizeof(shm::PinPage)});
  const MemoryLimit lim = ProcessMemoryLimit();
  auto machine = DefaultBudget(p, lim);
  auto daemon_budget = DefaultBudget(d, lim);
  std::optional<uint64_t> budget;
  if (!budget_text.empty()) {
    auto b = ParseSize(budget_text);
    if (!b.ok()) {
      std::fprintf(stderr, "waste: --budget: %s\n", b.status().message().c_str());
      return 2;
    }
    budget = *b;
  }
  const uint64_t record = ct->record_bytes();
  const uint64_t all_records = uint64_t(ct->config().n_experts) * ct->config().n_moe_layers();
  auto cache_at = [&](uint64_t b) -> uint64_t {
    const uint64_t fixed = p.floor() - p.min_cache;
    return b > fixed ? b - fixed : 0;
  };
  json j = {{"context", context},
            {"floor", p.floor()},
            {"trunk", p.trunk},
            {"client_state", p.client_state},
            {"scratch", p.scratch},
            {"min_expert_cache", p.min_cache},
            {"daemon_overhead", p.daemon_overhead},
            {"working_set", p.working_set},
            {"recommended", p.recommended()},
            {"memory_limit", lim.bytes},
            {"memory_limit_source", lim.source}};
  if (machine.ok())
    j["machine_budget"] = *machine;
  else
    j["machine_budget_error"] = machine.status().message();
  json& w = j["wasted"];
  w = {{"floor", d.floor()},
       {"trunk", d.trunk},
       {"min_expert_cache", d.min_cache},
       {"overhead", d.overhead},
       {"working_set", d.working_set}};
  if (daemon_budget.ok())
    w["budget"] = *daemon_budget;
  else
    w["budget_error"] = daemon_budget.status().message();
  if (budget) {
    j["budget"] = *budget;
    j["budget_ok"] = *budget >= p.floor();
    j["cache_bytes"] = cache_at(*budget);
    j["cache_records"] = record ? cache_at(*budget) / record : 0;
  }
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return budget && *budget < p.floor() ? 1 : 0;
  }
  std::printf("floor          %s in one process, at %d tokens of context\n", FormatSize(p.floor()).c_str(),
              context);
  std::printf("  trunk          %s (resident; the embedding table stays on disk)\n",
              FormatSize(p.trunk).c_str());
  std::printf("  client state   %s (recurrent states, convolution rings, latent and K/V caches)\n",
              FormatSize(p.client_state).c_str());
  const ModelConfig& c = ct->config();
  std::printf("  scratch        %s (activations, logits, lookup tables%s)\n",
              FormatSize(p.scratch).c_str(),
              c.attn_res_block > 0 ? "; Attention Residuals' block representations, per token"
                                   : "");
  const std::string latent =
      c.latent > 0 ? "; records of experts " + std::to_string(c.latent) + " wide, the latent" : "";
  std::printf("  expert cache   %s (the top-%d experts of one layer%s)\n",
              FormatSize(p.min_cache).c_str(), c.top_k, latent.c_str());
  std::printf("  tables         %s (tables and buffers)\n",
              FormatSize(p.daemon_overhead).c_str());
  std::printf("working set    %s (one token's experts over %d MoE layers)\n",
              FormatSize(p.working_set).c_str(), ct->config().n_moe_layers());
  std::printf("recommended    %s (floor + 3 working sets)\n", FormatSize(p.recommended()).c_str());
  std::printf("this machine   %s may be used (%s)\n", FormatSize(lim.bytes).c_str(),
              lim.source.c_str());
  std::printf("wasted         floor %s: trunk segment %s + expert cache %s (two clients' "
              "layers) + overhead %s (slot table, pin pages, buffers)\n",
              FormatSize(d.floor()).c_str(), FormatSize(d.trunk).c_str(),
              FormatSize(d.min_cache).c_str(), FormatSize(d.overhead).c_str());
  if (daemon_budget.ok())
    std::printf("               default budget %s, as `wasted --check` says; each client adds "
                "its state and scratch\n",
                FormatSize(*daemon_budget).c_str());
  else
    std::printf("               no budget fits:\n  %s\n", daemon_budget.status().message().c_str());
  std::printf("in one process ");
  if (machine.ok()) {
    std::printf(
        "default budget %s, expert cache %s (%.1f%% of all experts)\n",
        FormatSize(*machine).c_str(), FormatSize(cache_at(*machine)).c_str(),
        all_records ? 100.0 * static_cast<double>(cache_at(*machine) / record) / all_records : 0.0);
  } else {
    std::printf("no budget fits:\n  %s\n", machine.status().message().c_str());
  }
  if (budget) {
    if (*budget < p.floor()) {
      std::printf("--budget %s is below the floor of %s\n", FormatSize(*budget).c_str(),
                  FormatSize(p.floor()).c_str());
      return 1;
    }
    std::printf(
        "--budget %s  expert cache %s: %llu records (%.1f%% of all experts)\n",
        FormatSize(*budget).c_str(), FormatSize(cache_at(*budget)).c_str(),
        static_cast<unsigned long long>(cache_at(*budget) / record),
        all_records ? 100.0 * static_cast<double>(cache_at(*budget) / record) / all_records : 0.0);
  }
  return 0;
}

}  // namespace

void AddInfo(CLI::App& app, int* exit_code) {
  struct Options {
    std::string dir;
    bool json = false;
    std::string chat_format;
  };
  auto o = std::make_shared<Options>();  // owned by the callback, bound by the options
  auto* cmd = app.add_subcommand(
      "info",
      "Describe a container or a GGUF file: architecture, layers, experts, formats, sizes");
  cmd->add_option("CONTAINER", o->dir, "Container directory, or a GGUF file")->required();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_option("--chat-format", o->chat_format,
                  "A GGUF's chat format by family name, where its template is not recognised");
  cmd->callback([o, exit_code] { *exit_code = RunInfo(o->dir, o->json, o->chat_format); });
}

void AddPlan(CLI::App& app, int* exit_code) {
  struct Options {
    std::string dir, budget;
    int context = 4096;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd =
      app.add_subcommand("plan", "Memory floor, recommended budget and this machine's budget");
  cmd->add_option("CONTAINER", o->dir, "Container directory")->required();
  cmd->add_option("--budget", o->budget, "A budget to check, e.g. 4G");
  cmd->add_option("--ctx", o->context, "Context length the client state is sized for")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, exit_code] { *exit_code = RunPlan(o->dir, o->budget, o->context, o->json); });
}

}  // namespace waste::cli
