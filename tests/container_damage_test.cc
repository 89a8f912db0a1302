// Damaged containers. A good synthetic container (tiny-kimi) is written once
// per suite; every case copies it, applies one kind of damage and checks that
// the reader refuses it with a message naming the file and the field:
//   - Container::Open for damage to manifest.json and the files it names;
//   - Container::ReadRecord / CheckRecord for damage inside one expert record
//     (Open cannot see it: banks are checked record by record as they are read).
// Nothing may crash or throw. A last test damages the container at random.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"
#include "engine/format/layout.h"
#include "engine/synth/synth.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using format::ExpertHeader;
using nlohmann::json;

// ---------------------------------------------------------------------------
// File helpers. They throw on a broken test setup (a file the test expects is
// missing); the reader under test never sees an exception from here.

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("test setup: cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test setup: cannot write " + p.string());
}

// Overwrites bytes of `p` at `off` with the little-endian bytes of `v`.
template <class T>
void Poke(const fs::path& p, uint64_t off, T v) {
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(off));
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
  if (!f) throw std::runtime_error("test setup: cannot poke " + p.string());
}

template <class T>
T Peek(const fs::path& p, uint64_t off) {
  std::ifstream f(p, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(off));
  T v{};
  f.read(reinterpret_cast<char*>(&v), sizeof v);
  if (!f) throw std::runtime_error("test setup: cannot peek " + p.string());
  return v;
}

json LoadManifest(const fs::path& dir) {
  return json::parse(ReadAll(dir / "manifest.json"));
}
void SaveManifest(const fs::path& dir, const json& m) {
  WriteAll(dir / "manifest.json", m.dump(1));
}

// The manifest's trunk entry for tensor `name`.
json& TrunkEntry(json& m, std::string_view name) {
  for (json& t : m["trunk"]) {
    if (t["name"] == name) return t;
  }
  throw std::runtime_error("test setup: the manifest has no tensor " + std::string(name));
}

uint64_t RecordBytes(const fs::path& dir) {
  const json m = LoadManifest(dir);
  return m["layers"]["1"]["bytes"].get<uint64_t>() / m["layers"]["1"]["experts"].get<uint64_t>();
}

uint64_t CodebookBytes(const fs::path& dir) {
  const json q = LoadManifest(dir)["expert_quant"];
  return sizeof(format::CodebookHeader) +
         2 * q["entries"].get<uint64_t>() * q["vec_dim"].get<uint64_t>();
}

// ---------------------------------------------------------------------------
// Damage builders: each returns a function that damages the container in a
// directory.

using Damage = std::function<void(const fs::path& dir)>;

Damage EditManifest(std::function<void(json&)> edit) {
  return [edit](const fs::path& dir) {
    json m = LoadManifest(dir);
    edit(m);
    SaveManifest(dir, m);
  };
}
Damage EditConfig(std::function<void(json&)> edit) {
  return EditManifest([edit](json& m) { edit(m["config"]); });
}
Damage EditQuant(std::function<void(json&)> edit) {
  return EditManifest([edit](json& m) { edit(m["expert_quant"]); });
}
Damage EditTensor(std::string name, std::function<void(json&)> edit) {
  return EditManifest([name, edit](json& m) { edit(TrunkEntry(m, name)); });
}
Damage Replace(std::string file, std::string text) {
  return [file, text](const fs::path& dir) { WriteAll(dir / file, text); };
}
Damage Remove(std::string file) {
  return [file](const fs::path& dir) { fs::remove(dir / file); };
}
Damage ReplaceWithDirectory(std::string file) {
  return [file](const fs::path& dir) {
    fs::remove(dir / file);
    fs::create_directory(dir / file);
  };
}
Damage TruncateTo(std::string file, uint64_t size) {
  return [file, size](const fs::path& dir) { fs::resize_file(dir / file, size); };
}
// Negative `delta` shortens the file, positive extends it with zeros.
Damage Resize(std::string file, int64_t delta) {
  return [file, delta](const fs::path& dir) {
    const auto size = static_cast<int64_t>(fs::file_size(dir / file));
    fs::resize_file(dir / file, static_cast<uintmax_t>(size + delta));
  };
}
template <class T>
Damage PokeCodebook(int codebook, size_t field_offset, T value) {
  return [=](const fs::path& dir) {
    Poke(dir / "codebooks.bin", CodebookBytes(dir) * static_cast<uint64_t>(codebook) + field_offset,
         value);
  };
}

// The record every record case damages: layer 1, expert 3.
constexpr int kLayer = 1;
constexpr int kExpert = 3;
const char* const kBank = "experts-L1.bin";

template <class T>
Damage PokeRecord(size_t offset, T value) {
  return
      [=](const fs::path& dir) { Poke(dir / kBank, RecordBytes(dir) * kExpert + offset, value); };
}
Damage FlipRecordByte(size_t offset) {
  return [=](const fs::path& dir) {
    const uint64_t at = RecordBytes(dir) * kExpert + offset;
    Poke(dir / kBank, at, static_cast<uint8_t>(Peek<uint8_t>(dir / kBank, at) ^ 0xff));
  };
}

// ---------------------------------------------------------------------------
// Outcomes.

// `expect` lists fragments of the message, in order, separated by "...".
::testing::AssertionResult MessageMatches(const std::string& message, const std::string& expect) {
  size_t pos = 0, from = 0;
  while (from <= expect.size()) {
    size_t to = expect.find("...", from);
    if (to == std::string::npos) to = expect.size();
    std::string frag = expect.substr(from, to - from);
    while (!frag.empty() && frag.front() == ' ') frag.erase(frag.begin());
    while (!frag.empty() && frag.back() == ' ') frag.pop_back();
    const size_t at = message.find(frag, pos);
    if (at == std::string::npos)
      return ::testing::AssertionFailure()
             << "the message \"" << message << "\" lacks \"" << frag << "\"";
    pos = at + frag.size();
    from = to + 3;
  }
  return ::testing::AssertionSuccess();
}

struct OpenOutcome {
  bool ok = false;
  bool threw = false;
  std::string message;  // the status message, or what() of an escaped exception
};

