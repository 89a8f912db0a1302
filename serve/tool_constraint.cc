#include "serve/tool_constraint.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"
#include "engine/tokenizer/chat_generic.h"
#include "engine/tokenizer/chat_tools.h"

namespace waste::serve {
namespace {

bool IsQwen(std::string_view family) {
  return family == kFamilyQwen3;
}
bool IsDeepseek(std::string_view family) {
  return family == kFamilyDeepseekV3 || family == kFamilyDeepseekV31;
}
bool IsHarmony(std::string_view family) {
  return family == kFamilyHarmony;
}
constexpr std::string_view kHarmonyAnalysis = "<|channel|>analysis<|message|>";
// Where a call's header names its recipient: after the channel (as the model
// writes it), or before it (as the template renders a past call).
constexpr std::string_view kHarmonyToAfterChannel = "<|channel|>commentary to=";
constexpr std::string_view kHarmonyToFirst = "<|start|>assistant to=";
// Arguments as key/value pairs (serve/tool_arguments.h).
bool IsKeyValue(std::string_view family) {
  return family == kFamilyGlm45 || family == kFamilyQwen35 || family == kFamilyXtml;
}
// K3: what opens the calls after the response element.
std::string XtmlToolsOpen() {
  return std::string(kXtmlOpen) + "tools" + kXtmlSep;
}
constexpr std::string_view kXtmlCallOpen = "<|open|>call ";

}  // namespace

Result<std::shared_ptr<const ToolCallPlan>> ToolCallPlan::Make(
    std::string_view family, std::span<const ChatTool> tools, ToolChoiceMode mode,
    std::string_view function, bool parallel, bool thinking_open, std::string_view schema_field) {
  if (family != kFamilyQwen3 && family != kFamilyKimiK2 && !IsDeepseek(family) &&
      !IsHarmony(family) && family != kFamilyDemo && !IsKeyValue(family))
    return Status::Error("tools: tool calling is not supported for the '" + std::string(family) +
                         "' chat format (calls are constrained for qwen3, qwen3.5, kimi-k2, "
                         "deepseek-v3 and -v3.1, glm-4.5, k3-xtml, harmony and the generic "
                         "format of the demo model)");
  auto plan = std::make_shared<ToolCallPlan>();
  plan->family = family;
  plan->mode = mode;
  plan->parallel = parallel && !IsHarmony(family);  // <|call|> ends harmony's turn
  plan->thinking_open = thinking_open;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]." + std::string(schema_field);
    nlohmann::json schema = nlohmann::json::parse(tools[i].parameters.dump());
    if (!schema.is_object()) return Status::Error(where + ": must be a JSON Schema object");
    // Arguments are an object whatever the schema leaves open.
    if (!schema.contains("type")) schema["type"] = "object";
    if (schema["type"] != "object")
      return Status::Error(where + ": the arguments' schema must be of type object");
    auto g = grammar::CompileJsonSchema(schema);
    if (!g.ok()) return Status::Error(where + ": " + g.status().message());
    if (IsKeyValue(family)) {
      auto pairs = KeyValueArguments::Make(family, **g);
      if (!pairs.ok()) return Status::Error(where + ": " + pairs.status().message());
      plan->pairs.push_back(*pairs);
    }
    plan->names.push_back(tools[i].name);
    plan->schemas.push_back(*g);
    if (mode == ToolChoiceMode::kFunction && tools[i].name == function)
      plan->function = static_cast<int>(i);
  }
  if (mode == ToolChoiceMode::kFunction && plan->function < 0)
    return Status::Error("tool_choice: '" + std::string(function) + "' is not among the tools");
  if ((mode == ToolChoiceMode::kRequired || mode == ToolChoiceMode::kFunction) && tools.empty())
    return Status::Error("tool_choice: a call cannot be required without tools");
  if (plan->generic() && mode == ToolChoiceMode::kNone)
    return std::shared_ptr<const ToolCallPlan>();
  if (plan->generic() && mode == ToolChoiceMode::kAuto) {
    auto text = grammar::CompileJsonSchema({{"type", "string"}});
    if (!text.ok()) return text.status();
    plan->response = *text;
  }
  return std::shared_ptr<const ToolCallPlan>(std::move(plan));
}

