// The three programs as a user runs them: --help and --version, waste info /
// plan / synth on a synthetic container, wasted --check, and clear errors
// with the documented exit codes for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "engine/format/encoding.h"
#include "engine/format/writer.h"
#include "engine/synth/synth.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;

// Runs one of the project's programs: "waste info DIR".
Outcome Exec(const std::string& args) {
  return Shell(Bin(args));
}

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs each test of this suite in its own process, in parallel.
    dir_ = new std::string(::testing::TempDir() + "/waste-cli-tiny-" + std::to_string(getpid()));
    const Outcome r = Exec("waste synth -q --force --preset tiny-kimi " + *dir_);
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* Cli::dir_ = nullptr;

TEST_F(Cli, HelpAndVersion) {
  for (const char* prog : {"waste", "wasted", "wastectl"}) {
    Outcome r = Exec(std::string(prog) + " --help");
    EXPECT_EQ(r.code, 0) << prog;
    EXPECT_TRUE(Has(r.out, "Usage")) << r.out;
    r = Exec(std::string(prog) + " --version");
    EXPECT_EQ(r.code, 0);
    EXPECT_TRUE(Has(r.out, std::string(prog) + " 0.")) << r.out;
  }
  EXPECT_TRUE(Has(Exec("waste --help").out, "synth"));
}

TEST_F(Cli, InfoHumanAndJson) {
  Outcome r = Exec("waste info " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "KimiLinearForCausalLM"));
  EXPECT_TRUE(Has(r.out, "KKKMKM"));
  EXPECT_TRUE(Has(r.out, "16 per layer, top-4"));
  r = Exec("waste info --json " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layers"], 6);
  EXPECT_EQ(j["moe_layers"], 5);
  EXPECT_EQ(j["experts"]["record_bytes"], 40960);
  EXPECT_GT(j["params_total"].get<int64_t>(), j["params_active"].get<int64_t>());
}

TEST_F(Cli, PlanHumanAndJson) {
  Outcome r = Exec("waste plan " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "floor"));
  EXPECT_TRUE(Has(r.out, "default budget"));
  r = Exec("waste plan --json --ctx 100 " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context"], 100);
  EXPECT_EQ(j["floor"].get<uint64_t>(),
            j["trunk"].get<uint64_t>() + j["client_state"].get<uint64_t>() +
                j["scratch"].get<uint64_t>() + j["min_expert_cache"].get<uint64_t>() +
                j["daemon_overhead"].get<uint64_t>());
  r = Exec("waste plan --budget 1M " + *dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "below the floor")) << r.out;
  r = Exec("waste plan --budget lots " + *dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "--budget")) << r.out;
}

TEST_F(Cli, DaemonChecksContainerAndBudget) {
  Outcome r = Exec("wasted --check " + *dir_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "check passed")) << r.out;
  r = Exec("wasted --check --budget 1M " + *dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "below the floor")) << r.out;
  r = Exec("wasted --check /nonexistent-container");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "manifest.json")) << r.out;
}