OpenOutcome TryOpen(const fs::path& dir) {
  try {
    auto c = Container::Open(dir.string());
    return {c.ok(), false, c.status().message()};
  } catch (const std::exception& e) {
    return {false, true, e.what()};
  } catch (...) {
    return {false, true, "an exception that is not a std::exception"};
  }
}

// ---------------------------------------------------------------------------
// The fixture: one good container per suite, a fresh copy per test.

class DamageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static int suite = 0;
    root_ = fs::path(::testing::TempDir()) /
            ("waste_container_damage_" + std::to_string(getpid()) + "_" + std::to_string(++suite));
    fs::remove_all(root_);
    fs::create_directories(root_);
    good_ = root_ / "good";
    setup_error_.clear();
    auto spec = SynthPreset("tiny-kimi");
    if (!spec.ok()) {
      setup_error_ = spec.status().message();
      return;
    }
    auto report = WriteSynthetic(*spec, good_.string(), /*overwrite=*/true, /*jobs=*/1, nullptr);
    if (!report.ok()) setup_error_ = report.status().message();
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << "writing the good container: " << setup_error_;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    for (char& ch : name) {
      if (ch == '/') ch = '_';
    }
    copy_ = root_ / name;
    fs::remove_all(copy_);
    fs::copy(good_, copy_, fs::copy_options::recursive);
  }
  void TearDown() override {
    std::error_code ec;
    if (!copy_.empty()) fs::remove_all(copy_, ec);
  }

  static fs::path root_;
  static fs::path good_;
  static std::string setup_error_;
  fs::path copy_;  // this test's container, free to damage
};

fs::path DamageTest::root_;
fs::path DamageTest::good_;
std::string DamageTest::setup_error_;

// ---------------------------------------------------------------------------
// Damage that Open must refuse.

struct OpenCase {
  std::string name;
  Damage damage;
  std::string expect;  // fragments of the message, in order, separated by "..."
};

std::ostream& operator<<(std::ostream& os, const OpenCase& c) {
  return os << c.name;
}

json Nested(int depth) {
  json j = json::array();
  for (int i = 1; i < depth; ++i) j = json::array({j});
  return j;
}

