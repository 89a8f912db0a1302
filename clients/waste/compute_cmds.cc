// waste run, eval, tokenize, detokenize, bench: the engine in one process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "clients/waste/commands.h"
#include "clients/waste/engine_flags.h"
#include "engine/model/perplexity.h"
#include "engine/model/sampler.h"
#include "engine/model/stop.h"
#include "engine/gguf/gguf.h"
#include "engine/plan/plan.h"
#include "engine/tokenizer/gguf_tokenizer.h"

namespace waste::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int Fail(const Status& st) {
  std::fprintf(stderr, "waste: %s\n", st.message().c_str());
  return 1;
}

Result<std::vector<int>> ParseIds(const std::string& text) {
  std::vector<int> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > (1 << 30)) throw std::invalid_argument(item);
      ids.push_back(static_cast<int>(v));
    } catch (...) {
      return Status::Error("\"" + item + "\" is not a token id");
    }
  }
  if (ids.empty()) return Status::Error("no token ids given");
  return ids;
}

// The prompt: the argument, or a file's contents with "@FILE", or standard input with "-".
Result<std::string> ReadPrompt(const std::string& arg) {
  if (arg == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (!arg.empty() && arg[0] == '@') return ReadSmallFile(arg.substr(1), 64u << 20);
  return arg;
}

// Prompt ids: --ids, or the prompt text through the tokenizer (markup
// resolved, so a chat template's control tokens become their ids).
Result<std::vector<int>> PromptIds(const Engine& e, const std::string& prompt,
                                   const std::string& ids) {
  if (!ids.empty()) return ParseIds(ids);
  if (!e.tokenizer) return Status::Error("this container has no tokenizer; pass --ids");
  auto text = ReadPrompt(prompt);
  if (!text.ok()) return text.status();
  std::vector<int> out;
  for (int32_t id : e.tokenizer->EncodeMarkup(*text)) out.push_back(id);
  if (out.empty()) return Status::Error("the prompt is empty");
  return out;
}

struct RunOptions {
  EngineOptions engine;
  std::string prompt, ids;
  int max_tokens = 64;
  SamplerOptions sampler;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  std::string trace;   // routing trace (JSON lines) written here
  std::string logits;  // every sampled-from row of logits (raw float32) written here
};

// Writes the experts each token was routed to, one JSON line per token
// ({"tok": position, "layers": [[experts of the first MoE layer], ...]}),
// the format of the routing traces in shared/data.
Status WriteTrace(const std::string& path,
                  const std::map<int, std::map<int, std::vector<int>>>& routes) {
  std::ofstream f(path);
  for (const auto& [pos, layers] : routes) {
    nlohmann::json j = {{"tok", pos}, {"layers", nlohmann::json::array()}};
    for (const auto& [layer, experts] : layers) {
      std::vector<int> sorted = experts;
      std::sort(sorted.begin(), sorted.end());
      j["layers"].push_back(sorted);
    }
    f << j.dump() << "\n";
  }
  return f ? Status::Ok() : Status::Error(path + ": write failed");
}

int RunGenerate(const RunOptions& given) {
  RunOptions o = given;
  std::map<int, std::map<int, std::vector<int>>> routes;
  if (!o.trace.empty())
    o.engine.on_route = [&](int pos, int layer, std::span<const int> experts) {
      routes[pos][layer].assign(experts.begin(), experts.end());
    };
  auto e = OpenEngine(o.engine);
  if (!e.ok()) return Fail(e.status());
  auto prompt = PromptIds(*e, o.prompt, o.ids);
  if (!prompt.ok()) return Fail(prompt.status());
  std::ofstream logits_out;
  if (!o.logits.empty()) {
    logits_out.open(o.logits, std::ios::binary | std::ios::trunc);
    if (!logits_out) return Fail(Status::Error(o.logits + ": cannot write"));
  }
  // The model may be built again over a new daemon (ForwardThroughRestarts):
  // its shape is the container's, which stays.
  const ModelConfig& config = e->container->config();
  Session s = e->model->NewSession(o.engine.context);
  std::vector<float> logits(config.vocab);
  // Runs `ids` (none: the logits are a found state's) and keeps the logits
  // they end with (in --logits too).
  const auto forward = [&](std::span<const int> ids) {
    if (!ids.empty()) WASTE_RETURN_IF_ERROR(ForwardThroughRestarts(*e, s, ids, logits.data()));
    if (logits_out.is_open()) {
      logits_out.write(reinterpret_cast<const char*>(logits.data()),
                       static_cast<std::streamsize>(logits.size() * sizeof(float)));
      logits_out.flush();
      if (!logits_out) return Status::Error(o.logits + ": write failed");
    }
    return Status::Ok();
  };
  const auto t0 = Clock::now();
  // With wasted, a long prompt starts from the longest state published for
  // it (by another run, a chat, a server), and is published once it ran.
  const bool shared = static_cast<int>(prompt->size()) >= kShareMinTokens;
  const int found = shared ? e->FindSharedState(*prompt, 0, s, logits) : 0;
  if (Status st = forward(std::span<const int>(*prompt).subspan(static_cast<size_t>(found)));
      !st.ok())
    return Fail(st);
  if (shared && found < static_cast<int>(prompt->size())) e->PublishSharedState(*prompt, s, logits);
  const double prefill = Since(t0);
  Sampler sampler(o.sampler);
  StopMatcher stop(o.stops);
  int produced = 0;
  const auto t1 = Clock::now();
  while (produced < o.max_tokens && !stop.stopped()) {
    const int next = sampler.Sample(logits);
    ++produced;
    if (!o.ignore_eos && std::ranges::find(config.eos_tokens, next) != config.eos_tokens.end())
      break;
    const std::string piece = e->tokenizer ? std::string(e->tokenizer->TokenBytes(next))
                                           : "[" + std::to_string(next) + "]";
    const std::string shown = stop.Feed(piece);
    std::fwrite(shown.data(), 1, shown.size(), stdout);
    std::fflush(stdout);
    if (stop.stopped() || produced == o.max_tokens) break;
    const int one[1] = {next};
    if (Status st = forward(one); !st.ok()) {
      // What was generated stays written, the text held back for --stop too.
      const std::string held = stop.Flush();
      std::fwrite(held.data(), 1, held.size(), stdout);
      std::fflush(stdout);
      return Fail(st);
    }
  }
  const std::string rest = stop.Flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  const double decode = Since(t1);
  if (!o.trace.empty())
    if (Status ts = WriteTrace(o.trace, routes); !ts.ok()) return Fail(ts);
  const ExpertStats st = e->experts ? e->experts->stats() : ExpertStats{};
  std::fprintf(stderr,
               "\n[%zu prompt tokens (%d from a state wasted kept) in %.2f s, %d generated in "
               "%.2f s (%.2f tok/s) | experts %llu hit / %llu miss | %.3f GB read]\n",
               prompt->size(), found, prefill, produced, decode, produced / std::max(decode, 1e-9),
               static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
               st.bytes_read / 1e9);
  return 0;
}

struct EvalOptions {
  EngineOptions engine;
  std::string prompt, ids, logits_file;
  int top = 10;
  bool json = false;
  std::string perplexity;  // a text file to score instead of a prompt
  int window = 256;
  int max_windows = 0;     // 0: the whole file
  std::string trace;       // routing trace of the scored text (JSON lines)
};

// waste eval --perplexity: the file tokenized (after the model's BOS, when it
// has one) and scored in windows (engine/model/perplexity.h).
int RunPerplexity(const EvalOptions& given) {
  EvalOptions o = given;
  std::map<int, std::map<int, std::vector<int>>> routes;
  size_t window_start = 0;
  if (!o.trace.empty())
    o.engine.on_route = [&](int pos, int layer, std::span<const int> experts) {
      routes[static_cast<int>(window_start) + pos][layer].assign(experts.begin(), experts.end());
    };
  o.engine.context = std::min(o.engine.context, o.window);
  auto e = OpenEngine(o.engine);
  if (!e.ok()) return Fail(e.status());
  if (!e->tokenizer) return Fail(Status::Error("this container has no tokenizer to read text with"));
  auto text = ReadPrompt("@" + o.perplexity);
  if (!text.ok()) return Fail(text.status());
  std::vector<int> ids;
  if (e->model->config().bos_token >= 0) ids.push_back(e->model->config().bos_token);
  for (int32_t id : e->tokenizer->Encode(*text)) ids.push_back(id);
  std::ofstream logits;
  if (!o.logits_file.empty()) logits.open(o.logits_file, std::ios::binary);
  // Windows are consecutive, so after each one the next one's start (the
  // trace's position offset) is this one's plus the window.
  auto score = ScorePerplexity(*e->model, ids, o.window, o.max_windows,
                               [&](size_t start, std::span<const float> l) {
                                 window_start = start + static_cast<size_t>(o.window);
                                 if (logits.is_open())
                                   logits.write(reinterpret_cast<const char*>(l.data()),
                                                static_cast<std::streamsize>(l.size_bytes()));
                               });
  if (!score.ok()) return Fail(score.status());
  if (logits.is_open() && !logits) return Fail(Status::Error(o.logits_file + ": write failed"));
  if (!o.trace.empty())
    if (Status ts = WriteTrace(o.trace, routes); !ts.ok()) return Fail(ts);
  if (o.json) {
    const nlohmann::json j = {{"file", o.perplexity},    {"tokens", ids.size()},
                              {"window", o.window},      {"windows", score->windows},
                              {"scored", score->scored}, {"mean_nll", score->mean_nll()},
                              {"perplexity", score->perplexity()}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %llu tokens scored in %d windows of %d: mean NLL %.6f nats, perplexity %.4f\n",
                o.perplexity.c_str(), static_cast<unsigned long long>(score->scored),
                score->windows, o.window, score->mean_nll(), score->perplexity());
  }
  return 0;
}

int RunEval(const EvalOptions& o) {
  if (!o.perplexity.empty()) return RunPerplexity(o);
  auto e = OpenEngine(o.engine);
  if (!e.ok()) return Fail(e.status());
  auto prompt = PromptIds(*e, o.prompt, o.ids);
  if (!prompt.ok()) return Fail(prompt.status());
  Model& m = *e->model;
  Session s = m.NewSession(std::max<int>(o.engine.context, static_cast<int>(prompt->size())));
  std::vector<float> all;
  if (Status st = m.Forward(s, *prompt, nullptr, &all); !st.ok()) return Fail(st);
  const int V = m.config().vocab;
  if (!o.logits_file.empty()) {
    std::ofstream f(o.logits_file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(all.data()),
            static_cast<std::streamsize>(all.size() * 4));
    if (!f) return Fail(Status::Error(o.logits_file + ": write failed"));
  }
  const float* last = all.data() + (prompt->size() - 1) * static_cast<size_t>(V);
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int top = std::min(o.top, V);
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
    return last[a] > last[b] || (last[a] == last[b] && a < b);
  });
  double sum = 0;
  const float mx = last[order[0]];
  for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(last[i]) - mx);
  nlohmann::json j = {{"tokens", prompt->size()}, {"top", nlohmann::json::array()}};
  for (int i = 0; i < top; ++i) {
    const int id = order[i];
    const double p = std::exp(static_cast<double>(last[id]) - mx) / sum;
    nlohmann::json row = {{"id", id}, {"logit", last[id]}, {"prob", p}};
    if (e->tokenizer) row["text"] = std::string(e->tokenizer->TokenBytes(id));
    j["top"].push_back(row);
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    for (const auto& row : j["top"])
      std::printf("%8d  %10.4f  %7.4f  %s\n", row["id"].get<int>(), row["logit"].get<float>(),
                  row["prob"].get<double>(),
                  row.contains("text")
                      ? nlohmann::json(row["text"])
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str()
                      : "");
  }
  return 0;
}

