// Model configs: the presets parse to the shapes they claim, the record and
// parameter arithmetic matches what WARP measured on the real model, and
// settings that are not implemented are refused by name.
#include "engine/format/model_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "engine/format/container.h"
#include "engine/synth/synth.h"

namespace waste {
namespace {

using nlohmann::json;

ModelConfig Parse(const json& j) {
  auto c = ModelConfig::FromJson(j);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ModelConfig{};
}

TEST(Config, KimiLinear48bHasTheRealShape) {
  const ModelConfig c = Parse(SynthPreset("kimi-linear-48b")->config);
  EXPECT_EQ(c.arch, Arch::kKimiLinear);
  EXPECT_EQ(c.n_layers, 27);
  EXPECT_EQ(c.n_moe_layers(), 26);
  EXPECT_EQ(c.n_kda_layers(), 20);
  EXPECT_EQ(c.layer_kind[3], LayerKind::kMla);  // full_attn_layers are 1-based: 4 -> layer 3
  EXPECT_EQ(c.layer_kind[26], LayerKind::kMla);
  EXPECT_EQ(c.layer_kind[0], LayerKind::kKda);
  EXPECT_TRUE(c.mla_nope);
  // WARP's LEARNED.md: one Kimi-Linear-48B record is 2,666,496 bytes (651 pages).
  auto lay = RecordLayout::For(c, ExpertQuant::For(format::Fmt::kVQ3R));
  ASSERT_TRUE(lay.ok());
  EXPECT_EQ(lay->record_bytes, 2666496u);
  // VQ4P spends the same bytes as VQ3R.
  EXPECT_EQ(RecordLayout::For(c, ExpertQuant::For(format::Fmt::kVQ4P))->record_bytes, 2666496u);
  // Q4GR: 3 x 1024 x 2304 weights at half a byte (3,538,944) and an f16 per
  // 128 (110,592) after the header: 3,649,584 bytes in 892 pages.
  auto q4 = RecordLayout::For(c, ExpertQuant::For(format::Fmt::kQ4GR));
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ(q4->scales_off, 48u + 3538944u);
  EXPECT_EQ(q4->payload_end, 3649584u);
  EXPECT_EQ(q4->record_bytes, 892u * 4096u);
  EXPECT_DOUBLE_EQ(ExpertQuant::For(format::Fmt::kQ4GR).bits_per_weight(), 4.125);
  // INT4: the same codes and a bf16 per 32 (442,368): 3,981,360 bytes in 973 pages.
  auto i4 = RecordLayout::For(c, ExpertQuant::For(format::Fmt::kINT4));
  ASSERT_TRUE(i4.ok());
  EXPECT_EQ(i4->scales_off, 48u + 3538944u);
  EXPECT_EQ(i4->payload_end, 3981360u);
  EXPECT_EQ(i4->record_bytes, 973u * 4096u);
  EXPECT_DOUBLE_EQ(ExpertQuant::For(format::Fmt::kINT4).bits_per_weight(), 4.5);
  const ParamCount p = CountParams(c);
  EXPECT_NEAR(static_cast<double>(p.total()), 49.1e9, 1.0e9);  // "48B"
  EXPECT_NEAR(static_cast<double>(p.active), 2.9e9, 0.5e9);    // "A3B"
}

// The gpt-oss presets at the released shapes: the published totals (20.9B
// and 116.8B) and active counts (3.6B and 5.1B per token), and an MXFP4
// record of 3,236 pages (the checkpoint's 13,219,200 bytes of codes and
// scales, 34,560 of float32 biases, the header).
TEST(Config, GptOssPresetsHaveTheReleasedShapes) {
  const ModelConfig c = Parse(SynthPreset("gpt-oss-20b")->config);
  EXPECT_EQ(c.arch, Arch::kGptOss);
  EXPECT_EQ(c.n_layers, 24);
  EXPECT_EQ(c.n_moe_layers(), 24);
  EXPECT_EQ(c.n_experts, 32);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.moe_inter, 2880);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.attn_window[0], 128);
  EXPECT_EQ(c.attn_window[1], 0);
  EXPECT_FALSE(c.yarn.truncate);
  EXPECT_TRUE(c.sinks && c.o_bias && c.expert_bias && c.softmax_topk && c.router_logit_bias);
  EXPECT_FALSE(c.router_bias);
  auto lay = RecordLayout::For(c, ExpertQuant::For(format::Fmt::kMXFP4));
  ASSERT_TRUE(lay.ok());
  EXPECT_EQ(lay->payload_end, 48u + 13219200u + 34560u);
  EXPECT_EQ(lay->record_bytes, 3236u * 4096u);
  const ParamCount p = CountParams(c);
  std::printf("gpt-oss-20b: %.3fB total, %.3fB active\n", p.total() / 1e9, p.active / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 20.9e9, 0.2e9);
  EXPECT_NEAR(static_cast<double>(p.active), 3.6e9, 0.1e9);
  const ModelConfig big = Parse(SynthPreset("gpt-oss-120b")->config);
  EXPECT_EQ(big.n_layers, 36);
  EXPECT_EQ(big.n_experts, 128);
  const ParamCount q = CountParams(big);
  std::printf("gpt-oss-120b: %.3fB total, %.3fB active\n", q.total() / 1e9, q.active / 1e9);
  EXPECT_NEAR(static_cast<double>(q.total()), 116.8e9, 1.0e9);
  EXPECT_NEAR(static_cast<double>(q.active), 5.1e9, 0.15e9);
}