std::vector<OpenCase> ManifestCases() {
  const uint64_t k2_62 = uint64_t{1} << 62, k2_63 = uint64_t{1} << 63;
  return {
      // The file itself.
      {"manifest_missing", Remove("manifest.json"), "manifest.json: No such file or directory"},
      {"manifest_is_a_directory", ReplaceWithDirectory("manifest.json"),
       "manifest.json: not a regular file"},
      {"manifest_over_64_MiB", TruncateTo("manifest.json", kMaxManifestBytes + 1),
       "manifest.json: 67108865 bytes, more than the 67108864 allowed"},
      {"manifest_empty", Replace("manifest.json", ""), "manifest.json: not valid JSON"},
      {"manifest_not_json", Replace("manifest.json", "format_version = 0\n"),
       "manifest.json: not valid JSON"},
      {"manifest_cut_in_half",
       [](const fs::path& dir) {
         const std::string text = ReadAll(dir / "manifest.json");
         WriteAll(dir / "manifest.json", text.substr(0, text.size() / 2));
       },
       "manifest.json: not valid JSON"},
      {"manifest_not_an_object", Replace("manifest.json", "[0, 1, 2]"),
       "manifest.json: not a JSON object"},
      {"manifest_nested_deeper_than_64", EditManifest([](json& m) { m["deep"] = Nested(100); }),
       "manifest.json: nested deeper than 64 levels"},
      {"format_version_missing", EditManifest([](json& m) { m.erase("format_version"); }),
       "manifest.json: format_version is missing"},
      {"format_version_1", EditManifest([](json& m) { m["format_version"] = 1; }),
       "manifest.json: format_version 1, this build reads 0"},
      {"format_version_string", EditManifest([](json& m) { m["format_version"] = "0"; }),
       "manifest.json: format_version \"0\", this build reads 0"},
      {"tensor_prefix_not_string", EditManifest([](json& m) { m["tensor_prefix"] = 7; }),
       "manifest.json: tensor_prefix is not a short string"},
      {"tensor_prefix_wrong", EditManifest([](json& m) { m["tensor_prefix"] = "x."; }),
       "manifest.json: trunk has no tensor x.model.embed_tokens.weight"},

      // config
      {"config_missing", EditManifest([](json& m) { m.erase("config"); }),
       "manifest.json: config is missing"},
      {"config_not_object", EditManifest([](json& m) { m["config"] = json::array(); }),
       "manifest.json: config is not an object"},
      // A nested text_config is read (K3's release): an empty one names what it lacks.
      {"config_text_config", EditConfig([](json& c) { c["text_config"] = json::object(); }),
       "manifest.json: text_config: config.model_type is missing"},
      {"config_text_config_not_object", EditConfig([](json& c) { c["text_config"] = 3; }),
       "manifest.json: config.text_config is not an object"},
      {"model_type_unknown", EditConfig([](json& c) { c["model_type"] = "llama"; }),
       "manifest.json: config.model_type \"llama\" is not supported"},
      {"hidden_size_0", EditConfig([](json& c) { c["hidden_size"] = 0; }),
       "manifest.json: config.hidden_size = 0 is outside [8, 1048576]"},
      {"hidden_size_2_30", EditConfig([](json& c) { c["hidden_size"] = 1 << 30; }),
       "manifest.json: config.hidden_size = 1073741824 is outside [8, 1048576]"},
      {"hidden_size_string", EditConfig([](json& c) { c["hidden_size"] = "256"; }),
       "manifest.json: config.hidden_size is not an integer"},
      {"hidden_size_2_64_minus_1", EditConfig([](json& c) { c["hidden_size"] = UINT64_MAX; }),
       "manifest.json: config.hidden_size = ... is outside [8, 1048576]"},
      {"num_hidden_layers_10000", EditConfig([](json& c) { c["num_hidden_layers"] = 10000; }),
       "manifest.json: config.num_hidden_layers = 10000 is outside [1, 512]"},
      {"top_k_above_num_experts", EditConfig([](json& c) { c["num_experts_per_token"] = 17; }),
       "manifest.json: config: top-k 17 of 16 experts is not a valid routing"},
      {"num_experts_changed", EditConfig([](json& c) { c["num_experts"] = 8; }),
       "manifest.json: layers.1.experts = 16, the config says 8"},
      {"kda_layers_holds_99", EditConfig([](json& c) {
         c["linear_attn_config"]["kda_layers"] = {1, 2, 99};
       }),
       "manifest.json: config.linear_attn_config.kda_layers holds 99, not a layer number in [1, "
       "6]"},
      {"mla_use_nope_string", EditConfig([](json& c) { c["mla_use_nope"] = "yes"; }),
       "manifest.json: config.mla_use_nope is not true or false"},
      {"rope_scaling_linear", EditConfig([](json& c) {
         c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       }),
       "manifest.json: config.rope_scaling type \"linear\" is not implemented (only yarn)"},

      // expert_quant
      {"expert_quant_missing", EditManifest([](json& m) { m.erase("expert_quant"); }),
       "manifest.json: expert_quant is missing or not an object"},
      {"expert_quant_stages_0", EditQuant([](json& q) { q["stages"] = 0; }),
       "manifest.json: expert_quant.stages = 0 is below 1"},
      {"expert_quant_stages_2_resizes_records", EditQuant([](json& q) {
         q["stages"] = 2;
         q.erase("fmt");
       }),
       "manifest.json: layers.1.bytes = 655360, but 16 records of ... bytes are"},
      {"expert_quant_vec_dim_0", EditQuant([](json& q) { q["vec_dim"] = 0; }),
       "manifest.json: expert_quant.vec_dim = 0 is below 1"},
      {"expert_quant_vec_dim_16", EditQuant([](json& q) { q["vec_dim"] = 16; }),
       "manifest.json: expert_quant.vec_dim must be 8"},
      {"expert_quant_index_bits_6_with_3_stages", EditQuant([](json& q) { q["index_bits"] = 6; }),
       "manifest.json: expert_quant: index_bits 6 (VQ4P) needs 4 stages of 64 entries"},
      {"expert_quant_index_bits_7", EditQuant([](json& q) { q["index_bits"] = 7; }),
       "manifest.json: expert_quant.index_bits must be 8 or 6"},
      {"expert_quant_index_block_32", EditQuant([](json& q) { q["index_block"] = 32; }),
       "manifest.json: expert_quant.index_block must be 0 or 64, not 32"},
      {"expert_quant_q4gr_with_vq_fields", EditQuant([](json& q) { q["fmt"] = "Q4GR"; }),
       "manifest.json: expert_quant: Q4GR needs stages 0, vec_dim 128 (or 64, 32), entries 0, "
       "index_block 0, index_bits 4"},
      {"expert_quant_int4_with_vq_fields", EditQuant([](json& q) { q["fmt"] = "INT4"; }),
       "manifest.json: expert_quant: INT4 needs stages 0, vec_dim 32, entries 0, "
       "index_block 0, index_bits 4"},
      {"expert_quant_fmt_disagrees", EditQuant([](json& q) { q["fmt"] = "VQ4P"; }),
       "manifest.json: expert_quant.fmt \"VQ4P\" disagrees with stages 3 / index_bits 8"},

      // layers (the expert banks)
      {"layers_missing", EditManifest([](json& m) { m.erase("layers"); }),
       "manifest.json: layers is missing or not an object"},
      {"layers_without_moe_layer_3", EditManifest([](json& m) { m["layers"].erase("3"); }),
       "manifest.json: layers has no bank for MoE layer 3"},
      {"layers_entry_for_dense_layer_0", EditManifest([](json& m) {
         m["layers"]["0"] = m["layers"]["1"];
         m["layers"]["0"]["file"] = "experts-L0.bin";
       }),
       "manifest.json: layers has an entry \"0\" that is not a MoE layer of this config"},
      {"layers_entry_past_last_layer",
       EditManifest([](json& m) { m["layers"]["6"] = m["layers"]["5"]; }),
       "manifest.json: layers has an entry \"6\" that is not a MoE layer of this config"},
      {"layers_entry_not_a_number",
       EditManifest([](json& m) { m["layers"]["1a"] = json::object(); }),
       "manifest.json: layers has an entry \"1a\" that is not a MoE layer"},
      {"layers_entry_not_object", EditManifest([](json& m) { m["layers"]["1"] = 1; }),
       "manifest.json: layers.1 is not an object"},
      {"layers_file_escapes_directory",
       EditManifest([](json& m) { m["layers"]["1"]["file"] = "../etc/passwd"; }),
       "manifest.json: layers.1.file must be \"experts-L1.bin\""},
      {"layers_file_names_another_bank",
       EditManifest([](json& m) { m["layers"]["1"]["file"] = "experts-L2.bin"; }),
       "manifest.json: layers.1.file must be \"experts-L1.bin\""},
      {"layers_experts_15", EditManifest([](json& m) { m["layers"]["1"]["experts"] = 15; }),
       "manifest.json: layers.1.experts = 15, the config says 16"},
      {"layers_bytes_short_by_one_record",
       EditManifest([](json& m) { m["layers"]["1"]["bytes"] = 655360 - 40960; }),
       "manifest.json: layers.1.bytes = 614400, but 16 records of 40960 bytes are 655360"},
      {"layers_bytes_negative", EditManifest([](json& m) { m["layers"]["1"]["bytes"] = -1; }),
       "manifest.json: layers.1.bytes is not a non-negative integer"},
      {"layers_codebook_base_past_the_end",
       EditManifest([](json& m) { m["layers"]["5"]["codebook_base"] = 37; }),
       "manifest.json: layers.5.codebook_base 37 + 9 codebooks is past the 45 in codebooks.bin"},
      {"layers_codebook_base_huge",
       EditManifest([](json& m) { m["layers"]["5"]["codebook_base"] = 1 << 25; }),
       "manifest.json: layers.5.codebook_base = 33554432 is too large"},

      // trunk (the tensor index)
      {"trunk_not_a_list", EditManifest([](json& m) { m["trunk"] = json::object(); }),
       "manifest.json: trunk is missing or not a list"},
      {"trunk_entry_not_object", EditManifest([](json& m) { m["trunk"][0] = "x"; }),
       "manifest.json: trunk[0] is not an object"},
      {"trunk_name_missing", EditManifest([](json& m) { m["trunk"][0].erase("name"); }),
       "manifest.json: trunk[0].name is missing or not a short string"},
      {"tensor_fmt_4_expert_format",
       EditTensor("model.embed_tokens.weight", [](json& t) { t["fmt"] = 4; }),
       "manifest.json: trunk[0] (model.embed_tokens.weight).fmt 4 is not a trunk format"},
      {"tensor_fmt_6_sub1", EditTensor("model.embed_tokens.weight", [](json& t) { t["fmt"] = 6; }),
       "manifest.json: trunk[0] (model.embed_tokens.weight).fmt 6 is not a trunk format"},
      {"tensor_shape_empty",
       EditTensor("model.layers.0.input_layernorm.weight",
                  [](json& t) { t["shape"] = json::array(); }),
       "manifest.json: trunk[1] (model.layers.0.input_layernorm.weight).shape must be a list of 1 "
       "to 4 dimensions"},
      {"tensor_shape_5_dims",
       EditTensor("model.layers.0.input_layernorm.weight",
                  [](json& t) {
                    t["shape"] = {256, 1, 1, 1, 1};
                  }),
       "(model.layers.0.input_layernorm.weight).shape must be a list of 1 to 4 dimensions"},
      {"tensor_shape_holds_0",
       EditTensor("model.layers.0.self_attn.q_proj.weight",
                  [](json& t) {
                    t["shape"] = {256, 0};
                  }),
       "(model.layers.0.self_attn.q_proj.weight).shape holds 0, not a dimension in [1, 2^26]"},
      {"tensor_shape_holds_2_27",
       EditTensor("model.layers.0.self_attn.q_proj.weight",
                  [](json& t) {
                    t["shape"] = {int64_t{1} << 27, 256};
                  }),
       "(model.layers.0.self_attn.q_proj.weight).shape holds 134217728, not a dimension in [1, "
       "2^26]"},
      {"tensor_shape_holds_string",
       EditTensor("model.layers.0.self_attn.q_proj.weight",
                  [](json& t) {
                    t["shape"] = {"256", 256};
                  }),
       ".shape holds \"256\", not a dimension"},
      {"tensor_shape_2_52_elements",
       EditTensor("model.layers.0.self_attn.q_proj.weight",
                  [](json& t) {
                    t["shape"] = {int64_t{1} << 26, int64_t{1} << 26};
                  }),
       "(model.layers.0.self_attn.q_proj.weight).shape is too large"},
      {"required_tensor_removed", EditManifest([](json& m) {
         json& trunk = m["trunk"];
         for (auto it = trunk.begin(); it != trunk.end(); ++it) {
           if ((*it)["name"] == "model.norm.weight") {
             trunk.erase(it);
             break;
           }
         }
       }),
       "manifest.json: trunk has no tensor model.norm.weight"},
      {"required_tensor_wrong_shape",
       EditTensor("model.layers.0.self_attn.q_proj.weight",
                  [](json& t) {
                    t["shape"] = {256, 128};
                  }),
       "manifest.json: trunk tensor model.layers.0.self_attn.q_proj.weight has shape [256,128], "
       "the "
       "config needs [256,256]"},
      {"norm_wrong_element_count",
       EditTensor("model.norm.weight", [](json& t) { t["shape"] = {128}; }),
       "manifest.json: trunk tensor model.norm.weight has 128 elements, the config needs 256"},
      {"norm_stored_as_q8g",
       EditTensor("model.layers.0.input_layernorm.weight",
                  [](json& t) {
                    t["fmt"] = 2;
                    t["group"] = 128;
                    t["scale_off"] = t["off"].get<uint64_t>() + 256;
                  }),
       "manifest.json: trunk tensor model.layers.0.input_layernorm.weight must be F32 (fmt 0)"},
      {"dtype_on_a_q8g_tensor",
       EditTensor("model.embed_tokens.weight", [](json& t) { t["dtype"] = "bf16"; }),
       "(model.embed_tokens.weight).dtype is only meaningful for fmt 1"},
      {"q4g_odd_group",
       EditTensor("model.layers.0.self_attn.q_proj.weight", [](json& t) { t["group"] = 127; }),
       "(model.layers.0.self_attn.q_proj.weight).group must be even for Q4G"},
      {"grouped_tensor_without_scale_off",
       EditTensor("model.embed_tokens.weight", [](json& t) { t.erase("scale_off"); }),
       "(model.embed_tokens.weight).scale_off is missing"},
      {"tensor_bytes_below_its_shape",
       EditTensor("model.norm.weight", [](json& t) { t["bytes"] = 10; }),
       "(model.norm.weight).bytes 10 is less than the 1024 its shape and format need"},
      {"duplicate_tensor_name", EditManifest([](json& m) { m["trunk"].push_back(m["trunk"][1]); }),
       "manifest.json: trunk lists model.layers.0.input_layernorm.weight twice"},
      {"tensor_off_past_the_end",
       EditTensor("model.norm.weight", [](json& t) { t["off"] = uint64_t{1} << 32; }),
       "trunk.bin: tensor model.norm.weight (off 4294967296, 1024 bytes) runs past the end of the "
       "file"},
      {"tensor_straddles_the_end",
       [](const fs::path& dir) {
         const uint64_t size = fs::file_size(dir / "trunk.bin");
         EditTensor("model.norm.weight", [size](json& t) { t["off"] = size - 512; })(dir);
       },
       "trunk.bin: tensor model.norm.weight (off ... 1024 bytes) runs past the end of the file"},
      {"tensor_scale_off_past_the_end",
       EditTensor("model.embed_tokens.weight", [](json& t) { t["scale_off"] = uint64_t{1} << 32; }),
       "trunk.bin: tensor model.embed_tokens.weight scales (scale_off 4294967296, 2048 bytes) run "
       "past the end of the file"},
      {"tensor_off_2_62", EditTensor("model.norm.weight", [k2_62](json& t) { t["off"] = k2_62; }),
       "trunk.bin: tensor model.norm.weight (off 4611686018427387904, 1024 bytes) runs past the "
       "end"},
      {"tensor_scale_off_2_62",
       EditTensor("model.embed_tokens.weight", [k2_62](json& t) { t["scale_off"] = k2_62; }),
       "scales (scale_off 4611686018427387904, 2048 bytes) run past the end"},
      {"tensor_off_2_63", EditTensor("model.norm.weight", [k2_63](json& t) { t["off"] = k2_63; }),
       "(model.norm.weight).off = 9223372036854775808 is too large"},
      {"tensor_off_negative", EditTensor("model.norm.weight", [](json& t) { t["off"] = -1; }),
       "(model.norm.weight).off is not a non-negative integer"},
  };
}

