#include "serve/reply.h"

#include <algorithm>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/chat_generic.h"
#include "engine/tokenizer/utf8.h"
#include "serve/generic_reply.h"
#include "serve/tool_arguments.h"
#include "serve/tool_constraint.h"

namespace waste::serve {
namespace {

using Mode = ReplyParser::Mode;
using Act = ReplyParser::Act;
using Rule = ReplyParser::Rule;
using ojson = nlohmann::ordered_json;
constexpr size_t kModes = static_cast<size_t>(Mode::kHidden) + 1;

bool IsFamily(const ChatFormat& chat, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return chat.family == n; });
}

bool HasThinkBlocks(const ChatFormat& chat) {
  return IsFamily(chat, {kFamilyQwen3, kFamilyQwen35, kFamilyGlm45, kFamilyDeepseekV3,
                         kFamilyDeepseekV31, kFamilyKimiK2});
}

// The family's syntax (serve/reply.h): the markers each mode looks for, and
// the other markup specials a call or a header holds.
std::vector<std::vector<Rule>> Syntax(const ChatFormat& chat, std::vector<std::string>* inner) {
  std::vector<std::vector<Rule>> r(kModes);
  const auto at = [&](Mode m) -> std::vector<Rule>& { return r[static_cast<size_t>(m)]; };
  if (HasThinkBlocks(chat)) {
    at(Mode::kText).push_back({"<think>", Mode::kReasoning});
    at(Mode::kReasoning).push_back({"</think>", Mode::kText});
  }
  if (IsFamily(chat, {kFamilyQwen3, kFamilyQwen35, kFamilyGlm45})) {
    at(Mode::kText).push_back({std::string(kQwenCallOpen), Mode::kCall, Act::kCallBegin});
    at(Mode::kCall).push_back({std::string(kQwenCallClose), Mode::kText, Act::kCallEnd});
    // Qwen3.5's <function=..> and <parameter=..> are text, not specials.
    if (!IsFamily(chat, {kFamilyQwen35}))
      *inner = {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
  } else if (IsFamily(chat, {kFamilyDeepseekV3, kFamilyDeepseekV31})) {
    at(Mode::kText).push_back({std::string(kDsCallsBegin), Mode::kSection});
    at(Mode::kText).push_back({std::string(kDsCallBegin), Mode::kCall, Act::kCallBegin});
    at(Mode::kSection).push_back({std::string(kDsCallBegin), Mode::kCall, Act::kCallBegin});
    at(Mode::kSection).push_back({std::string(kDsCallsEnd), Mode::kText});
    at(Mode::kCall).push_back({std::string(kDsCallEnd), Mode::kSection, Act::kCallEnd});
    *inner = {std::string(kDsSep)};
  } else if (IsFamily(chat, {kFamilyKimiK2})) {
    at(Mode::kText).push_back({std::string(kKimiSectionBegin), Mode::kSection});
    at(Mode::kSection).push_back({std::string(kKimiCallBegin), Mode::kCall, Act::kCallBegin});
    at(Mode::kSection).push_back({std::string(kKimiSectionEnd), Mode::kText});
    at(Mode::kCall).push_back({std::string(kKimiCallEnd), Mode::kSection, Act::kCallEnd});
    *inner = {std::string(kKimiArgsBegin)};
  } else if (IsFamily(chat, {kFamilyHarmony})) {
    at(Mode::kHeader).push_back({"<|message|>", Mode::kText, Act::kHeaderEnd});
    for (const char* end : {"<|end|>", "<|return|>", "<|call|>"}) {
      at(Mode::kText).push_back({end, Mode::kHidden});
      at(Mode::kReasoning).push_back({end, Mode::kHidden});
      at(Mode::kCall).push_back({end, Mode::kHidden, Act::kCallEnd});
    }
    at(Mode::kHidden).push_back({"<|start|>", Mode::kHeader});
    *inner = {"<|channel|>", "<|constrain|>"};
  } else if (IsFamily(chat, {kFamilyXtml})) {
    for (Mode m : {Mode::kText, Mode::kReasoning, Mode::kHidden}) {
      at(m).push_back({kXtmlOpen, Mode::kHeader});
      at(m).push_back({kXtmlClose, Mode::kHidden});  // the close tag's name is hidden
    }
    at(Mode::kHeader).push_back({kXtmlSep, Mode::kHidden, Act::kHeaderEnd});
    at(Mode::kCall)
        .push_back({std::string(kXtmlClose) + "call" + kXtmlSep, Mode::kHidden, Act::kCallEnd});
  }
  return r;
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

bool GoodName(std::string_view n) {
  if (n.empty() || n.size() > 128) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
  });
}