// A container of `preset`'s shapes whose trunk and expert banks are sparse
// files: real manifest and codebooks, no weights (zeros), so that a model of
// 18 GB can be planned and checked without writing it. Its trunk is encoded
// as `waste synth` encodes it (Q8G embedding and head, Q4G matrices, F32
// vectors).
void WriteShapeContainer(const std::string& preset, const std::string& dir) {
  auto spec = waste::SynthPreset(preset);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto w = waste::ContainerWriter::Create(dir, spec->config, spec->expert_fmt, true);
  ASSERT_TRUE(w.ok()) << w.status().message();
  const waste::ModelConfig c = (*w)->config();
  const waste::ExpertQuant q = (*w)->quant();
  const std::vector<float> books(size_t(q.entries) * q.vec_dim * 3 * q.stages, 0.0f);
  for (int L = 0; L < c.n_layers; ++L)
    if (c.is_moe_layer(L)) {
      ASSERT_TRUE((*w)->AddCodebooks(L, books).ok());
    }
  nlohmann::json state = (*w)->State();
  const uint64_t bank_bytes = uint64_t{(*w)->record_layout().record_bytes} * c.n_experts;
  w->reset();  // closes trunk.bin and codebooks.bin
  uint64_t at = 0;
  for (const waste::TensorSpec& t : waste::TrunkSpec(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t cols = t.shape.back(), rows = n / cols;
    using waste::format::Fmt;
    Fmt fmt = Fmt::kF32;
    if (t.storage == waste::Storage::kMatrix)
      fmt = t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight" ? Fmt::kQ8G
                                                                               : Fmt::kQ4G;
    const waste::format::GroupedShape g{fmt == Fmt::kQ8G ? 8 : 4, 128, rows, cols};
    const bool grouped = fmt != Fmt::kF32;
    const uint64_t payload = static_cast<uint64_t>(rows * (grouped ? g.row_bytes() : cols * 4));
    const uint64_t scales = grouped ? static_cast<uint64_t>(rows * g.groups_per_row() * 2) : 0;
    state["trunk"].push_back({{"name", waste::DefaultTensorPrefix(spec->config) + t.name},
                              {"fmt", static_cast<int>(fmt)},
                              {"bf16", false},
                              {"shape", t.shape},
                              {"group", grouped ? 128 : 0},
                              {"offset", at},
                              {"payload_bytes", payload},
                              {"scale_offset", grouped ? at + payload : 0},
                              {"scale_bytes", scales}});
    at += payload + scales;
  }
  state["trunk_bytes"] = at;
  std::filesystem::resize_file(dir + "/trunk.bin", at);
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    const std::string bank = dir + "/experts-L" + std::to_string(L) + ".bin";
    { std::ofstream(bank).flush(); }
    std::filesystem::resize_file(bank, bank_bytes);
    state["banks"].push_back(
        {{"layer", L}, {"codebook_base", state["codebook_base"][L]}, {"bytes", bank_bytes}});
  }
  auto again = waste::ContainerWriter::Resume(dir, state);
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_TRUE((*again)->Finish().ok());
}

// One planner: `waste plan --json` reports as wasted's the floor and default
// budget that `wasted --check` reports, for the tiny presets and for the
// shapes of kimi-linear-48b, qwen3-30b-a3b, glm-4.5-air, gpt-oss-20b (MXFP4 experts)
// qwen3-next-80b-a3b and kimi-k3-slice.
TEST_F(Cli, PlanAndCheckAgreeOnWastedsFloorAndBudget) {
  const std::string root = ::testing::TempDir() + "/waste-cli-plan-" + std::to_string(getpid());
  for (const char* preset :
       {"tiny-kimi", "tiny-deepseek", "tiny-qwen3", "tiny-glm", "tiny-qwen3-next", "tiny-gpt-oss",
        "kimi-linear-48b", "qwen3-30b-a3b", "glm-4.5-air", "gpt-oss-20b", "qwen3-next-80b-a3b",
        "tiny-k3", "kimi-k3-slice"}) {
    const std::string dir = root + "/" + preset;
    std::filesystem::create_directories(dir);
    if (std::string(preset).rfind("tiny-", 0) != 0) {
      WriteShapeContainer(preset, dir);
    } else {
      const Outcome w = Exec("waste synth -q --force --preset " + std::string(preset) + " " + dir);
      ASSERT_EQ(w.code, 0) << w.out;
    }
    const Outcome plan = Exec("waste plan --json " + dir);
    ASSERT_EQ(plan.code, 0) << plan.out;
    const auto j = nlohmann::json::parse(plan.out)["wasted"];
    const Outcome check = Exec("wasted --check " + dir);
    ASSERT_EQ(check.code, 0) << check.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(check.out, m,
                                  std::regex(R"(budget [^(]*\((\d+) bytes\), floor [^(]*\((\d+) bytes\))")))
        << check.out;
    EXPECT_EQ(std::stoull(m[2]), j["floor"].get<uint64_t>()) << preset << ": " << check.out;
    ASSERT_TRUE(j.contains("budget")) << preset << ": " << j.dump();
    EXPECT_EQ(std::stoull(m[1]), j["budget"].get<uint64_t>()) << preset << ": " << check.out;
    EXPECT_EQ(j["floor"].get<uint64_t>(), j["trunk"].get<uint64_t>() +
                                              j["min_expert_cache"].get<uint64_t>() +
                                              j["overhead"].get<uint64_t>());
  }
  std::filesystem::remove_all(root);
}