struct TokOptions {
  std::string container, text;
  bool markup = false;
};

// A container's tokenizer, or a GGUF file's (tokenizer.ggml.*).
Result<Tokenizer> LoadTokenizer(const std::string& path) {
  if (!gguf::IsGgufFile(path)) return Tokenizer::Load(path);
  auto g = gguf::Gguf::Open(path);
  if (!g.ok()) return g.status();
  auto v = GgufTokenizer(*g);
  if (!v.ok()) return v.status();
  return std::move(v->tokenizer);
}

int RunTokenize(const TokOptions& o, bool decode) {
  auto t = LoadTokenizer(o.container);
  if (!t.ok()) return Fail(t.status().Prefixed(o.container));
  if (decode) {
    auto ids = ParseIds(o.text);
    if (!ids.ok()) return Fail(ids.status());
    std::vector<int32_t> v(ids->begin(), ids->end());
    const std::string s = t->Decode(v);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::printf("\n");
    return 0;
  }
  auto text = ReadPrompt(o.text);
  if (!text.ok()) return Fail(text.status());
  const auto ids = o.markup ? t->EncodeMarkup(*text) : t->Encode(*text);
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void AddRun(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  cmd->add_option("CONTAINER", o->engine.container, "Container directory")->required();
  cmd->add_option("PROMPT", o->prompt, "Prompt text, @FILE, or - for standard input");
  cmd->add_option("--ids", o->ids, "Prompt as token ids, e.g. 3,7,11");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", o->sampler.temperature, "Temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampler.top_k, "Sample from the k most likely (0: all)");
  cmd->add_option("--top-p", o->sampler.top_p, "Nucleus sampling threshold")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->sampler.seed, "Sampling seed");
  cmd->add_option("--stop", o->stops, "Stop when this text is generated (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the end-of-sequence token");
  cmd->add_option("--trace", o->trace, "Write each token's routed experts here (JSON lines)");
  cmd->add_option("--logits", o->logits,
                  "Write the raw float32 logits each generated token was sampled from "
                  "here, a row each");
  AddEngineFlags(cmd, &o->engine);
  AddReattachFlag(cmd, &o->engine);
  cmd->footer(kReattachHelp);
  cmd->callback([o, exit_code] { *exit_code = RunGenerate(*o); });
}