TEST(Config, DeepseekSpellingsAreUnderstood) {
  const ModelConfig c = Parse(SynthPreset("tiny-deepseek")->config);
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_EQ(c.n_experts, 16);  // n_routed_experts
  EXPECT_EQ(c.top_k, 4);       // num_experts_per_tok
  EXPECT_EQ(c.n_shared, 1);    // n_shared_experts
  EXPECT_TRUE(c.renormalize);  // norm_topk_prob
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.q_lora, 96);
  EXPECT_FALSE(c.mla_nope);
  EXPECT_DOUBLE_EQ(c.yarn.factor, 32.0);
  EXPECT_EQ(c.n_kda_layers(), 0);
}

TEST(Config, NormTopkProbFalseDoesNotRenormalize) {
  json j = SynthPreset("tiny-deepseek")->config;
  j["norm_topk_prob"] = false;
  EXPECT_FALSE(Parse(j).renormalize);
}

// eos_token_id as a list (Qwen3.5's, GLM's released configs): every id is
// kept, and each ends a reply (EndOfTurnIds, tests/chat_test.cc).
TEST(Config, EosTokenIdMayBeAList) {
  json j = SynthPreset("tiny-qwen3")->config;
  j["eos_token_id"] = {7, 3};
  EXPECT_EQ(Parse(j).eos_tokens, (std::vector<int>{7, 3}));
  j["eos_token_id"] = 5;
  EXPECT_EQ(Parse(j).eos_tokens, std::vector<int>{5});
  j["eos_token_id"] = nullptr;
  EXPECT_TRUE(Parse(j).eos_tokens.empty());
}

struct Refusal {
  const char* preset;
  std::function<void(json&)> edit;
  const char* message;
};