std::string ToolCallPlan::Head(size_t tool, int index) const {
  if (IsHarmony(family))
    return std::string(kHarmonyToAfterChannel) + "functions." + names[tool] +
           " <|constrain|>json<|message|>";
  if (generic())
    return std::string(index == 0 ? chat_generic::kCallsOpen : "") +
           std::string(chat_generic::kCallName) + nlohmann::json(names[tool]).dump() +
           std::string(chat_generic::kCallArgs);
  if (IsQwen(family))
    return std::string(kQwenCallOpen) + "\n{\"name\": " + nlohmann::json(names[tool]).dump() +
           ", \"arguments\": ";
  if (family == kFamilyGlm45) return std::string(kGlmCallOpen) + names[tool] + "\n";
  if (family == kFamilyQwen35)
    return std::string(kQwenCallOpen) + "\n" + std::string(kQwen35Function) + names[tool] + ">\n";
  if (family == kFamilyXtml)
    return (index == 0 ? std::string(kXtmlClose) + "response" + kXtmlSep + XtmlToolsOpen() : "") +
           std::string(kXtmlCallOpen) + "tool=\"" + chat_tools::XtmlEscape(names[tool]) +
           "\" index=\"" + std::to_string(index + 1) + "\"" + kXtmlSep;
  if (IsDeepseek(family)) {
    const std::string calls = index == 0 ? std::string(kDsCallsBegin) : std::string();
    if (family == kFamilyDeepseekV31)
      return calls + std::string(kDsCallBegin) + names[tool] + std::string(kDsSep);
    return calls + std::string(kDsCallBegin) + "function" + std::string(kDsSep) + names[tool] +
           "\n```json\n";
  }
  return (index == 0 ? std::string(kKimiSectionBegin) : std::string()) +
         std::string(kKimiCallBegin) + "functions." + names[tool] + ":" + std::to_string(index) +
         std::string(kKimiArgsBegin);
}
std::vector<std::string> ToolCallPlan::FirstHeadForms(size_t tool) const {
  if (IsHarmony(family))  // as the template renders a past call
    return {Head(tool, 0), std::string(kHarmonyToFirst) + "functions." + names[tool] +
                               "<|channel|>commentary json<|message|>"};
  return {Head(tool, 0)};
}
std::string ToolCallPlan::Tail() const {
  if (IsHarmony(family)) return std::string(kHarmonyCall);
  if (generic()) return std::string(chat_generic::kCallClose);
  if (IsKeyValue(family)) return "";
  if (IsQwen(family)) return "}\n" + std::string(kQwenCallClose);
  if (family == kFamilyDeepseekV3) return "\n```" + std::string(kDsCallEnd);
  if (family == kFamilyDeepseekV31) return std::string(kDsCallEnd);
  return std::string(kKimiCallEnd);
}
std::vector<std::string> ToolCallPlan::Gaps(bool after_think) const {
  // Harmony's call after its analysis message is a new message.
  if (after_think && IsHarmony(family)) return {std::string(kHarmonyReplyStart)};
  // The templates put a blank line between a think block and what follows
  // (GLM's and Qwen3.5's between text and a call too).
  if (after_think || family == kFamilyGlm45 || family == kFamilyQwen35)
    return family == kFamilyXtml
               ? std::vector<std::string>{std::string(kXtmlOpen) + "response" + kXtmlSep}
               : std::vector<std::string>{"", "\n", "\n\n"};
  return {""};
}
std::string ToolCallPlan::Between() const {
  return IsQwen(family) || family == kFamilyGlm45 || family == kFamilyQwen35 ? "\n"
         : generic() ? std::string(chat_generic::kCallsBetween)
                     : "";
}
std::string ToolCallPlan::End() const {
  if (generic()) return std::string(chat_generic::kCallsClose);
  if (IsQwen(family) || IsHarmony(family) || family == kFamilyGlm45 || family == kFamilyQwen35)
    return "";
  if (family == kFamilyXtml)
    return std::string(kXtmlClose) + "tools" + kXtmlSep + kXtmlClose + "message" + kXtmlSep;
  return std::string(IsDeepseek(family) ? kDsCallsEnd : kKimiSectionEnd);
}
std::vector<std::string_view> ToolCallPlan::Opens() const {
  if (IsQwen(family) || family == kFamilyQwen35) return {kQwenCallOpen};
  if (family == kFamilyGlm45) return {kGlmCallOpen};
  if (family == kFamilyXtml) {
    static const std::string tools = XtmlToolsOpen();
    return {tools, kXtmlCallOpen};
  }
  if (IsDeepseek(family)) return {kDsCallsBegin, kDsCallBegin};
  if (IsHarmony(family)) return {kHarmonyToAfterChannel, kHarmonyToFirst};
  if (generic()) return {};  // never free text
  return {kKimiSectionBegin};
}
std::vector<std::string_view> ToolCallPlan::ThinkMarkers() const {
  if (IsHarmony(family)) return {kHarmonyAnalysis, "<|end|>"};
  if (generic()) return {};
  if (family == kFamilyXtml) {
    static const std::string open = std::string(kXtmlOpen) + "think" + kXtmlSep,
                             close = std::string(kXtmlClose) + "think" + kXtmlSep;
    return {open, close};
  }
  return {"<think>", "</think>"};  // every other constrained family writes think blocks
}
bool ToolCallPlan::generic() const {
  return family == kFamilyDemo;
}
bool ToolCallPlan::RawValue(std::string_view name, std::string_view key) const {
  if (family != kFamilyGlm45 && family != kFamilyQwen35) return false;
  for (size_t k = 0; k < names.size(); ++k)
    if (names[k] == name) return pairs[k]->Raw(key);
  return false;
}

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const ToolCallPlan> plan,
                                       const Tokenizer& tok,
                                       std::shared_ptr<const grammar::VocabIndex> vocab)
    : plan_(std::move(plan)), tok_(tok), vocab_(std::move(vocab)) {
  // A token completes an opening after some text only if it holds it, or
  // begins with a proper suffix of it.
  const std::vector<std::string_view> opens = plan_->Opens();
  for (int32_t id = 0; id < vocab_->vocab(); ++id) {
    const std::string_view b = tok_.TokenBytes(id);
    if (b.empty()) continue;
    bool may = false;
    for (std::string_view open : opens) {
      may = may || b.find(open) != std::string_view::npos;
      for (size_t k = 1; !may && k < open.size(); ++k) may = b.starts_with(open.substr(k));
    }
    if (may) open_candidates_.push_back(id);
  }
  // A forced call's reply may not end inside harmony's analysis message.
  if (IsHarmony(plan_->family) && plan_->mode != ToolChoiceMode::kAuto &&
      plan_->mode != ToolChoiceMode::kNone)
    for (std::string_view end : {kHarmonyCall, std::string_view("<|return|>")})
      if (auto id = tok_.SpecialId(end)) think_ends_.push_back(*id);
  if (plan_->thinking_open)
    phase_ = Phase::kThink;
  else
    Start(false);
}