// `waste info --json` on the released shapes of Qwen3-30B-A3B and
// GLM-4.5-Air: their layers, attention and routing, and parameter counts
// near the published totals (30.5B and 106B; config_test has the active ones).
TEST_F(Cli, InfoDescribesTheGqaFamiliesAtTheirReleasedShapes) {
  const std::string root = ::testing::TempDir() + "/waste-cli-info-" + std::to_string(getpid());
  struct Want {
    const char* preset;
    int moe_layers, heads, kv_heads, rotary_dim;
    const char* scores;
    bool correction_bias;
    double total;
  };
  for (const Want& w : {Want{"qwen3-30b-a3b", 48, 32, 4, 128, "softmax", false, 30.5e9},
                        Want{"glm-4.5-air", 45, 96, 8, 64, "sigmoid", true, 106.9e9}}) {
    const std::string dir = root + "/" + w.preset;
    std::filesystem::create_directories(dir);
    WriteShapeContainer(w.preset, dir);
    const Outcome info = Exec("waste info --json " + dir);
    ASSERT_EQ(info.code, 0) << info.out;
    const auto j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["moe_layers"].get<int>(), w.moe_layers) << w.preset;
    EXPECT_EQ(j["gqa_layers"].get<int>(), j["layers"].get<int>()) << w.preset;
    EXPECT_EQ(j["gqa"]["heads"].get<int>(), w.heads) << w.preset;
    EXPECT_EQ(j["gqa"]["kv_heads"].get<int>(), w.kv_heads) << w.preset;
    EXPECT_EQ(j["gqa"]["head_dim"].get<int>(), 128) << w.preset;
    EXPECT_EQ(j["gqa"]["rotary_dim"].get<int>(), w.rotary_dim) << w.preset;
    EXPECT_EQ(j["experts"]["routing"]["scores"].get<std::string>(), w.scores) << w.preset;
    EXPECT_EQ(j["experts"]["routing"]["correction_bias"].get<bool>(), w.correction_bias);
    EXPECT_NEAR(j["params_total"].get<double>(), w.total, 0.1e9) << w.preset;
    const Outcome text = Exec("waste info " + dir);
    ASSERT_EQ(text.code, 0) << text.out;
    EXPECT_TRUE(Has(text.out, std::to_string(w.heads) + " query heads over " +
                                  std::to_string(w.kv_heads) + " KV heads of 128"))
        << text.out;
  }
  std::filesystem::remove_all(root);
}