std::vector<OpenCase> FileCases() {
  return {
      // trunk.bin
      {"trunk_truncated_to_1_MiB", TruncateTo("trunk.bin", 1 << 20),
       "trunk.bin: tensor ... runs past the end of the file (1048576 bytes)"},
      {"trunk_short_by_one_byte", Resize("trunk.bin", -1),
       "trunk.bin: tensor lm_head.weight scales ... run past the end of the file"},
      {"trunk_empty", TruncateTo("trunk.bin", 0),
       "trunk.bin: tensor model.embed_tokens.weight ... runs past the end of the file (0 bytes)"},
      {"trunk_missing", Remove("trunk.bin"), "trunk.bin: No such file or directory"},
      {"trunk_is_a_directory", ReplaceWithDirectory("trunk.bin"), "trunk.bin: not a regular file"},

      // codebooks.bin: 45 codebooks of 16 + 256 * 8 * 2 = 4112 bytes
      {"codebooks_short_by_one_byte", Resize("codebooks.bin", -1),
       "codebooks.bin: 185039 bytes is not a whole number of 4112-byte codebooks"},
      {"codebooks_missing", Remove("codebooks.bin"), "codebooks.bin: No such file or directory"},
      {"codebooks_empty", TruncateTo("codebooks.bin", 0),
       "manifest.json: layers.1.codebook_base 0 + 9 codebooks is past the 0 in codebooks.bin"},
      {"codebooks_one_codebook_short", Resize("codebooks.bin", -4112),
       "manifest.json: layers.5.codebook_base 36 + 9 codebooks is past the 44 in codebooks.bin"},
      {"codebook_2_bad_magic",
       PokeCodebook(2, offsetof(format::CodebookHeader, magic), uint32_t{0x12345678}),
       "codebooks.bin: codebook 2: bad magic"},
      {"codebook_2_says_7",
       PokeCodebook(2, offsetof(format::CodebookHeader, codebook_id), uint16_t{7}),
       "codebooks.bin: codebook 2 says it is codebook 7"},
      {"codebook_0_entries_255",
       PokeCodebook(0, offsetof(format::CodebookHeader, entries), uint32_t{255}),
       "codebooks.bin: codebook 0: 255 entries of dimension 8, the manifest says 256 of 8"},
      {"codebook_44_vec_dim_4",
       PokeCodebook(44, offsetof(format::CodebookHeader, vec_dim), uint8_t{4}),
       "codebooks.bin: codebook 44: 256 entries of dimension 4, the manifest says 256 of 8"},
      {"codebook_3_entry_nan",
       PokeCodebook(3, sizeof(format::CodebookHeader) + 2 * 100, uint16_t{0x7e00}),
       "codebooks.bin: codebook 3: entry value is not finite"},
      {"codebook_3_entry_inf",
       PokeCodebook(3, sizeof(format::CodebookHeader) + 2 * 2047, uint16_t{0xfc00}),
       "codebooks.bin: codebook 3: entry value is not finite"},

      // experts-L{n}.bin: 16 records of 40960 bytes
      {"bank_short_by_4096", Resize("experts-L3.bin", -4096),
       "experts-L3.bin: 651264 bytes, the manifest says 655360 (16 records of 40960)"},
      {"bank_one_byte_long", Resize("experts-L3.bin", 1),
       "experts-L3.bin: 655361 bytes, the manifest says 655360"},
      {"bank_empty", TruncateTo("experts-L5.bin", 0),
       "experts-L5.bin: 0 bytes, the manifest says 655360"},
      {"bank_missing", Remove("experts-L2.bin"), "experts-L2.bin: No such file or directory"},
      {"bank_is_a_directory", ReplaceWithDirectory("experts-L2.bin"),
       "experts-L2.bin: not a regular file"},

      // specials.json and chat.json: optional, checked when present
      {"specials_id_equals_vocab", Replace("specials.json", R"([{"id": 512, "text": "[X]"}])"),
       "specials.json: entry 0: id 512 is outside the vocabulary of 512"},
      {"specials_id_negative", Replace("specials.json", R"([{"id": -1, "text": "[X]"}])"),
       "specials.json: entry 0: id -1 is outside the vocabulary of 512"},
      {"specials_not_a_list", Replace("specials.json", R"({"id": 1, "text": "[X]"})"),
       "specials.json: not a list"},
      {"specials_not_json", Replace("specials.json", "[{"), "specials.json: not valid JSON"},
      {"specials_entry_without_text", Replace("specials.json", R"([{"id": 1}])"),
       "specials.json: entry 0 is not {\"id\": int, \"text\": string}"},
      {"specials_id_twice",
       Replace("specials.json", R"([{"id": 1, "text": "[A]"}, {"id": 1, "text": "[B]"}])"),
       "specials.json: entry 1: id 1 appears twice"},
      {"specials_empty_text", Replace("specials.json", R"([{"id": 1, "text": ""}])"),
       "specials.json: entry 0: text is empty or too long"},
      {"specials_is_a_directory", ReplaceWithDirectory("specials.json"),
       "specials.json: not a regular file"},
      {"chat_number_value", Replace("chat.json", R"({"user": 5})"),
       "chat.json: \"user\" must be [prefix, suffix]"},
      {"chat_triple", Replace("chat.json", R"({"system": ["a", "b", "c"]})"),
       "chat.json: \"system\" must be [prefix, suffix]"},
      {"chat_not_an_object", Replace("chat.json", R"(["a", "b"])"), "chat.json: not an object"},
      {"chat_open_a_pair", Replace("chat.json", R"({"open": ["a", "b"]})"),
       "chat.json: \"open\" must be a string"},
      {"chat_over_1_MiB", TruncateTo("chat.json", (1u << 20) + 1),
       "chat.json: 1048577 bytes, more than the 1048576 allowed"},
  };
}