void ToolCallConstraint::Start(bool after_think) {
  // Harmony's generation prompt opened the reply's first header.
  tail_ = after_think || !IsHarmony(plan_->family) ? "" : std::string(kHarmonyReplyStart);
  const bool forced =
      plan_->mode == ToolChoiceMode::kRequired || plan_->mode == ToolChoiceMode::kFunction;
  if (!forced && !plan_->generic()) {
    phase_ = Phase::kFree;
    return;
  }
  std::vector<Alt> alts;
  const std::vector<std::string> gaps = plan_->Gaps(after_think);
  for (const std::string& gap : gaps)
    for (size_t k = 0; k < plan_->names.size(); ++k)
      if (plan_->mode != ToolChoiceMode::kFunction || static_cast<int>(k) == plan_->function)
        alts.push_back({gap + plan_->Head(k, 0), Alt::Then::kArgs, k});
  if (plan_->response)
    alts.push_back(
        {std::string(chat_generic::kResponseOpen), Alt::Then::kArgs, plan_->names.size()});
  if (!after_think && IsHarmony(plan_->family))
    alts.push_back({std::string(kHarmonyAnalysis), Alt::Then::kThink, 0});
  MarkupOf(std::move(alts), "");
}

void ToolCallConstraint::MarkupOf(std::vector<Alt> alts, std::string got) {
  phase_ = Phase::kMarkup;
  alts_ = std::move(alts);
  got_ = std::move(got);
  Settle();
}