void AddEval(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand("eval", "The next-token distribution after a prompt");
  cmd->add_option("CONTAINER", o->engine.container, "Container directory")->required();
  cmd->add_option("PROMPT", o->prompt, "Prompt text, @FILE, or - for standard input");
  cmd->add_option("--ids", o->ids, "Prompt as token ids, e.g. 3,7,11");
  cmd->add_option("--logits", o->logits_file, "Write every position's raw float32 logits here");
  cmd->add_option("--top", o->top, "How many candidates to show")->capture_default_str();
  cmd->add_option("--perplexity", o->perplexity,
                  "Score this text file instead of a prompt: its perplexity, in windows");
  cmd->add_option("--window", o->window, "--perplexity: tokens per window, each a fresh session")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--windows", o->max_windows, "--perplexity: score at most this many (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--trace", o->trace, "--perplexity: write each token's routed experts here");
  cmd->add_flag("--json", o->json, "Print JSON");
  AddEngineFlags(cmd, &o->engine);
  cmd->callback([o, exit_code] { *exit_code = RunEval(*o); });
}

void AddTokenize(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<TokOptions>();
  auto* enc = app.add_subcommand("tokenize", "Text to token ids");
  enc->add_option("CONTAINER", o->container, "Container directory or GGUF file")->required();
  enc->add_option("TEXT", o->text, "Text, @FILE, or - for standard input")->required();
  enc->add_flag("--markup", o->markup, "Resolve special-token texts to their ids");
  enc->callback([o, exit_code] { *exit_code = RunTokenize(*o, false); });
  auto* dec = app.add_subcommand("detokenize", "Token ids to text");
  dec->add_option("CONTAINER", o->container, "Container directory or GGUF file")->required();
  dec->add_option("IDS", o->text, "Token ids, e.g. 3,7,11")->required();
  dec->callback([o, exit_code] { *exit_code = RunTokenize(*o, true); });
}

}  // namespace waste::cli