class OpenDamage : public DamageTest, public ::testing::WithParamInterface<OpenCase> {};

TEST_P(OpenDamage, IsRefusedWithItsMessage) {
  const OpenCase& c = GetParam();
  c.damage(copy_);
  const OpenOutcome o = TryOpen(copy_);
  ASSERT_FALSE(o.threw) << "an exception escaped Container::Open: " << o.message;
  ASSERT_FALSE(o.ok) << "the damaged container opened";
  EXPECT_TRUE(MessageMatches(o.message, c.expect));
}

std::string CaseName(const ::testing::TestParamInfo<OpenCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Manifest, OpenDamage, ::testing::ValuesIn(ManifestCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Files, OpenDamage, ::testing::ValuesIn(FileCases()), CaseName);

// Damage the first version of the reader missed; kept apart as a record.
std::vector<OpenCase> ReaderFixOpenCases() {
  return {
      // "01" parses as layer 1 and names the right file, so layer 1 gets two
      // banks (Open succeeds with 6 banks and leaks the first bank's fd).
      {"layers_key_01_duplicates_bank_1",
       EditManifest([](json& m) { m["layers"]["01"] = m["layers"]["1"]; }),
       "manifest.json: layers has an entry \"01\""},
      // GetInt clamps an unsigned value above INT64_MAX before printing it.
      {"hidden_size_2_64_minus_1_message",
       EditConfig([](json& c) { c["hidden_size"] = UINT64_MAX; }),
       "config.hidden_size = 18446744073709551615 is outside"},
  };
}
INSTANTIATE_TEST_SUITE_P(ReaderFixes, OpenDamage, ::testing::ValuesIn(ReaderFixOpenCases()),
                         CaseName);

// ---------------------------------------------------------------------------
// Damage inside record 3 of layer 1: Open succeeds, reading the record fails.

struct RecordCase {
  std::string name;
  Damage damage;
  std::string expect;  // fragments of the message, in order, separated by "..."
  bool payload_only;   // the header is intact: without the crc check the record reads
};

std::ostream& operator<<(std::ostream& os, const RecordCase& c) {
  return os << c.name;
}

std::vector<RecordCase> RecordCases() {
  const std::string r = "experts-L1.bin: record 3";
  return {
      {"bad_magic", PokeRecord(offsetof(ExpertHeader, magic), uint32_t{0x50584558}),
       r + ": bad magic", false},
      {"zeroed_record",
       [](const fs::path& dir) {
         const uint64_t rb = RecordBytes(dir);
         std::string bank = ReadAll(dir / kBank);
         std::memset(bank.data() + rb * kExpert, 0, rb);
         WriteAll(dir / kBank, bank);
       },
       r + ": bad magic", false},
      {"says_layer_2", PokeRecord(offsetof(ExpertHeader, layer), uint16_t{2}), r + " says layer 2",
       false},
      {"says_expert_4", PokeRecord(offsetof(ExpertHeader, expert_id), uint16_t{4}),
       r + " says expert 4", false},
      {"record_blocks_11", PokeRecord(offsetof(ExpertHeader, record_blocks), uint32_t{11}),
       r + " says it is 11 blocks of 4 KiB, the manifest implies 10", false},
      {"record_blocks_0", PokeRecord(offsetof(ExpertHeader, record_blocks), uint32_t{0}),
       r + " says it is 0 blocks of 4 KiB", false},
      {"fmt_8_vq4p_in_vq3r", PokeRecord(offsetof(ExpertHeader, fmt), uint8_t{8}),
       r + " has fmt 8, the manifest says VQ3R", false},
      {"fmt_6_sub1", PokeRecord(offsetof(ExpertHeader, fmt), uint8_t{6}),
       r + " has fmt 6, the manifest says VQ3R", false},
      {"fmt_2_trunk_format", PokeRecord(offsetof(ExpertHeader, fmt), uint8_t{2}), r + " has fmt 2",
       false},
      {"lowrank_id_1", PokeRecord(offsetof(ExpertHeader, lowrank_id), uint16_t{1}),
       r + " has a low-rank id (not part of v0)", false},
      {"codebook_id_9", PokeRecord(offsetof(ExpertHeader, codebook_id), uint16_t{9}),
       r + " names codebook 9, the layer's base is 0", false},
      {"gate_off_52", PokeRecord(offsetof(ExpertHeader, gate_off), uint32_t{52}),
       r + ": gate_off 52, expected 48", false},
      {"up_off_0", PokeRecord(offsetof(ExpertHeader, up_off), uint32_t{0}),
       r + ": up_off 0, expected", false},
      {"down_off_past_record", PokeRecord(offsetof(ExpertHeader, down_off), uint32_t{1} << 31),
       r + ": down_off 2147483648, expected", false},
      {"scales_off_minus_2",
       [](const fs::path& dir) {
         const uint64_t at = RecordBytes(dir) * kExpert + offsetof(ExpertHeader, scales_off);
         Poke(dir / kBank, at, Peek<uint32_t>(dir / kBank, at) - 2);
       },
       r + ": scales_off ... expected", false},
      {"crc_field_changed",
       [](const fs::path& dir) {
         const uint64_t at = RecordBytes(dir) * kExpert + offsetof(ExpertHeader, crc32);
         Poke(dir / kBank, at, Peek<uint32_t>(dir / kBank, at) ^ 1u);
       },
       r + ": checksum mismatch", true},
      {"first_payload_byte_flipped", FlipRecordByte(sizeof(ExpertHeader)),
       r + ": checksum mismatch", true},
      {"index_byte_flipped", FlipRecordByte(5000), r + ": checksum mismatch", true},
      {"last_scale_byte_flipped",
       [](const fs::path& dir) {
         // The scales end at the crc's end: one f16 per row of gate, up, down.
         const uint64_t at = RecordBytes(dir) * kExpert +
                             Peek<uint32_t>(dir / kBank, RecordBytes(dir) * kExpert +
                                                             offsetof(ExpertHeader, scales_off)) +
                             2 * (128 + 128 + 256) - 1;
         Poke(dir / kBank, at, static_cast<uint8_t>(Peek<uint8_t>(dir / kBank, at) ^ 0x40));
       },
       r + ": checksum mismatch", true},
  };
}

class RecordDamage : public DamageTest, public ::testing::WithParamInterface<RecordCase> {};

TEST_P(RecordDamage, IsRefusedWhenRead) {
  const RecordCase& c = GetParam();
  c.damage(copy_);
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << "record damage should not stop Open: " << opened.status().message();
  const Container& box = *opened;
  std::vector<uint8_t> buf(box.record_bytes());

  const Status with_crc = box.ReadRecord(kLayer, kExpert, buf.data(), /*verify_crc=*/true);
  ASSERT_FALSE(with_crc.ok()) << "the damaged record read";
  EXPECT_TRUE(MessageMatches(with_crc.message(), c.expect));
  // CheckRecord on the same bytes says the same.
  EXPECT_EQ(box.CheckRecord(kLayer, kExpert, buf, true).message(), with_crc.message());

  const Status without_crc = box.ReadRecord(kLayer, kExpert, buf.data(), /*verify_crc=*/false);
  if (c.payload_only) {
    EXPECT_TRUE(without_crc.ok()) << "the header is valid, yet: " << without_crc.message();
  } else {
    EXPECT_EQ(without_crc.message(), with_crc.message())
        << "header damage is found without the crc";
  }

  // The damage stays in its record: the neighbours read.
  for (int e : {kExpert - 1, kExpert + 1}) {
    const Status s = box.ReadRecord(kLayer, e, buf.data(), true);
    EXPECT_TRUE(s.ok()) << "record " << e << ": " << s.message();
  }
}

std::string RecordCaseName(const ::testing::TestParamInfo<RecordCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Records, RecordDamage, ::testing::ValuesIn(RecordCases()), RecordCaseName);

// Header bits v0 does not define: the first reader did not check them.
std::vector<RecordCase> ReaderFixRecordCases() {
  const std::string r = "experts-L1.bin: record 3";
  return {
      {"unknown_flag_bit", PokeRecord(offsetof(ExpertHeader, flags), uint8_t{0x80}),
       r + " ... flags", false},
      {"reserved0_nonzero", PokeRecord(offsetof(ExpertHeader, reserved0), uint16_t{7}),
       r + " ... reserved", false},
  };
}
INSTANTIATE_TEST_SUITE_P(ReaderFixes, RecordDamage, ::testing::ValuesIn(ReaderFixRecordCases()),
                         RecordCaseName);

// ---------------------------------------------------------------------------
// The good container, and misuse of the record readers.

class GoodContainer : public DamageTest {};

TEST_F(GoodContainer, OpensAndEveryRecordReads) {
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const Container& box = *opened;
  EXPECT_EQ(box.manifest().banks.size(), 5u);
  EXPECT_EQ(box.codebook_count(), 45);
  EXPECT_EQ(box.record_bytes(), 40960u);
  EXPECT_TRUE(box.has_tokenizer());
  EXPECT_FALSE(box.specials().empty());
  EXPECT_TRUE(box.chat().has_value());

  std::vector<uint8_t> buf(box.record_bytes());
  int records = 0;
  for (const ExpertBank& b : box.manifest().banks) {
    for (int e = 0; e < b.experts; ++e) {
      for (bool crc : {true, false}) {
        const Status s = box.ReadRecord(b.layer, e, buf.data(), crc);
        ASSERT_TRUE(s.ok()) << "layer " << b.layer << " expert " << e << ": " << s.message();
      }
      EXPECT_TRUE(box.CheckRecord(b.layer, e, buf, true).ok());
      ++records;
    }
  }
  EXPECT_EQ(records, 5 * 16);

  std::vector<uint8_t> payload, scales;
  for (const TrunkTensor& t : box.manifest().trunk) {
    const Status s = box.ReadTensor(t, &payload, &scales);
    EXPECT_TRUE(s.ok()) << t.name << ": " << s.message();
  }
}

TEST_F(GoodContainer, OptionalFilesMayBeAbsent) {
  for (const char* f : {"tokenizer.model", "specials.json", "chat.json"}) fs::remove(copy_ / f);
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_FALSE(opened->has_tokenizer());
  EXPECT_TRUE(opened->specials().empty());
}

TEST_F(GoodContainer, NestingAtTheLimitIsAccepted) {
  // The manifest object is level 1: 63 nested lists under it make 64.
  EditManifest([](json& m) { m["deep"] = Nested(63); })(copy_);
  const OpenOutcome o = TryOpen(copy_);
  EXPECT_TRUE(o.ok) << o.message;
  EditManifest([](json& m) { m["deep"] = Nested(64); })(copy_);
  EXPECT_TRUE(MessageMatches(TryOpen(copy_).message, "nested deeper than 64 levels"));
}

TEST_F(GoodContainer, RecordReadersRefuseBadArguments) {
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const Container& box = *opened;
  std::vector<uint8_t> buf(box.record_bytes());
  EXPECT_EQ(box.ReadRecord(0, 0, buf.data(), true).message(), "layer 0 has no expert bank");
  EXPECT_EQ(box.ReadRecord(6, 0, buf.data(), true).message(), "layer 6 has no expert bank");
  EXPECT_EQ(box.ReadRecord(-1, 0, buf.data(), true).message(), "layer -1 has no expert bank");
  EXPECT_EQ(box.ReadRecord(1, 16, buf.data(), true).message(),
            "experts-L1.bin: expert 16 is out of range");
  EXPECT_EQ(box.ReadRecord(1, -1, buf.data(), true).message(),
            "experts-L1.bin: expert -1 is out of range");
  ASSERT_TRUE(box.ReadRecord(1, 3, buf.data(), true).ok());
  EXPECT_EQ(
      box.CheckRecord(1, 3, std::span<const uint8_t>(buf).first(buf.size() - 1), true).message(),
      "experts-L1.bin: record 3: short read");
  EXPECT_EQ(box.CheckRecord(0, 3, buf, true).message(), "layer 0 has no expert bank");
  // A record checked as another record's is refused by its header.
  EXPECT_EQ(box.CheckRecord(1, 4, buf, true).message(), "experts-L1.bin: record 4 says expert 3");
  EXPECT_EQ(box.CheckRecord(2, 3, buf, true).message(), "experts-L2.bin: record 3 says layer 1");
}

TEST_F(GoodContainer, BankShrunkAfterOpenFailsTheRead) {
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const Container& box = *opened;
  fs::resize_file(copy_ / "experts-L1.bin", uint64_t{box.record_bytes()} * 10);
  std::vector<uint8_t> buf(box.record_bytes());
  EXPECT_TRUE(box.ReadRecord(1, 9, buf.data(), true).ok());
  EXPECT_EQ(box.ReadRecord(1, 12, buf.data(), true).message(),
            "experts-L1.bin: short read at offset 491520");
}

TEST_F(GoodContainer, MovedCodebookBaseIsCaughtByTheRecords) {
  // Layer 1 pointing at layer 2's codebooks is in range, so Open cannot tell;
  // every record of the layer names its real codebooks.
  EditManifest([](json& m) { m["layers"]["1"]["codebook_base"] = 9; })(copy_);
  auto opened = Container::Open(copy_.string());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const Container& box = *opened;
  std::vector<uint8_t> buf(box.record_bytes());
  for (int e = 0; e < 16; ++e) {
    EXPECT_EQ(
        box.ReadRecord(1, e, buf.data(), false).message(),
        "experts-L1.bin: record " + std::to_string(e) + " names codebook 0, the layer's base is 9");
  }
  EXPECT_TRUE(box.ReadRecord(2, 0, buf.data(), true).ok());
}

// open(2) on a FIFO blocks until a writer appears, so a FIFO named trunk.bin
// or manifest.json must not be opened blocking. If it ever is again, the test
// unblocks the reader itself so that it cannot hang.
TEST_F(GoodContainer, FifoDoesNotBlockOpen) {
  for (const char* name : {"manifest.json", "trunk.bin"}) {
    SCOPED_TRACE(name);
    const fs::path fifo = copy_ / name;
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string dir = copy_.string();
    auto result = std::async(std::launch::async, [dir] { return TryOpen(dir); });
    const bool finished = result.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
    EXPECT_TRUE(finished) << "Container::Open blocked opening the FIFO " << name;
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      const int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // let it through
      if (w >= 0) close(w);
    }
    const OpenOutcome o = result.get();
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(MessageMatches(o.message, std::string(name) + ": not a regular file"));
    fs::remove(fifo);
    fs::copy_file(good_ / name, fifo);
  }
}