TEST(Config, UnimplementedSettingsAreRefusedByName) {
  const std::vector<Refusal> cases = {
      {"tiny-kimi", [](json& j) { j["model_type"] = "llama"; },
       "model_type \"llama\" is not supported"},
      {"tiny-deepseek", [](json& j) { j["rope_scaling"]["type"] = "linear"; },
       "\"linear\" is not implemented"},
      {"tiny-deepseek", [](json& j) { j["rope_scaling"]["mscale"] = 0.5; },
       "mscale != mscale_all_dim"},
      {"tiny-deepseek", [](json& j) { j["scoring_func"] = "relu"; }, "scoring \"relu\""},
      {"tiny-deepseek", [](json& j) { j["topk_method"] = "magic"; }, "topk_method \"magic\""},
      {"tiny-deepseek", [](json& j) { j["topk_method"] = "greedy"; }, "topk_method \"greedy\""},
      {"tiny-deepseek", [](json& j) { j["topk_method"] = "group_limited_greedy"; },
       "topk_method \"group_limited_greedy\" is not implemented (only noaux_tc"},
      {"tiny-deepseek", [](json& j) { j["moe_layer_freq"] = 2; }, "moe_layer_freq"},
      {"tiny-kimi", [](json& j) { j["linear_attn_config"]["use_full_rank_gate"] = true; },
       "use_full_rank_gate"},
      {"tiny-kimi", [](json& j) { j["mla_use_nope"] = "true"; },
       "mla_use_nope is not true or false"},
      {"tiny-kimi", [](json& j) { j.erase("linear_attn_config"); },
       "linear_attn_config is missing"},
      {"tiny-kimi", [](json& j) { j["num_experts_per_token"] = 17; }, "top-k 17 of 16"},
      {"tiny-kimi", [](json& j) { j["hidden_size"] = 260; }, "multiples of 8"},
      {"tiny-kimi", [](json& j) { j["qk_rope_head_dim"] = 15; }, "must be even"},
      {"tiny-deepseek", [](json& j) { j["n_group"] = 3; }, "n_group does not divide"},
      {"tiny-qwen3", [](json& j) { j["use_sliding_window"] = true; }, "use_sliding_window"},
      {"tiny-qwen3", [](json& j) { j["num_key_value_heads"] = 3; },
       "num_key_value_heads does not divide"},
      {"tiny-qwen3", [](json& j) { j["mlp_only_layers"] = {4}; }, "mlp_only_layers holds 4"},
      {"tiny-qwen3", [](json& j) { j["eos_token_id"] = {1, -2}; }, "eos_token_id holds -2"},
      {"tiny-qwen3", [](json& j) { j["eos_token_id"] = json::array(); }, "1 to 16 ids"},
      {"tiny-qwen3", [](json& j) { j["eos_token_id"] = {1, "2"}; }, "eos_token_id holds \"2\""},
      {"tiny-glm", [](json& j) { j["partial_rotary_factor"] = 0.3125; }, "odd rotary width"},
      // truncate false is GPT-OSS's YaRN, built since (issue 21); a truncate
      // that is not a boolean, and attention_factor, are refused.
      {"tiny-glm", [](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"truncate", "no"}}; },
       "truncate is not true or false"},
      {"tiny-glm",
       [](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"attention_factor", 1.2}}; },
       "attention_factor is not implemented"},
  };
  for (const Refusal& r : cases) {
    json j = SynthPreset(r.preset)->config;
    r.edit(j);
    auto c = ModelConfig::FromJson(j);
    ASSERT_FALSE(c.ok()) << r.message;
    EXPECT_NE(c.status().message().find(r.message), std::string::npos)
        << "got: " << c.status().message() << "\nwanted: " << r.message;
  }
}

// Kimi K3: its parts read from the config, in WARP's flattened layout and in
// the release's nested one alike; the real widths' record and counts.
TEST(Config, KimiK3ReadsItsPartsFlattenedOrNested) {
  const json flat = SynthPreset("tiny-k3")->config;
  json nested = {{"model_type", "kimi_k3"},
                 {"architectures", {"KimiK3ForConditionalGeneration"}},
                 {"text_config", flat}};
  nested["text_config"].erase("_outer");
  for (const json& j : {flat, nested}) {
    const ModelConfig c = Parse(j);
    EXPECT_EQ(c.arch, Arch::kKimiK3);
    EXPECT_EQ(c.model_type, "kimi_linear");  // the text config's
    EXPECT_EQ(c.architecture, "KimiK3ForConditionalGeneration");
    EXPECT_EQ(c.latent, 128);
    EXPECT_EQ(c.expert_width(), 128);
    EXPECT_TRUE(c.latent_norm);
    EXPECT_EQ(c.attn_res_block, 2);
    EXPECT_EQ(c.attn_res_blocks(), 3);
    EXPECT_TRUE(c.situ);
    EXPECT_FLOAT_EQ(c.situ_beta, 4.f);
    EXPECT_FLOAT_EQ(c.situ_linear_beta, 25.f);
    EXPECT_TRUE(c.kda_full_rank_gate);
    EXPECT_FLOAT_EQ(c.kda_lower_bound, -5.f);
    EXPECT_TRUE(c.mla_output_gate);
    EXPECT_EQ(c.q_lora, 96);
    EXPECT_EQ(c.n_shared, 2);
    EXPECT_EQ(DefaultTensorPrefix(j), "language_model.");
  }
  EXPECT_EQ(DefaultTensorPrefix(SynthPreset("tiny-kimi")->config), "");
  // Without the wrapper, K3's own keys still say K3.
  json bare = flat;
  bare.erase("_outer");
  EXPECT_EQ(Parse(bare).arch, Arch::kKimiK3);
  EXPECT_EQ(Parse(SynthPreset("tiny-kimi")->config).arch, Arch::kKimiLinear);
}