void ToolCallConstraint::Settle() {
  // Only a text no other alternative goes on from is taken (an empty End()
  // beside a next call's head waits: complete() lets the reply end there).
  for (const Alt& a : alts_) {
    if (a.text != got_) continue;
    const bool longer = std::any_of(alts_.begin(), alts_.end(), [&](const Alt& o) {
      return o.text.size() > got_.size() && o.text.starts_with(got_);
    });
    if (longer) continue;
    const Alt taken = a;
    switch (taken.then) {
      case Alt::Then::kArgs:
        phase_ = Phase::kArgs;
        args_response_ = taken.tool == plan_->names.size();
        if (args_response_ || plan_->pairs.empty()) {
          args_ = std::make_unique<grammar::JsonTokenConstraint>(
              args_response_ ? plan_->response : plan_->schemas[taken.tool], vocab_);
          return;
        }
        if (!value_tokens_) {  // made once a call needs it (a scan of the vocabulary)
          std::vector<std::string> markers = plan_->pairs[0]->forbidden;
          markers.push_back(plan_->pairs[0]->value_close);
          value_tokens_ = MakeValueTokens(tok_, *vocab_, markers);
        }
        args_ = std::make_unique<KeyValueConstraint>(plan_->pairs[taken.tool], tok_, vocab_,
                                                     value_tokens_);
        return;
      case Alt::Then::kThink:
        phase_ = Phase::kThink;
        tail_.clear();
        return;
      case Alt::Then::kDone:
        phase_ = Phase::kDone;
        return;
      case Alt::Then::kAfterCall: {
        ++calls_;
        std::vector<Alt> next{{plan_->End(), Alt::Then::kDone, 0}};
        if (plan_->parallel)
          for (size_t k = 0; k < plan_->names.size(); ++k)
            if (plan_->mode != ToolChoiceMode::kFunction || static_cast<int>(k) == plan_->function)
              next.push_back({plan_->Between() + plan_->Head(k, calls_), Alt::Then::kArgs, k});
        return MarkupOf(std::move(next), "");
      }
    }
  }
}

bool ToolCallConstraint::complete() const {
  if (phase_ == Phase::kFree || phase_ == Phase::kDone) return true;
  if (phase_ == Phase::kThink) return think_ends_.empty();
  if (phase_ != Phase::kMarkup) return false;
  return std::any_of(alts_.begin(), alts_.end(),
                     [&](const Alt& a) { return a.then == Alt::Then::kDone && a.text == got_; });
}

bool ToolCallConstraint::MarkupAllows(std::string_view bytes) const {
  if (bytes.empty()) return false;
  return std::any_of(alts_.begin(), alts_.end(), [&](const Alt& a) {
    return a.text.size() >= got_.size() + bytes.size() && a.text.starts_with(got_) &&
           std::string_view(a.text).substr(got_.size()).starts_with(bytes);
  });
}

std::pair<size_t, std::string_view> ToolCallConstraint::OpenAt(std::string_view bytes) const {
  const std::string s = tail_ + std::string(bytes);
  std::pair<size_t, std::string_view> first{std::string::npos, {}};
  for (std::string_view open : plan_->Opens()) {
    const size_t from = tail_.size() >= open.size() ? tail_.size() - open.size() + 1 : 0;
    if (const size_t at = s.find(open, from); at < first.first) first = {at, open};
  }
  return first;
}