// A JSON object's text, or none.
std::optional<ojson> Object(std::string_view text) {
  ojson v = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_object()) return std::nullopt;
  return v;
}

struct Call {
  std::string name, arguments;
};

// Arguments kept as the model wrote them, once they are known to be an object.
std::optional<Call> RawCall(std::string_view name, std::string_view args) {
  name = Trim(name);
  args = Trim(args);
  if (!GoodName(name) || !Object(args)) return std::nullopt;
  return Call{std::string(name), std::string(args)};
}

// Qwen3: {"name": NAME, "arguments": {...}} (arguments also as a JSON string
// holding the object).
std::optional<Call> QwenCall(std::string_view body) {
  const auto v = Object(Trim(body));
  if (!v || !v->contains("name") || !(*v)["name"].is_string() || !v->contains("arguments"))
    return std::nullopt;
  const ojson& a = (*v)["arguments"];
  const std::string name = (*v)["name"];
  if (a.is_string()) return RawCall(name, a.get<std::string>());
  if (!a.is_object() || !GoodName(name)) return std::nullopt;
  return Call{name, a.dump()};
}

// GLM-4.5: NAME then <arg_key>K</arg_key> <arg_value>V</arg_value> pairs;
// a value `plan` says is a string raw.
std::optional<Call> GlmCall(std::string_view body, const ToolCallPlan* plan) {
  const size_t first = body.find("<arg_key>");
  const std::string_view name = Trim(body.substr(0, first));
  if (!GoodName(name)) return std::nullopt;
  ojson args = ojson::object();
  std::string_view rest = first == std::string_view::npos ? "" : body.substr(first);
  const auto take = [&](std::string_view open, std::string_view close, std::string_view* out) {
    rest = Trim(rest);
    if (rest.substr(0, open.size()) != open) return false;
    const size_t end = rest.find(close, open.size());
    if (end == std::string_view::npos) return false;
    *out = rest.substr(open.size(), end - open.size());
    rest.remove_prefix(end + close.size());
    return true;
  };
  while (!Trim(rest).empty()) {
    std::string_view key, value;
    if (!take("<arg_key>", "</arg_key>", &key) || !take("<arg_value>", "</arg_value>", &value))
      return std::nullopt;
    const std::string k(Trim(key));
    ojson v = plan && plan->RawValue(name, k) ? ojson(ojson::value_t::discarded)
                                              : ojson::parse(Trim(value), nullptr, false);
    args[k] = v.is_discarded() ? ojson(std::string(value)) : std::move(v);
  }
  return Call{std::string(name), args.dump()};
}

