// The token mask's cost (engine/grammar/token_mask.h) per token of a reply,
// over DeepSeek's released vocabulary (tests/fixtures/tokenizer/deepseek:
// 128,000 ranks and 1,283 specials, the largest fixture tokenizer). Each
// benchmark replays one JSON reply, tokenized, and masks the logits before
// every token of it as the scheduler does; an iteration is the whole reply.
// Counters over every token of every iteration: median_us, min_us, max_us,
// mean_us; stderr says after which bytes the slowest mask came.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/bench_main.h"
#include "engine/convert/tokenizer_import.h"
#include "engine/grammar/token_mask.h"

namespace waste::kernels {
namespace {

using json = nlohmann::json;

const Tokenizer& DeepSeek() {
  static const Tokenizer tok = [] {
    std::ifstream f(std::string(WASTE_FIXTURES) + "/tokenizer/deepseek/tokenizer.json");
    std::stringstream ss;
    ss << f.rdbuf();
    auto parts = convert::ImportTokenizerJson(json::parse(ss.str()));
    const std::string dir = std::filesystem::temp_directory_path() / "waste-grammar-bench";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/tokenizer.model") << parts->tokenizer_model;
    std::ofstream(dir + "/merges.txt") << parts->merges_txt;
    std::ofstream(dir + "/pretokenizer.json") << parts->pretokenizer_json;
    std::ofstream(dir + "/specials.json") << convert::SpecialsJson(parts->added, int64_t{1} << 24);
    return *Tokenizer::Load(dir);
  }();
  return tok;
}

struct Case {
  const char* name;
  const char* schema;  // empty: json_object
  const char* reply;
};

const Case kCases[] = {
    {"json_object", "",
     R"({"summary": "The quarterly report shows revenue up eight percent, driven by the new product line and lower churn.", "tags": ["finance", "q3", "growth"], "score": 0.82, "draft": false})"},
    {"strict_schema",
     R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
        "days":{"type":"integer","minimum":1,"maximum":14},"notes":{"type":"array","items":{"type":"string"}}},
        "required":["city","unit","days","notes"],"additionalProperties":false})",
     R"({"city": "San Francisco", "unit": "fahrenheit", "days": 7, "notes": ["fog in the morning", "clear afternoons"]})"},
    {"open_keys",  // additionalProperties absent: every key's first byte walks the trie
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]})",
     R"({"name": "Ada Lovelace", "age": 36, "born": "London", "known_for": "the first published algorithm"})"},
};

void MaskReply(benchmark::State& state, const Case& c) {
  const Tokenizer& tok = DeepSeek();
  const int vocab = tok.max_id() + 1;
  static const auto index = std::make_shared<const grammar::VocabIndex>(tok, vocab);
  std::shared_ptr<const grammar::JsonGrammar> g = grammar::AnyJsonObject();
  if (*c.schema) g = *grammar::CompileJsonSchema(json::parse(c.schema));
  const std::vector<int32_t> ids = tok.Encode(c.reply);
  // The constraint before each token, made once.
  std::vector<grammar::JsonTokenConstraint> before;
  grammar::JsonTokenConstraint walk(g, index);
  for (int32_t id : ids) {
    before.push_back(walk);
    if (!walk.Accept(id)) {
      state.SkipWithError("the reply does not match its schema");
      return;
    }
  }
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<std::pair<double, size_t>> times;  // every mask's seconds, and its place in the reply
  for (auto _ : state) {
    for (size_t i = 0; i < before.size(); ++i) {
      grammar::JsonTokenConstraint k = before[i];
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(k.Mask(logits));
      times.emplace_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), i);
    }
  }
  std::sort(times.begin(), times.end());
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["median_us"] = times[times.size() / 2].first * 1e6;
  state.counters["min_us"] = times.front().first * 1e6;
  state.counters["max_us"] = times.back().first * 1e6;
  double sum = 0;
  for (const auto& t : times) sum += t.first;
  state.counters["mean_us"] = sum / static_cast<double>(times.size()) * 1e6;
  // Where the slowest mask was: the reply's last bytes before it.
  const std::string done = tok.Decode(std::span<const int32_t>(ids).first(times.back().second));
  std::fprintf(stderr, "%s: the slowest mask after '%s'\n", c.name,
               done.substr(done.size() > 24 ? done.size() - 24 : 0).c_str());
}

}  // namespace

void RegisterBenchmarks() {
  for (const Case& c : kCases)
    benchmark::RegisterBenchmark((std::string("mask/") + c.name).c_str(), [&c](
                                                                              benchmark::State& s) {
      MaskReply(s, c);
    })->Unit(benchmark::kMillisecond);
}

}  // namespace waste::kernels