// ---------------------------------------------------------------------------
// Random damage: Open either succeeds or says why; nothing crashes or throws.
// When it succeeds, the records and tensors it promises must be readable
// without crashing too.

class RandomDamage : public DamageTest {};

TEST_F(RandomDamage, NeverCrashesOrThrows) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(good_)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  const std::string good_manifest = ReadAll(good_ / "manifest.json");

  std::mt19937_64 rng(0x5eed);
  int opened = 0, refused = 0;
  for (int it = 0; it < 200; ++it) {
    std::string victim, what;
    if (rng() % 2 == 0) {
      victim = "manifest.json";
      std::string text = good_manifest;
      const size_t at = rng() % text.size();
      const auto x = static_cast<char>(1 + rng() % 255);
      text[at] = static_cast<char>(text[at] ^ x);
      WriteAll(copy_ / victim, text);
      what = "manifest.json byte " + std::to_string(at) +
             " ^= " + std::to_string(static_cast<uint8_t>(x));
    } else {
      victim = files[rng() % files.size()];
      const uint64_t size = fs::file_size(copy_ / victim);
      const uint64_t len = size ? rng() % size : 0;
      fs::resize_file(copy_ / victim, len);
      what = victim + " truncated to " + std::to_string(len) + " of " + std::to_string(size);
    }
    SCOPED_TRACE(what);

    try {
      auto c = Container::Open(copy_.string());
      if (c.ok()) {
        ++opened;
        std::vector<uint8_t> buf(c->record_bytes());
        for (const ExpertBank& b : c->manifest().banks) {
          for (int e : {0, b.experts - 1}) {
            const Status s = c->ReadRecord(b.layer, e, buf.data(), true);
            EXPECT_TRUE(s.ok() || !s.message().empty());
          }
        }
        std::vector<uint8_t> payload, scales;
        for (const TrunkTensor& t : c->manifest().trunk) {
          const Status s = c->ReadTensor(t, &payload, &scales);
          EXPECT_TRUE(s.ok()) << t.name << ": " << s.message();  // Open checked every extent
        }
      } else {
        ++refused;
        EXPECT_FALSE(c.status().message().empty());
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "an exception escaped: " << e.what();
    } catch (...) {
      ADD_FAILURE() << "an exception that is not a std::exception escaped";
    }
    fs::copy_file(good_ / victim, copy_ / victim, fs::copy_options::overwrite_existing);
  }
  RecordProperty("opened", opened);
  RecordProperty("refused", refused);
  EXPECT_EQ(opened + refused, 200);
  EXPECT_GT(refused, 100);  // almost every truncation, most flips
}

}  // namespace
}  // namespace waste