// Qwen3.5 MoE at its released shapes: the layer mix and the parameter counts
// `waste info` gives, against the published totals and active counts
// (35B-A3B, 122B-A10B, 397B-A17B).
TEST_F(Cli, InfoDescribesQwen35MoeAtReleasedShapes) {
  struct Want {
    const char* preset;
    int layers;
    double total, active;  // billions, as the names round them
  };
  for (const Want& w : {Want{"qwen3.5-35b-a3b", 40, 35, 3}, Want{"qwen3.5-122b-a10b", 48, 122, 10},
                        Want{"qwen3.5-397b-a17b", 60, 397, 17}}) {
    const std::string dir =
        ::testing::TempDir() + "/waste-cli-q35-" + w.preset + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    WriteShapeContainer(w.preset, dir);
    const Outcome info = Exec("waste info --json " + dir);
    ASSERT_EQ(info.code, 0) << info.out;
    const auto j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["gated_deltanet_layers"], w.layers / 4 * 3) << w.preset;
    EXPECT_EQ(j["gqa_layers"], w.layers / 4) << w.preset;
    EXPECT_EQ(j["moe_layers"], w.layers) << w.preset;
    EXPECT_EQ(j["layer_mix"].get<std::string>().substr(0, 8), "DDDGDDDG") << w.preset;
    const double total = j["params_total"].get<double>() / 1e9,
                 active = j["params_active"].get<double>() / 1e9;
    std::printf("%s: %.3f B total, %.3f B active\n", w.preset, total, active);
    EXPECT_NEAR(total, w.total, 0.03 * w.total) << w.preset;
    EXPECT_NEAR(active, w.active, 0.1 * w.active) << w.preset;
    std::filesystem::remove_all(dir);
  }
}

// Qwen3-Next-80B-A3B at its released shapes: the layer mix and the
// parameter counts `waste info` gives (published: 80B total, 3B active).
TEST_F(Cli, InfoDescribesQwen3Next80b) {
  const std::string dir = ::testing::TempDir() + "/waste-cli-q3n-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  WriteShapeContainer("qwen3-next-80b-a3b", dir);
  const Outcome info = Exec("waste info --json " + dir);
  ASSERT_EQ(info.code, 0) << info.out;
  const auto j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["gated_deltanet_layers"], 36);
  EXPECT_EQ(j["gqa_layers"], 12);
  EXPECT_EQ(j["moe_layers"], 48);
  EXPECT_EQ(j["layer_mix"].get<std::string>().substr(0, 8), "DDDGDDDG");
  const double total = j["params_total"].get<double>(), active = j["params_active"].get<double>();
  std::printf("qwen3-next-80b-a3b: %.3f B total, %.3f B active\n", total / 1e9, active / 1e9);
  EXPECT_GT(total, 79e9);
  EXPECT_LT(total, 81e9);
  EXPECT_GT(active, 3e9);
  EXPECT_LT(active, 4e9);
  std::filesystem::remove_all(dir);
}