TEST(Config, KimiK3SliceHasTheRealWidths) {
  const ModelConfig c = Parse(SynthPreset("kimi-k3-slice")->config);
  EXPECT_EQ(c.hidden, 7168);
  EXPECT_EQ(c.n_experts, 896);
  EXPECT_EQ(c.top_k, 16);
  EXPECT_EQ(c.n_shared, 2);
  EXPECT_EQ(c.moe_inter, 3072);
  EXPECT_EQ(c.expert_width(), 3584);
  EXPECT_EQ(c.n_heads, 96);
  EXPECT_EQ(c.kda_heads, 96);
  EXPECT_EQ(c.q_lora, 1536);
  EXPECT_EQ(c.attn_res_block, 2);  // K3's 12, capped at the slice's 2 layers: one block
  EXPECT_EQ(c.attn_res_blocks(), 1);
  EXPECT_EQ(c.n_moe_layers(), 1);
  // K3.md: w1/w3 [3072, 3584], w2 [3584, 3072]: 33.0 M parameters an expert.
  const ParamCount p = CountParams(c);
  EXPECT_EQ(p.experts, int64_t{3} * 3072 * 3584 * 896);
  auto lay = RecordLayout::For(c, ExpertQuant::For(format::Fmt::kVQ3R));
  ASSERT_TRUE(lay.ok());
  EXPECT_EQ(lay->cols[0], 3584);
  EXPECT_EQ(lay->rows[2], 3584);
  // WARP's measured record: 11.83 MB (MiB) at 3 bits.
  std::printf("kimi-k3-slice: VQ3R record %u bytes\n", lay->record_bytes);
  EXPECT_NEAR(lay->record_bytes / 1048576.0, 11.83, 0.02);
}

TEST(Config, KimiK3RefusesWhatItDoesNotBuildByName) {
  const std::vector<Refusal> cases = {
      {"tiny-k3", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act \"gelu\""},
      {"tiny-k3", [](json& j) { j.erase("routed_expert_hidden_size"); },
       "latent_moe_use_norm without routed_expert_hidden_size"},
      {"tiny-k3", [](json& j) { j["latent_moe_use_norm"] = 1; }, "latent_moe_use_norm is not true"},
      {"tiny-k3", [](json& j) { j["linear_attn_config"]["gate_lower_bound"] = 1.0; },
       "gate_lower_bound"},
      {"tiny-k3", [](json& j) { j["linear_attn_config"]["num_heads"] = 80; },
       "num_heads <= head_dim"},
      {"tiny-k3", [](json& j) { j["attn_res_block_size"] = 7; }, "attn_res_block_size"},
      {"tiny-k3", [](json& j) { j["_outer"] = 3; }, "_outer is not an object"},
      {"tiny-deepseek", [](json& j) { j["attn_res_block_size"] = 2; }, "is Kimi K3's"},
  };
  for (const Refusal& r : cases) {
    json j = SynthPreset(r.preset)->config;
    r.edit(j);
    auto c = ModelConfig::FromJson(j);
    ASSERT_FALSE(c.ok()) << r.message;
    EXPECT_NE(c.status().message().find(r.message), std::string::npos)
        << "got: " << c.status().message() << "\nwanted: " << r.message;
  }
}