std::vector<ToolCallConstraint::Alt> ToolCallConstraint::FirstHeads(std::string_view open) const {
  std::vector<Alt> alts;
  for (size_t k = 0; k < plan_->names.size(); ++k)
    for (const std::string& head : plan_->FirstHeadForms(k))
      if (const size_t at = head.find(open); at != std::string::npos)
        alts.push_back({head.substr(at), Alt::Then::kArgs, k});
  return alts;
}

bool ToolCallConstraint::FreeAllows(std::string_view bytes) const {
  const auto [at, open] = OpenAt(bytes);
  if (at == std::string::npos) return true;
  if (plan_->mode == ToolChoiceMode::kNone) return false;
  // auto: what follows the opening in the token must go on as a call's head.
  const std::string after = (tail_ + std::string(bytes)).substr(at);
  for (const Alt& a : FirstHeads(open))
    if (a.text.starts_with(after)) return true;
  return false;
}

size_t ToolCallConstraint::Mask(std::span<float> logits) {
  const size_t vocab = std::min(logits.size(), static_cast<size_t>(vocab_->vocab()));
  for (size_t i = vocab; i < logits.size(); ++i) logits[i] = -INFINITY;
  switch (phase_) {
    case Phase::kThink:
      for (int32_t id : think_ends_)
        if (static_cast<size_t>(id) < vocab) logits[static_cast<size_t>(id)] = -INFINITY;
      return vocab - think_ends_.size();
    case Phase::kFree: {
      size_t n = vocab;
      for (int32_t id : open_candidates_)
        if (static_cast<size_t>(id) < vocab && !FreeAllows(tok_.TokenBytes(id))) {
          logits[static_cast<size_t>(id)] = -INFINITY;
          --n;
        }
      return n;
    }
    case Phase::kArgs:
      return args_->Mask(logits);
    case Phase::kMarkup: {
      size_t n = 0;
      for (size_t i = 0; i < vocab; ++i) {
        if (MarkupAllows(tok_.TokenBytes(static_cast<int32_t>(i))))
          ++n;
        else
          logits[i] = -INFINITY;
      }
      return n;
    }
    case Phase::kDone:
      break;
  }
  for (size_t i = 0; i < vocab; ++i) logits[i] = -INFINITY;
  return 0;
}

bool ToolCallConstraint::Accept(int32_t token) {
  const std::string_view bytes = tok_.TokenBytes(token);
  const std::vector<std::string_view> think = plan_->ThinkMarkers();
  const auto keep_tail = [&] {
    constexpr size_t kReach = 64;  // longer than every marker
    if (tail_.size() > kReach) tail_.erase(0, tail_.size() - kReach);
  };
  switch (phase_) {
    case Phase::kThink:
      if (std::find(think_ends_.begin(), think_ends_.end(), token) != think_ends_.end())
        return false;
      tail_ += bytes;
      if (!think.empty() && tail_.find(think[1]) != std::string::npos)
        Start(true);
      else
        keep_tail();
      return true;
    case Phase::kFree: {
      if (!FreeAllows(bytes)) return false;
      const auto [at, open] = OpenAt(bytes);
      tail_ += bytes;
      if (at != std::string::npos) {
        MarkupOf(FirstHeads(open), tail_.substr(at));
        return true;
      }
      if (!think.empty() && tail_.find(think[0]) != std::string::npos) {
        phase_ = Phase::kThink;
        tail_.erase(0, tail_.find(think[0]) + think[0].size());
      }
      keep_tail();
      return true;
    }
    case Phase::kArgs:
      if (!args_->Accept(token)) return false;
      if (args_->finished())
        MarkupOf(
            {args_response_ ? Alt{std::string(chat_generic::kResponseClose), Alt::Then::kDone, 0}
                            : Alt{plan_->Tail(), Alt::Then::kAfterCall, 0}},
            "");
      return true;
    case Phase::kMarkup:
      if (!MarkupAllows(bytes)) return false;
      got_ += bytes;
      Settle();
      return true;
    case Phase::kDone:
      break;
  }
  return false;
}

}  // namespace waste::serve