// Kimi K3: waste info names its parts, its experts in the latent width and
// what it does not build; waste plan sizes its records.
TEST_F(Cli, InfoAndPlanDescribeKimiK3) {
  const std::string dir = ::testing::TempDir() + "/waste-cli-k3-" + std::to_string(getpid());
  ASSERT_EQ(Exec("waste synth -q --force --preset tiny-k3 " + dir).code, 0);
  Outcome r = Exec("waste info " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "KimiK3ForConditionalGeneration")) << r.out;
  EXPECT_TRUE(Has(r.out, "KKKMKM")) << r.out;
  EXPECT_TRUE(Has(r.out, "32 per layer, top-4, 2 shared")) << r.out;
  EXPECT_TRUE(Has(r.out, "experts read and write 128 wide")) << r.out;
  EXPECT_TRUE(Has(r.out, "blocks of 2 layers: up to 3 block representations")) << r.out;
  EXPECT_TRUE(Has(r.out, "SiTU (beta 4.0, linear beta 25.0)")) << r.out;
  EXPECT_TRUE(Has(r.out, "KDA decay bounded below by -5.0")) << r.out;
  EXPECT_FALSE(Has(r.out, "ignored")) << r.out;
  r = Exec("waste plan " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "records of experts 128 wide, the latent")) << r.out;
  EXPECT_TRUE(Has(r.out, "Attention Residuals' block representations")) << r.out;
  // A vision tensor outside language_model., as WARP's K3 container keeps
  // them: listed, never read, not made resident.
  json m = json::parse(waste::testing::ReadText(dir + "/manifest.json"));
  json vision = m["trunk"][1];
  const uint64_t resident_before =
      json::parse(Exec("waste info --json " + dir).out)["trunk_resident_bytes"];
  vision["name"] = "vision_tower.encoder.blocks.0.wqkv.weight";
  m["trunk"].push_back(vision);
  std::ofstream(dir + "/manifest.json") << m.dump();
  r = Exec("waste info --json " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["ignored_tensors"]["tensors"], 1);
  EXPECT_EQ(j["trunk_resident_bytes"].get<uint64_t>(), resident_before);
  EXPECT_EQ(j["experts"]["input_width"], 128);
  EXPECT_EQ(j["kimi_k3"]["attn_res_blocks"], 3);
  EXPECT_TRUE(j["kimi_k3"]["mla_output_gate"].get<bool>());
  EXPECT_TRUE(Has(Exec("waste info " + dir).out, "1 tensors outside language_model."));
  r = Exec("waste run " + dir + " hello -n 3");  // it runs, vision tensor and all
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove_all(dir);

  // The slice's shapes: 896 experts of 3072 over the 3584 latent, top-16.
  const std::string slice = ::testing::TempDir() + "/waste-cli-k3s-" + std::to_string(getpid());
  std::filesystem::create_directories(slice);
  WriteShapeContainer("kimi-k3-slice", slice);
  const json info = json::parse(Exec("waste info --json " + slice).out);
  EXPECT_EQ(info["experts"]["per_layer"], 896);
  EXPECT_EQ(info["experts"]["top_k"], 16);
  EXPECT_EQ(info["experts"]["shared"], 2);
  EXPECT_EQ(info["experts"]["input_width"], 3584);
  EXPECT_EQ(info["layer_mix"], "KM");
  const json plan = json::parse(Exec("waste plan --json " + slice).out);
  const uint64_t record = info["experts"]["record_bytes"];
  std::printf("kimi-k3-slice: record %llu bytes, working set %llu, floor %llu\n",
              static_cast<unsigned long long>(record),
              static_cast<unsigned long long>(plan["working_set"].get<uint64_t>()),
              static_cast<unsigned long long>(plan["floor"].get<uint64_t>()));
  EXPECT_EQ(plan["min_expert_cache"].get<uint64_t>(), 16 * record);
  EXPECT_EQ(plan["working_set"].get<uint64_t>(), 16 * record);  // one MoE layer
  std::filesystem::remove_all(slice);
}

TEST_F(Cli, RunStreamsAndSummarizes) {
  Outcome r = Exec("waste run " + *dir_ + " \"hello world\" -n 6 --temp 0.7 --seed 3 --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "generated in")) << r.out;
  EXPECT_TRUE(Has(r.out, "GB read")) << r.out;
  // Same seed, same text.
  auto text = [&](int threads) {  // the generated text, without the summary line
    const std::string out =
        Exec("waste run " + *dir_ + " \"hello world\" -n 6 --temp 0.7 --seed 3 --threads " +
             std::to_string(threads))
            .out;
    return out.substr(0, out.rfind("\n["));
  };
  EXPECT_EQ(text(1), text(2));
  r = Exec("waste run " + *dir_ + " --ids 1,2,99999 -n 2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "outside the vocabulary")) << r.out;
}

TEST_F(Cli, EvalJsonAndRawLogits) {
  const std::string logits = *dir_ + "/logits.f32";
  // --local: without it, a machine with no daemon adds a notice (on stderr,
  // which Exec merges) before the JSON.
  Outcome r =
      Exec("waste eval " + *dir_ + " --ids 376,17,101 --json --top 3 --local --logits " + logits);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 3);
  ASSERT_EQ(j["top"].size(), 3u);
  EXPECT_GE(j["top"][0]["logit"].get<double>(), j["top"][1]["logit"].get<double>());
  EXPECT_EQ(std::filesystem::file_size(logits), 3u * 512 * 4);  // every position, float32
}

TEST_F(Cli, TokenizeAndDetokenizeRoundTrip) {
  Outcome ids = Exec("waste tokenize " + *dir_ + " \"the cache <|im_end|> hello\"");
  ASSERT_EQ(ids.code, 0) << ids.out;
  ids.out.pop_back();  // newline
  Outcome text = Exec("waste detokenize " + *dir_ + " " + ids.out);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(text.out, "the cache <|im_end|> hello\n");
  // Markup resolves the control token to its id; content keeps it as text.
  EXPECT_NE(Exec("waste tokenize --markup " + *dir_ + " \"<|im_end|>\"").out,
            Exec("waste tokenize " + *dir_ + " \"<|im_end|>\"").out);
}

TEST_F(Cli, ChatSavesAndLoadsState) {
  const std::string state = *dir_ + "/chat.state";
  Outcome r = Exec("waste chat " + *dir_ + " -n 4 < /dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  r = Shell("printf 'hello\\n/stats\\n/save " + state + "\\n/load " + state +
            "\\n/reset\\n/quit\\n' | " + Bin("waste") + " chat " + *dir_ +
            " -n 4");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "position")) << r.out;
  EXPECT_TRUE(Has(r.out, "saved")) << r.out;
  EXPECT_TRUE(Has(r.out, "loaded")) << r.out;
}