// Qwen3.5: <function=NAME> then <parameter=KEY>\nVALUE\n</parameter> per
// argument, then </function>. A value is its JSON when it parses as JSON,
// else its text (the template writes strings bare, the rest json.dumps); a
// value `plan` says is a string raw.
std::optional<Call> Qwen35Call(std::string_view body, const ToolCallPlan* plan) {
  constexpr std::string_view kFunction = kQwen35Function, kFunctionEnd = "</function>",
                             kParameter = kQwen35Parameter, kParameterEnd = kQwen35ParameterClose;
  std::string_view rest = Trim(body);
  if (!rest.starts_with(kFunction)) return std::nullopt;
  size_t end = rest.find('>');
  if (end == std::string_view::npos) return std::nullopt;
  const std::string_view name = Trim(rest.substr(kFunction.size(), end - kFunction.size()));
  if (!GoodName(name)) return std::nullopt;
  ojson args = ojson::object();
  for (rest = Trim(rest.substr(end + 1)); !rest.starts_with(kFunctionEnd); rest = Trim(rest)) {
    if (!rest.starts_with(kParameter) || (end = rest.find('>')) == std::string_view::npos)
      return std::nullopt;
    const std::string key(Trim(rest.substr(kParameter.size(), end - kParameter.size())));
    const size_t close = rest.find(kParameterEnd, end + 1);
    if (key.empty() || close == std::string_view::npos) return std::nullopt;
    std::string_view value = rest.substr(end + 1, close - end - 1);
    // The template's own newlines around the value.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    ojson v = plan && plan->RawValue(name, key) ? ojson(ojson::value_t::discarded)
                                                : ojson::parse(value, nullptr, false);
    args[key] = v.is_discarded() ? ojson(std::string(value)) : std::move(v);
    rest.remove_prefix(close + kParameterEnd.size());
  }
  if (!Trim(rest.substr(kFunctionEnd.size())).empty()) return std::nullopt;
  return Call{std::string(name), args.dump()};
}

// The value of attribute `key` in an XTML open tag's text, unescaped.
std::optional<std::string> XtmlAttr(std::string_view tag, std::string_view key) {
  const std::string open = " " + std::string(key) + "=\"";
  const size_t at = tag.find(open);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t end = tag.find('"', at + open.size());
  if (end == std::string_view::npos) return std::nullopt;
  return XtmlUnescape(tag.substr(at + open.size(), end - at - open.size()));
}

// Kimi K3: the call element's argument elements (KEY, TYPE: a string raw,
// others JSON of that type), or one json element holding the arguments.
std::optional<Call> XtmlCall(std::string_view name, std::string_view body) {
  const std::string open = kXtmlOpen, sep = kXtmlSep, close = kXtmlClose;
  ojson args = ojson::object();
  for (std::string_view rest = Trim(body); !rest.empty(); rest = Trim(rest)) {
    if (!rest.starts_with(open)) return std::nullopt;
    const size_t tag_end = rest.find(sep);
    if (tag_end == std::string_view::npos) return std::nullopt;
    const std::string_view tag = rest.substr(open.size(), tag_end - open.size());
    const std::string element(tag.substr(0, tag.find(' ')));
    const std::string end = close + element + sep;
    const size_t value_end = rest.find(end, tag_end + sep.size());
    if (value_end == std::string_view::npos) return std::nullopt;
    const std::string_view value =
        rest.substr(tag_end + sep.size(), value_end - tag_end - sep.size());
    rest.remove_prefix(value_end + end.size());
    if (element == "json") {
      if (!args.empty() || !Trim(rest).empty()) return std::nullopt;
      return RawCall(name, value);
    }
    const auto key = XtmlAttr(tag, "key"), type = XtmlAttr(tag, "type");
    if (element != "argument" || !key || !type) return std::nullopt;
    if (*type == "string") {
      args[*key] = std::string(value);
      continue;
    }
    ojson v = ojson::parse(Trim(value), nullptr, false);
    const bool typed = (*type == "number" && v.is_number()) ||
                       (*type == "boolean" && v.is_boolean()) || (*type == "null" && v.is_null()) ||
                       (*type == "object" && v.is_object()) || (*type == "array" && v.is_array());
    if (!typed) return std::nullopt;
    args[*key] = std::move(v);
  }
  if (!GoodName(name)) return std::nullopt;
  return Call{std::string(name), args.dump()};
}