TEST(Config, TrunkSpecNamesKimiK3sTensors) {
  const ModelConfig c = Parse(SynthPreset("tiny-k3")->config);
  std::map<std::string, std::vector<int64_t>> shape;
  for (const TensorSpec& s : TrunkSpec(c)) shape[s.name] = s.shape;
  EXPECT_EQ(shape["model.layers.0.self_attn.g_proj.weight"], (std::vector<int64_t>{256, 256}));
  EXPECT_FALSE(shape.count("model.layers.0.self_attn.g_a_proj.weight"));
  EXPECT_EQ(shape["model.layers.0.self_attn.A_log"], (std::vector<int64_t>{1, 1, 64, 1}));
  EXPECT_EQ(shape["model.layers.3.self_attn.g_proj.weight"], (std::vector<int64_t>{128, 256}));
  EXPECT_TRUE(shape.count("model.layers.3.self_attn.q_b_proj.weight"));
  EXPECT_EQ(shape["model.layers.1.block_sparse_moe.routed_expert_down_proj.weight"],
            (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(shape["model.layers.1.block_sparse_moe.routed_expert_up_proj.weight"],
            (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(shape["model.layers.1.block_sparse_moe.routed_expert_norm.weight"],
            (std::vector<int64_t>{128}));
  EXPECT_EQ(shape["model.layers.1.block_sparse_moe.shared_experts.up_proj.weight"],
            (std::vector<int64_t>{128, 256}));  // two shared experts of 64
  for (const char* r : {"self_attention_res_proj", "mlp_res_proj"})
    EXPECT_EQ(shape["model.layers.5." + std::string(r) + ".weight"],
              (std::vector<int64_t>{1, 256}));
  EXPECT_TRUE(shape.count("model.output_attn_res_norm.weight"));
  EXPECT_TRUE(shape.count("model.output_attn_res_proj.weight"));
}

TEST(Config, TrunkSpecNamesTheTensorsOfEachLayerKind) {
  const ModelConfig c = Parse(SynthPreset("tiny-kimi")->config);
  std::set<std::string> names;
  for (const TensorSpec& s : TrunkSpec(c)) names.insert(s.name);
  EXPECT_TRUE(names.count("model.layers.0.mlp.gate_proj.weight"));        // dense first layer
  EXPECT_TRUE(names.count("model.layers.0.self_attn.f_b_proj.weight"));   // KDA
  EXPECT_TRUE(names.count("model.layers.3.self_attn.kv_b_proj.weight"));  // MLA
  EXPECT_TRUE(names.count("model.layers.3.block_sparse_moe.gate.e_score_correction_bias"));
  EXPECT_TRUE(names.count("model.layers.5.block_sparse_moe.shared_experts.down_proj.weight"));
  EXPECT_FALSE(names.count("model.layers.1.mlp.gate_proj.weight"));  // MoE, not dense
  EXPECT_TRUE(names.count("lm_head.weight"));
}

// The GQA families at their released shapes (the presets take every number
// from the released config.json), against the published parameter counts.
// Active here excludes the embedding table; Qwen's "A3B" and "A22B" include
// it, GLM's "A12B" leaves out the LM head too.
TEST(Config, Qwen3AndGlmPresetsHaveTheReleasedShapes) {
  const ModelConfig q30 = Parse(SynthPreset("qwen3-30b-a3b")->config);
  EXPECT_EQ(q30.arch, Arch::kQwen3Moe);
  EXPECT_EQ(q30.n_moe_layers(), 48);
  EXPECT_FALSE(q30.router_bias);
  EXPECT_FALSE(q30.sigmoid_router);
  EXPECT_EQ(q30.n_kv_heads, 4);
  EXPECT_EQ(q30.rotary_dim, 128);
  EXPECT_EQ(q30.layer_kind[47], LayerKind::kGqa);
  ParamCount p = CountParams(q30);
  std::printf("qwen3-30b-a3b: %.3fB total, %.3fB active (%.3fB with the embedding)\n",
              p.total() / 1e9, p.active / 1e9, (p.active + p.embedding) / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 30.5e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(p.active + p.embedding), 3.3e9, 0.1e9);

  p = CountParams(Parse(SynthPreset("qwen3-235b-a22b")->config));
  std::printf("qwen3-235b-a22b: %.3fB total, %.3fB active (%.3fB with the embedding)\n",
              p.total() / 1e9, p.active / 1e9, (p.active + p.embedding) / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 235e9, 1e9);
  EXPECT_NEAR(static_cast<double>(p.active + p.embedding), 22e9, 0.3e9);

  const ModelConfig air = Parse(SynthPreset("glm-4.5-air")->config);
  EXPECT_EQ(air.arch, Arch::kGlm4Moe);
  EXPECT_EQ(air.n_moe_layers(), 45);
  EXPECT_TRUE(air.router_bias);
  EXPECT_EQ(air.rotary_dim, 64);  // half of each 128-dim head
  EXPECT_TRUE(air.attn_bias);
  EXPECT_FALSE(air.qk_norm);
  p = CountParams(air);
  const double head = static_cast<double>(air.vocab) * air.hidden;
  std::printf("glm-4.5-air: %.3fB total, %.3fB active (%.3fB without the LM head)\n",
              p.total() / 1e9, p.active / 1e9, (p.active - head) / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 106e9, 1e9);
  EXPECT_NEAR(p.active - head, 12e9, 0.3e9);
}

// MiniMax-M2 at its released shape (230B total, 10B active), its q/k norms
// spanning every head, and the released config's keys that ask for what is
// not built refused by name.
TEST(Config, MinimaxM2PresetHasTheReleasedShape) {
  const ModelConfig m = Parse(SynthPreset("minimax-m2")->config);
  EXPECT_EQ(m.arch, Arch::kMinimaxM2);
  EXPECT_EQ(m.n_moe_layers(), 62);
  EXPECT_EQ(m.moe_inter, 1536);
  EXPECT_TRUE(m.router_bias);
  EXPECT_TRUE(m.sigmoid_router);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.n_shared, 0);
  EXPECT_EQ(m.rotary_dim, 64);
  EXPECT_TRUE(m.qk_norm_all_heads);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const TensorSpec& s : TrunkSpec(m)) shapes[s.name] = s.shape;
  EXPECT_EQ(shapes["model.layers.0.self_attn.q_norm.weight"], std::vector<int64_t>{48 * 128});
  EXPECT_EQ(shapes["model.layers.0.self_attn.k_norm.weight"], std::vector<int64_t>{8 * 128});
  EXPECT_EQ(shapes["model.layers.61.block_sparse_moe.gate.e_score_correction_bias"],
            std::vector<int64_t>{256});
  const ParamCount p = CountParams(m);
  std::printf("minimax-m2: %.3fB total, %.3fB active\n", p.total() / 1e9, p.active / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 229e9, 2e9);
  EXPECT_NEAR(static_cast<double>(p.active), 10e9, 0.5e9);

  auto refusal = [](const char* key, const json& value) {
    json j = SynthPreset("tiny-minimax")->config;
    j[key] = value;
    auto c = ModelConfig::FromJson(j);
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, json>>{{"use_qk_norm", false},
                                                 {"qk_norm_type", "per_head"},
                                                 {"use_routing_bias", false},
                                                 {"scoring_func", "softmax"},
                                                 {"shared_intermediate_size", 256},
                                                 {"attn_type_list", {1, 0, 1, 1}},
                                                 {"n_group", 4},
                                                 {"rotary_dim", 13}})
    EXPECT_NE(refusal(key, value).find(key), std::string::npos) << key << ": " << refusal(key, value);
  EXPECT_EQ(refusal("attn_type_list", {1, 1, 1, 1}), "accepted");
  EXPECT_EQ(refusal("routed_scaling_factor", 2.0), "accepted");  // transformers reads none
}

// GLM-4.7-Flash ("30B-A3B") and dots.llm1.inst ("142B-A14B") at their
// released shapes, against the published totals and active counts (GLM's
// "A3B" without the LM head, as for GLM-4.5-Air; dots' "A14B" with both the
// embedding and the LM head).
TEST(Config, GlmLiteAndDots1PresetsHaveTheReleasedShapes) {
  const ModelConfig g = Parse(SynthPreset("glm-4.7-flash")->config);
  EXPECT_EQ(g.arch, Arch::kGlm4MoeLite);
  EXPECT_EQ(g.n_moe_layers(), 46);
  EXPECT_FALSE(g.is_moe_layer(0));
  EXPECT_EQ(g.layer_kind[46], LayerKind::kMla);
  EXPECT_EQ(g.q_lora, 768);
  EXPECT_EQ(g.kv_lora, 512);
  EXPECT_TRUE(g.router_bias);
  ParamCount p = CountParams(g);
  double head = static_cast<double>(g.vocab) * g.hidden;
  std::printf("glm-4.7-flash: %.3fB total, %.3fB active (%.3fB without the LM head)\n",
              p.total() / 1e9, p.active / 1e9, (p.active - head) / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 30e9, 0.5e9);
  EXPECT_NEAR(p.active - head, 3e9, 0.5e9);

  const ModelConfig d = Parse(SynthPreset("dots-llm1-inst")->config);
  EXPECT_EQ(d.arch, Arch::kDots1);
  EXPECT_EQ(d.n_moe_layers(), 61);
  EXPECT_EQ(d.layer_kind[61], LayerKind::kGqa);
  EXPECT_TRUE(d.qk_norm);
  EXPECT_EQ(d.n_shared, 2);
  EXPECT_EQ(d.top_k, 6);
  p = CountParams(d);
  std::printf("dots-llm1-inst: %.3fB total, %.3fB active (%.3fB with the embedding)\n",
              p.total() / 1e9, p.active / 1e9, (p.active + p.embedding) / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 142e9, 1e9);
  EXPECT_NEAR(static_cast<double>(p.active + p.embedding), 14e9, 0.3e9);
}

// DeepSeek-V3.2 at its released shapes: V3's 671B-A37B (the MTP layer not
// counted) plus the indexer's 61 x 14M.
TEST(Config, DeepseekV32PresetHasTheReleasedShapes) {
  const ModelConfig c = Parse(SynthPreset("deepseek-v3.2")->config);
  EXPECT_EQ(c.arch, Arch::kDeepseekV32);
  EXPECT_EQ(c.n_moe_layers(), 58);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_EQ(c.index_dim, 128);
  EXPECT_EQ(c.mla_row(60), 512 + 64 + 128);
  const ParamCount p = CountParams(c);
  std::printf("deepseek-v3.2: %.3fB total, %.3fB active\n", p.total() / 1e9, p.active / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 672e9, 2e9);
  EXPECT_NEAR(static_cast<double>(p.active), 37.5e9, 1e9);
}

// GLM-5 at its released shapes (744B-A40B as announced; the MTP layer not counted).
TEST(Config, GlmDsaPresetHasTheReleasedShapes) {
  const ModelConfig c = Parse(SynthPreset("glm-5")->config);
  EXPECT_EQ(c.arch, Arch::kGlmMoeDsa);
  EXPECT_EQ(c.n_moe_layers(), 75);
  EXPECT_FALSE(c.index_rotate_half);
  EXPECT_EQ(c.index_shared, std::vector<bool>(78, false));
  const ParamCount p = CountParams(c);
  std::printf("glm-5: %.3fB total, %.3fB active\n", p.total() / 1e9, p.active / 1e9);
  EXPECT_NEAR(static_cast<double>(p.total()), 744e9, 15e9);
  EXPECT_NEAR(static_cast<double>(p.active), 40e9, 2e9);
}

TEST(Config, MoeLayersFollowSparseStepAndMlpOnlyLayers) {
  json j = SynthPreset("tiny-qwen3")->config;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = {0, 2};
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.n_moe_layers(), 2);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_EQ(c.first_moe_layer(), 1);
  std::set<std::string> names;
  for (const TensorSpec& s : TrunkSpec(c)) names.insert(s.name);
  EXPECT_TRUE(names.count("model.layers.2.mlp.gate_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.1.block_sparse_moe.gate.weight"));
  EXPECT_FALSE(names.count("model.layers.1.block_sparse_moe.gate.e_score_correction_bias"));
  EXPECT_TRUE(names.count("model.layers.1.self_attn.q_norm.weight"));
  const ModelConfig step = Parse(SynthPreset("tiny-qwen3")->config);  // decoder_sparse_step 2
  EXPECT_FALSE(step.is_moe_layer(0));
  EXPECT_TRUE(step.is_moe_layer(1));
  EXPECT_FALSE(step.is_moe_layer(2));
  EXPECT_TRUE(step.is_moe_layer(3));
}

}  // namespace
}  // namespace waste