// What a user types in `waste chat` is content: "<|im_end|>" typed stays
// text (its content ids), and only the template around it is markup. The
// context after the turn (-n 0: no reply) holds exactly those ids.
TEST_F(Cli, ChatKeepsTypedMarkupAsText) {
  const auto count = [&](const std::string& flags, const std::string& text) {
    const Outcome r = Exec("waste tokenize " + flags + *dir_ + " '" + text + "'");
    EXPECT_EQ(r.code, 0) << r.out;
    return static_cast<int>(std::count(r.out.begin(), r.out.end(), ',')) + 1;
  };
  const std::string typed = "<|im_end|><|im_system|>";
  const int content = count("", typed);
  ASSERT_GT(content, 2) << "the typed text is too short to tell";
  EXPECT_EQ(count("--markup ", typed), 2);
  std::ifstream chat_file(*dir_ + "/chat.json");
  const nlohmann::json chat = nlohmann::json::parse(chat_file);
  // The first turn as RenderChat lays it out: bos, the default system turn
  // (Kimi's template has one), the user's turn around the typed text, open.
  std::string before = chat["bos"].get<std::string>();
  if (!chat["default_system"].get<std::string>().empty())
    before += chat["system"][0].get<std::string>() + chat["default_system"].get<std::string>() +
              chat["system"][1].get<std::string>();
  before += chat["user"][0].get<std::string>();
  const int want = count("--markup ", before) + content +
                   count("--markup ", chat["user"][1].get<std::string>() + chat["open"].get<std::string>());
  const Outcome r = Shell("printf '" + typed + "\\n/stats\\n/quit\\n' | " +
                          Bin("waste") + " chat " + *dir_ + " -n 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "position " + std::to_string(want) + " of")) << "want " << want << "\n" << r.out;
}

// --chat-format on the commands that chat: naming the container's own
// family (tiny-kimi's chat.json is Kimi K2's) changes nothing, another
// family's layout is the one used; a family whose end of turn the
// vocabulary lacks, and a name not known, are refused, naming the known ones.
TEST_F(Cli, ChatFormatIsChosenByName) {
  const auto position = [&](const std::string& flags) {
    const Outcome r = Shell("printf 'hello\\n/stats\\n/quit\\n' | " + Bin("waste") + " chat " +
                            *dir_ + " -n 0 " + flags);
    EXPECT_EQ(r.code, 0) << flags << "\n" << r.out;
    const size_t at = r.out.find("position ");
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find(" of", at) - at);
  };
  const std::string own = position("");
  ASSERT_FALSE(own.empty());
  EXPECT_EQ(position("--chat-format kimi-k2"), own);
  EXPECT_NE(position("--chat-format qwen3"), own);
  const std::string known = "kimi-k2, deepseek-v3, deepseek-v3.1, qwen3, qwen3.5, glm-4.5, harmony";
  for (const char* cmd : {"chat", "serve"}) {
    Outcome r =
        Exec("waste " + std::string(cmd) + " " + *dir_ + " --chat-format chatml < /dev/null");
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_TRUE(Has(r.out, "--chat-format: chat format \"chatml\" is not one of " + known))
        << cmd << "\n"
        << r.out;
  }
  Outcome r = Exec("waste chat " + *dir_ + " --chat-format harmony < /dev/null");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.out, "--chat-format: chat format harmony: its end of turn \"<|return|>\""))
      << r.out;

  // A GGUF's: waste info shows the family chosen, and refuses what chat would.
  const std::string qwen3 = std::string(WASTE_FIXTURES) + "/gguf/tokenizer/qwen3.gguf";
  r = Exec("waste info --json " + qwen3 + " --chat-format kimi-k2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["chat"]["family"], "kimi-k2") << r.out;
  r = Exec("waste info " + qwen3 + " --chat-format chatml");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "--chat-format: chat format \"chatml\" is not one of " + known)) << r.out;
  r = Exec("waste info " + *dir_ + " --chat-format qwen3");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "--chat-format: waste info takes it for a GGUF file")) << r.out;
}