// DeepSeek-V3: function<｜tool▁sep｜>NAME\n```json\nARGS\n```.
std::optional<Call> DeepseekV3Call(std::string_view body) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos || Trim(body.substr(0, sep)) != "function") return std::nullopt;
  std::string_view rest = body.substr(sep + kDsSep.size());
  const size_t nl = rest.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  const std::string_view name = rest.substr(0, nl);
  rest = Trim(rest.substr(nl));
  constexpr std::string_view kOpen = "```json", kClose = "```";
  if (rest.size() < kOpen.size() + kClose.size() || rest.substr(0, kOpen.size()) != kOpen ||
      rest.substr(rest.size() - kClose.size()) != kClose)
    return std::nullopt;
  return RawCall(name, rest.substr(kOpen.size(), rest.size() - kOpen.size() - kClose.size()));
}

// DeepSeek-V3.1: NAME<｜tool▁sep｜>ARGS.
std::optional<Call> DeepseekV31Call(std::string_view body) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos) return std::nullopt;
  return RawCall(body.substr(0, sep), body.substr(sep + kDsSep.size()));
}

// Kimi K2: functions.NAME:IDX<|tool_call_argument_begin|>ARGS.
std::optional<Call> KimiCall(std::string_view body) {
  const size_t sep = body.find(kKimiArgsBegin);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view id = Trim(body.substr(0, sep));
  const size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == id.size() ||
      !std::all_of(id.begin() + colon + 1, id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  id = id.substr(0, colon);
  if (id.substr(0, 10) == "functions.") id.remove_prefix(10);
  return RawCall(id, body.substr(sep + kKimiArgsBegin.size()));
}

std::optional<Call> ParseCall(const ChatFormat& chat, std::string_view body,
                              const std::string& header_name, const ToolCallPlan* plan) {
  if (IsFamily(chat, {kFamilyQwen3})) return QwenCall(body);
  if (IsFamily(chat, {kFamilyQwen35})) return Qwen35Call(body, plan);
  if (IsFamily(chat, {kFamilyGlm45})) return GlmCall(body, plan);
  if (IsFamily(chat, {kFamilyXtml})) return XtmlCall(header_name, body);
  if (IsFamily(chat, {kFamilyDeepseekV3})) return DeepseekV3Call(body);
  if (IsFamily(chat, {kFamilyDeepseekV31})) return DeepseekV31Call(body);
  if (IsFamily(chat, {kFamilyKimiK2})) return KimiCall(body);
  if (IsFamily(chat, {kFamilyHarmony})) return RawCall(header_name, body);
  return std::nullopt;
}

// The word after `key` in `s`, up to white space or markup.
std::string WordAfter(std::string_view s, std::string_view key) {
  const size_t at = s.find(key);
  if (at == std::string_view::npos) return {};
  s.remove_prefix(at + key.size());
  const size_t end = s.find_first_of(" \t\n<");
  return std::string(s.substr(0, end));
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// A constrained call's markup around its arguments (ToolCallPlan::Head and
// Tail): what the head ends with, the call its head makes with "{}" for
// arguments, and what comes between the arguments and the end marker.
struct StreamedSyntax {
  std::string_view args_open;
  std::optional<Call> (*call)(std::string_view head);
  std::string_view close;  // before the end marker, after white space
};
StreamedSyntax Streamed(const ChatFormat& chat) {
  if (chat.family == kFamilyQwen3)
    return {"\"arguments\": ", [](std::string_view h) { return QwenCall(std::string(h) + "{}}"); },
            "}"};
  if (chat.family == kFamilyDeepseekV3)
    return {"```json\n",
            [](std::string_view h) { return DeepseekV3Call(std::string(h) + "{}\n```"); }, "```"};
  if (chat.family == kFamilyDeepseekV31)
    return {kDsSep, [](std::string_view h) { return DeepseekV31Call(std::string(h) + "{}"); }, ""};
  return {kKimiArgsBegin, [](std::string_view h) { return KimiCall(std::string(h) + "{}"); }, ""};
}

bool Space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

bool ThinkingOpen(const ChatFormat& chat, std::string_view open) {
  if (chat.family == kFamilyXtml)
    return EndsWith(open, std::string(kXtmlOpen) + "think" + kXtmlSep);
  if (!HasThinkBlocks(chat)) return false;
  const size_t begin = open.rfind("<think>"), end = open.rfind("</think>");
  return begin != std::string_view::npos && (end == std::string_view::npos || begin > end);
}

std::string ThinkClose(const ChatFormat& chat) {
  if (HasThinkBlocks(chat)) return "</think>";
  if (chat.family == kFamilyHarmony) return "<|end|><|start|>assistant" + chat.reply_after;
  if (chat.family == kFamilyXtml)
    return std::string(kXtmlClose) + "think" + kXtmlSep + kXtmlOpen + "response" + kXtmlSep;
  return "";
}

std::string NewToolCallId() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlnum - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

ReplyParser::ReplyParser(const Tokenizer& tok, const ChatFormat& chat, ReplyOptions o)
    : tok_(tok),
      chat_(chat),
      end_(std::move(o.end_of_turn)),
      calls_constrained_(
          o.tool_plan &&
          IsFamily(chat, {kFamilyQwen3, kFamilyQwen35, kFamilyKimiK2, kFamilyDeepseekV3,
                          kFamilyDeepseekV31, kFamilyHarmony, kFamilyGlm45, kFamilyXtml})),
      tool_plan_(std::move(o.tool_plan)),
      generic_(tool_plan_ && chat_generic::Applies(chat) ? std::make_unique<GenericReply>()
                                                         : nullptr),
      stop_text_(o.stops),
      stop_reasoning_(std::move(o.stops)) {
  std::vector<std::string> inner;
  rules_ = Syntax(chat, &inner);
  strip_markup_newlines_ = std::any_of(rules_.begin(), rules_.end(),
                                       [](const std::vector<Rule>& r) { return !r.empty(); });
  for (const auto& rules : rules_)
    for (const Rule& r : rules) inner.push_back(r.marker);
  for (const std::string& m : inner)
    if (auto id = tok.SpecialId(m)) markup_ids_.push_back(*id);
  if (chat.family == kFamilyHarmony)
    mode_ = !chat.reply_after.empty() && EndsWith(chat.open, chat.reply_after) ? Mode::kText
                                                                               : Mode::kHeader;
  else if (o.thinking_open.value_or(ThinkingOpen(chat, chat.open)))
    mode_ = Mode::kReasoning;
}

ReplyParser::~ReplyParser() = default;

std::vector<ReplyEvent> ReplyParser::Feed(int32_t id) {
  if (done_) return {};
  const bool end = std::find(end_.begin(), end_.end(), id) != end_.end();
  const auto& rules = rules_[static_cast<size_t>(mode_)];
  const std::string_view bytes = tok_.TokenBytes(id);
  if (tok_.IsSpecial(id)) {
    // A special is read only where the syntax reads it: a marker of this
    // mode, or any of the family's markup inside a call or a header.
    const bool marker =
        std::any_of(rules.begin(), rules.end(), [&](const Rule& r) { return r.marker == bytes; });
    const bool inner = (mode_ == Mode::kCall || mode_ == Mode::kHeader) &&
                       std::find(markup_ids_.begin(), markup_ids_.end(), id) != markup_ids_.end();
    if (marker || inner) Bytes(bytes);
  } else if (!end) {
    Bytes(bytes);
  }
  if (end && !done_) {
    Finish();
    done_ = true;
  }
  return Take();
}

std::vector<ReplyEvent> ReplyParser::Flush() {
  cut_in_call_ = !done_ && (generic_ ? generic_->in_call() : mode_ == Mode::kCall);
  if (!done_) Finish();
  return Take();
}

std::vector<ReplyEvent> ReplyParser::Take() {
  std::vector<ReplyEvent> out;
  out.swap(out_);
  return out;
}

void ReplyParser::Bytes(std::string_view b) {
  partial_.append(b);
  const size_t n = CompleteUtf8Prefix(partial_);
  std::string whole = tokenizer::ReplaceInvalidUtf8(std::string_view(partial_).substr(0, n));
  partial_.erase(0, n);
  if (generic_) return Generic(whole, false);
  scan_ += whole;
  Scan();
}

void ReplyParser::Generic(std::string_view bytes, bool end) {
  std::vector<ReplyEvent> events;
  if (end)
    generic_->Finish(&events);
  else
    generic_->Feed(bytes, &events);
  for (ReplyEvent& e : events) {
    if (done_) return;  // a stop string ended the text
    if (e.kind == ReplyEvent::Kind::kText)
      Emit(e.kind, e.text);
    else
      out_.push_back(std::move(e));
  }
}

void ReplyParser::Scan() {
  while (!done_) {
    const auto& rules = rules_[static_cast<size_t>(mode_)];
    size_t at = std::string::npos;
    const Rule* hit = nullptr;
    for (const Rule& r : rules)
      if (const size_t p = scan_.find(r.marker); p < at) at = p, hit = &r;
    if (!hit) break;
    const Rule rule = *hit;
    ToSink(std::string_view(scan_).substr(0, at));
    scan_.erase(0, at + rule.marker.size());
    if (!done_) Marker(rule);
  }
  if (done_) return;
  // Hold back the longest tail that may begin a marker of this mode.
  size_t keep = 0;
  for (const Rule& r : rules_[static_cast<size_t>(mode_)])
    for (size_t n = std::min(r.marker.size() - 1, scan_.size()); n > keep; --n)
      if (scan_.compare(scan_.size() - n, n, r.marker, 0, n) == 0) {
        keep = n;
        break;
      }
  ToSink(std::string_view(scan_).substr(0, scan_.size() - keep));
  scan_.erase(0, scan_.size() - keep);
}

void ReplyParser::ToSink(std::string_view s) {
  if (s.empty()) return;
  switch (mode_) {
    case Mode::kText:
      return Show(ReplyEvent::Kind::kText, s);
    case Mode::kReasoning:
      return Show(ReplyEvent::Kind::kReasoning, s);
    case Mode::kCall:
      call_.append(s);
      if (calls_constrained_) StreamCall();
      return;
    case Mode::kHeader:
      header_.append(s);
      return;
    case Mode::kSection:
    case Mode::kHidden:
      return;
  }
}

void ReplyParser::Marker(const Rule& r) {
  EndSegment();
  after_markup_ = true;
  mode_ = r.next;
  switch (r.act) {
    case Act::kNone:
      break;
    case Act::kCallBegin:
      call_ = r.marker;
      call_begin_ = call_.size();
      call_name_.clear();
      break;
    case Act::kCallEnd:
      EndCall(r.marker);
      break;
    case Act::kHeaderEnd:
      if (chat_.family == kFamilyHarmony) {
        std::string to = WordAfter(header_, "to=");
        if (!to.empty()) {
          call_ = "<|start|>" + header_ + r.marker;
          call_begin_ = call_.size();
          call_name_ = to.substr(0, 10) == "functions." ? to.substr(10) : to;
          mode_ = Mode::kCall;
        } else {
          mode_ = WordAfter(header_, "<|channel|>") == "analysis" ? Mode::kReasoning : Mode::kText;
        }
      } else {  // XTML: the element's name
        const std::string name = header_.substr(0, header_.find_first_of(" \t\n"));
        if (name == "call") {
          call_ = kXtmlOpen + header_ + r.marker;
          call_begin_ = call_.size();
          call_name_ = XtmlAttr(header_, "tool").value_or("");
          mode_ = Mode::kCall;
          header_.clear();
          break;
        }
        mode_ = name == "think"      ? Mode::kReasoning
                : name == "response" ? Mode::kText
                                     : Mode::kHidden;
      }
      header_.clear();
      break;
  }
}

void ReplyParser::StreamCall() {
  if (IsFamily(chat_, {kFamilyGlm45, kFamilyQwen35, kFamilyXtml})) return StreamPairs();
  const StreamedSyntax syntax = Streamed(chat_);
  if (args_at_ == 0 && chat_.family == kFamilyHarmony) {
    // The header named the recipient; the body is the arguments.
    if (!GoodName(call_name_)) return;  // held to its end and checked
    out_.push_back({ReplyEvent::Kind::kToolCallStart, "", calls_, call_name_, NewToolCallId()});
    args_at_ = call_begin_;
  } else if (args_at_ == 0) {
    // The head as ToolCallPlan::Head writes it: its name, then the arguments.
    const std::string_view body = std::string_view(call_).substr(call_begin_);
    const size_t at = body.find(syntax.args_open);
    if (at == std::string_view::npos) return;
    const std::string_view head = body.substr(0, at + syntax.args_open.size());
    const auto call = syntax.call(head);
    if (!call) return;  // not the constraint's head: held to its end and checked
    out_.push_back({ReplyEvent::Kind::kToolCallStart, "", calls_, call->name, NewToolCallId()});
    args_at_ = call_begin_ + head.size();
  }
  // White space before the arguments is dropped; a tail that may be white
  // space after them, or the markup before the end marker, is held.
  if (!args_sent_)
    while (args_at_ < call_.size() && Space(call_[args_at_])) ++args_at_;
  size_t end = call_.size();
  while (end > args_at_ &&
         (Space(call_[end - 1]) || (!syntax.close.empty() && call_[end - 1] == syntax.close[0])))
    --end;
  if (end > args_at_) {
    out_.push_back(
        {ReplyEvent::Kind::kToolCallArgs, call_.substr(args_at_, end - args_at_), calls_, "", ""});
    args_at_ = end;
    args_sent_ = true;
  }
}

void ReplyParser::StreamPairs() {
  if (!pairs_) {
    // The head as ToolCallPlan::Head writes it: GLM's name line, Qwen3.5's
    // function line, K3's tool attribute.
    size_t at = call_begin_;
    std::string name = call_name_;
    if (chat_.family == kFamilyGlm45) {
      const size_t nl = call_.find('\n', call_begin_);
      if (nl == std::string::npos) return;
      name = call_.substr(call_begin_, nl - call_begin_);
      at = nl + 1;
    } else if (chat_.family == kFamilyQwen35) {
      const std::string open = "\n" + std::string(kQwen35Function);
      const size_t end = call_.find(">\n", call_begin_);
      if (end == std::string::npos) return;
      if (call_.compare(call_begin_, open.size(), open) != 0) return;  // held to its end, checked
      name = call_.substr(call_begin_ + open.size(), end - call_begin_ - open.size());
      at = end + 2;
    }
    const auto& names = tool_plan_->names;
    const auto tool = std::find(names.begin(), names.end(), name);
    if (tool == names.end()) return;  // not the constraint's head: held to its end and checked
    out_.push_back({ReplyEvent::Kind::kToolCallStart, "", calls_, name, NewToolCallId()});
    pairs_ = std::make_unique<KeyValueReader>(tool_plan_->pairs[tool - names.begin()]);
    args_at_ = at;
  }
  PushArgs(pairs_->Feed(std::string_view(call_).substr(args_at_)));
  args_at_ = call_.size();
}

void ReplyParser::PushArgs(std::string text) {
  if (!text.empty())
    out_.push_back({ReplyEvent::Kind::kToolCallArgs, std::move(text), calls_, "", ""});
}

// A call's end (`end`: its end marker; empty: the reply ended inside it):
// its events when it is well formed, else its markup as text.
void ReplyParser::EndCall(std::string_view end) {
  if (pairs_) {  // streamed pairs: the rest, closed unless the reply was cut
    if (!end.empty()) PushArgs(pairs_->Close());
    pairs_.reset();
  } else if (args_at_ > 0) {  // streamed: what was held, less the markup before the end marker
    const std::string_view close = Streamed(chat_).close;
    std::string_view rest = std::string_view(call_).substr(args_at_);
    while (!rest.empty() && Space(rest.back())) rest.remove_suffix(1);
    if (!end.empty() && rest.ends_with(close)) rest.remove_suffix(close.size());
    while (!rest.empty() && Space(rest.back())) rest.remove_suffix(1);
    PushArgs(std::string(rest));
  }
  if (args_at_ > 0) {
    out_.push_back({ReplyEvent::Kind::kToolCallEnd, "", calls_++, "", ""});
    args_at_ = 0;
    args_sent_ = false;
    call_.clear();
    return;
  }
  std::optional<Call> call;
  if (!end.empty())
    call =
        ParseCall(chat_, std::string_view(call_).substr(call_begin_), call_name_, tool_plan_.get());
  if (!call) {
    segment_start_ = true;
    Show(ReplyEvent::Kind::kText, call_ + std::string(end));
    EndSegment();
  } else {
    const int index = calls_++;
    out_.push_back({ReplyEvent::Kind::kToolCallStart, "", index, call->name, NewToolCallId()});
    out_.push_back({ReplyEvent::Kind::kToolCallArgs, call->arguments, index, "", ""});
    out_.push_back({ReplyEvent::Kind::kToolCallEnd, "", index, "", ""});
  }
  call_.clear();
  call_name_.clear();
}

void ReplyParser::Show(ReplyEvent::Kind kind, std::string_view s) {
  if (kind != shown_kind_) {
    EndSegment();
    shown_kind_ = kind;
  }
  const bool strip_leading =
      strip_markup_newlines_ &&
      (after_markup_ || kind == ReplyEvent::Kind::kReasoning || chat_.assistant_text_stripped);
  std::string piece;
  for (const char c : s) {
    if (c == '\n' && strip_markup_newlines_) {
      if (!(segment_start_ && strip_leading)) newlines_ += c;
      continue;
    }
    piece += newlines_;
    newlines_.clear();
    piece += c;
    segment_start_ = false;
  }
  Emit(kind, piece);
}

// Through the kind's stop strings into the events, joined to the last one of its kind.
void ReplyParser::Emit(ReplyEvent::Kind kind, std::string_view piece) {
  StopMatcher& stop = kind == ReplyEvent::Kind::kText ? stop_text_ : stop_reasoning_;
  Append(kind, stop.Feed(piece));
  if (stop.stopped()) done_ = true;
}

void ReplyParser::Append(ReplyEvent::Kind kind, std::string text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == kind)
    out_.back().text += text;
  else
    out_.push_back({kind, std::move(text), -1, "", ""});
}

// The segment of text or reasoning ends at a marker: its trailing newlines
// are the marker's, what the stop strings held is shown.
void ReplyParser::EndSegment() {
  newlines_.clear();
  Append(shown_kind_,
         (shown_kind_ == ReplyEvent::Kind::kText ? stop_text_ : stop_reasoning_).Flush());
  segment_start_ = true;
}

// The reply ended: what is held is shown; an open call is text.
void ReplyParser::Finish() {
  if (done_) return;
  // A streamed call's held tail may begin its end marker: markup, not arguments.
  if (mode_ == Mode::kCall && args_at_ > 0) scan_.clear();
  scan_ += tokenizer::ReplaceInvalidUtf8(partial_);
  partial_.clear();
  if (generic_) {
    Generic(std::exchange(scan_, {}), false);
    if (!done_) Generic({}, true);
  } else {
    ToSink(scan_);
    scan_.clear();
    if (done_) return;
    if (mode_ == Mode::kCall) EndCall({});
  }
  if (done_) return;
  // The reply's own trailing newlines are its text's.
  Emit(shown_kind_, std::exchange(newlines_, {}));
  if (!done_) EndSegment();
}

}  // namespace waste::serve