TEST_F(Cli, DiskbenchReadsRecordsAtEachDepth) {
  Outcome r = Exec("waste-diskbench " + *dir_ + " --depths 1,3 --seconds 0.2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "record 40960 bytes, 5 banks")) << r.out;
  // One line per depth, each with a positive throughput.
  for (const char* depth : {"\n       1 ", "\n       3 "}) EXPECT_TRUE(Has(r.out, depth)) << r.out;
  EXPECT_EQ(Exec("waste-diskbench /nonexistent").code, 1);
}

// A GGUF file (tests/fixtures/gguf/tiny.gguf, written by the gguf package):
// described by waste info, refused by name by the commands that run a model.
TEST_F(Cli, InfoDescribesAGgufAndTheOthersRefuseIt) {
  const std::string gguf = std::string(WASTE_FIXTURES) + "/gguf/tiny.gguf";
  Outcome r = Exec("waste info " + gguf);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "model       tiny-moe (qwen3moe)")) << r.out;
  EXPECT_TRUE(Has(r.out, "experts     8 per layer, top-2")) << r.out;
  EXPECT_TRUE(Has(r.out, "Q4_K      12.4%  288 B in 1 tensors")) << r.out;
  EXPECT_TRUE(Has(r.out, "running     not supported yet")) << r.out;
  // Its metadata is not a whole model's: the mapping says which key is missing.
  EXPECT_TRUE(Has(r.out, "mapped      refused: qwen3moe.embedding_length is missing")) << r.out;
  r = Exec("waste info --json " + gguf);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["context_length"], 4096);
  EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
  EXPECT_EQ(j["types"].size(), 6u);
  EXPECT_EQ(j["runs"], false);
  for (const std::string& cmd : {"waste run " + gguf + " hi", "waste plan " + gguf,
                                "wasted --check " + gguf}) {
    r = Exec(cmd);
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_TRUE(Has(r.out, "a GGUF file: `waste info` reads it, but running a GGUF is not "
                           "supported yet")) << cmd << "\n" << r.out;
  }
  r = Exec("waste info " + std::string(WASTE_FIXTURES) + "/../fuzz/gguf/seed-unknown-type");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "tensor 'blk.0.ffn_gate_exps.weight': unknown ggml type 77")) << r.out;
}

// A GGUF llama.cpp's converter made (tests/fixtures/gguf/mapped/): the
// model waste maps it to, and the bytes of one expert record.
TEST_F(Cli, InfoMapsAGgufToWastesModel) {
  const std::string gguf = std::string(WASTE_FIXTURES) + "/gguf/mapped/deepseek2.gguf";
  Outcome r = Exec("waste info " + gguf);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "mapped      deepseek_v3: 2 layers (1 MoE)")) << r.out;
  EXPECT_TRUE(Has(r.out, "expert      6.00 KiB a record (gate BF16 2.00 KiB, up BF16 2.00 KiB, "
                         "down BF16 2.00 KiB) in 1 layer")) << r.out;
  r = Exec("waste info --json " + gguf);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out)["mapped"];
  EXPECT_EQ(j["config"]["kv_lora_rank"], 32);
  EXPECT_EQ(j["expert_records"][0]["bytes"], 6144);
  EXPECT_EQ(j["expert_records"][0]["types"], "BF16/BF16/BF16");
}

// A GGUF's tokenizer and chat family (tests/fixtures/gguf/tokenizer/, as
// llama.cpp's converter writes them): waste info says what it found, waste
// tokenize and detokenize take the file; tiny.gguf's incomplete tokenizer
// is named, not run.
TEST_F(Cli, AGgufsTokenizerIsReadAndItsChatFamilyNamed) {
  const std::string dir = std::string(WASTE_FIXTURES) + "/gguf/tokenizer";
  Outcome r = Exec("waste info " + dir + "/qwen3.gguf");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "tokenizer   gpt2 (pre qwen2), 3034 tokens")) << r.out;
  EXPECT_TRUE(Has(r.out, "read: 26 specials")) << r.out;
  EXPECT_TRUE(Has(r.out, "chat        qwen3")) << r.out;
  r = Exec("waste info --json " + dir + "/gpt-oss.gguf");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["chat"]["family"], "harmony") << r.out;

  const json want = json::parse(waste::testing::ReadText(dir + "/qwen3.json"));
  const std::string text = want["markup"][5], file = *dir_ + "-markup.txt";
  waste::testing::WriteText(file, text);
  std::string ids;
  for (const json& id : want["markup_ids"][5]) ids += (ids.empty() ? "" : ",") + id.dump();
  r = Exec("waste tokenize --markup " + dir + "/qwen3.gguf @" + file);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, ids + "\n");
  r = Exec("waste detokenize " + dir + "/qwen3.gguf " + ids);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, text + "\n");

  r = Exec("waste info " + std::string(WASTE_FIXTURES) + "/gguf/tiny.gguf");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "not read: tokenizer.ggml.pre: missing")) << r.out;
  r = Exec("waste tokenize " + std::string(WASTE_FIXTURES) + "/gguf/tiny.gguf hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "tokenizer.ggml.pre: missing")) << r.out;
}

TEST_F(Cli, BadInputGetsAClearError) {
  Outcome r = Exec("waste info /nonexistent-container");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "manifest.json: No such file")) << r.out;
  r = Exec("waste synth --preset nope " + ::testing::TempDir() + "/waste-cli-nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "unknown preset \"nope\"")) << r.out;
  r = Exec("waste synth -q " + *dir_);  // already a container, no --force
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "already holds a container")) << r.out;
  // A spec file's error names the file and the field.
  const std::string spec = ::testing::TempDir() + "/waste-cli-spec.json";
  std::ofstream(spec) << R"({"config": {"model_type": "kimi_linear"}, "trunk_bits": "4"})";
  r = Exec("waste synth --config " + spec + " " + ::testing::TempDir() + "/waste-cli-spec");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, spec + ": synth config: trunk_bits is not an integer")) << r.out;
  r = Exec("waste frobnicate");
  EXPECT_NE(r.code, 0);
  r = Exec("wastectl");
  EXPECT_EQ(r.code, 2);
}

}  // namespace
