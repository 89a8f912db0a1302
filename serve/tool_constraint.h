// Tool calls held to their tools: a token constraint (the scheduler's
// Generation::constraint) that knows the family's call markup, the tools
// offered and tool_choice.
//
//   auto       text is free; once the model opens a call, the markup up to
//              the arguments is forced with the name one of the tools', the
//              arguments held to that tool's `parameters` schema
//              (engine/grammar), then the close markup
//   none       the opening markup may not be written
//   required   the reply is calls (a named function: calls of it)
//   parallel   false: after one call, only the end of the reply
//
// Families (the markup ReplyParser reads, serve/reply.h; the markers are
// defined once, below):
//   qwen3      <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>,
//              calls apart by "\n"
//   kimi-k2    <|tool_calls_section_begin|>, each call <|tool_call_begin|>
//              functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>,
//              then <|tool_calls_section_end|> ends the reply
//   deepseek-v3.1  <｜tool▁calls▁begin｜>, each call <｜tool▁call▁begin｜>NAME
//              <｜tool▁sep｜>ARGS<｜tool▁call▁end｜>, then <｜tool▁calls▁end｜>
//   deepseek-v3    as V3.1 but each call function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//   glm-4.5    <tool_call>NAME\n, key/value pairs and </tool_call> (serve/tool_arguments.h),
//              calls apart by "\n"
//   qwen3.5    <tool_call>\n<function=NAME>\n, key/value pairs and
//              </function>\n</tool_call>, calls apart by "\n"
//   k3-xtml    the response element closed, <|open|>tools<|sep|>, each call
//              <|open|>call tool="NAME" index="IDX+1"<|sep|>, key/value pairs and
//              <|close|>call<|sep|> (serve/tool_arguments.h), then the tools and the
//              message closed end the reply
//   harmony    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS
//              <|call|> (OpenAI's harmony docs; the generation prompt wrote
//              <|start|>assistant), after an analysis message
//              <|start|>assistant; <|call|> ends the turn: one call a reply
//              (parallel is then at most one). In free text a call also
//              opens as the template renders past calls,
//              <|start|>assistant to=functions.NAME<|channel|>commentary
//              json<|message|>, held the same way
//   demo       no tool syntax in its template: the generic format
//              (engine/tokenizer/chat_generic.h), the whole reply one JSON
//              object, {"tool_calls": [{"name": "NAME", "arguments": ARGS}, ...]}
//              or (auto) {"response": TEXT}; tool_choice none: no plan (null),
//              the tools are not rendered and the reply is text
// In free text a call opens at the calls' begin marker, or at a call's
// (DeepSeek's and K3's parsers read a call without its section). A forced
// first call may follow blank lines after a think block (glm's at the
// reply's start too: it opens after an empty think element); K3's after a
// think element opens an empty response element first.
// Other families are refused by name (ToolCallPlan::Make).
//
// Thinking: a think block (harmony: an analysis message) is free text (no
// call opens inside one, as ReplyParser reads it); the constraint engages
// once it closes (a forced call may follow a blank line there; harmony's
// after <|start|>assistant). A forced call is forced from the reply's first
// token unless the prompt left a think block open, so a model that opens its
// own think block (Qwen3 with thinking on) does not think before a forced
// call; harmony's forced reply may open with its analysis message first.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/tool_arguments.h"

namespace waste::serve {

// The markers of the constrained families (ReplyParser reads the same).
inline constexpr std::string_view kQwenCallOpen = "<tool_call>";
inline constexpr std::string_view kQwenCallClose = "</tool_call>";
inline constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>";
inline constexpr std::string_view kKimiSectionEnd = "<|tool_calls_section_end|>";
inline constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
inline constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";
inline constexpr std::string_view kKimiArgsBegin = "<|tool_call_argument_begin|>";
// DeepSeek's markers (fullwidth bars, U+2581 for spaces).
inline constexpr std::string_view kDsCallsBegin =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "calls\xE2\x96\x81"
    "begin\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallsEnd =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "calls\xE2\x96\x81"
    "end\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallBegin =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "call\xE2\x96\x81"
    "begin\xEF\xBD\x9C>";
inline constexpr std::string_view kDsCallEnd =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "call\xE2\x96\x81"
    "end\xEF\xBD\x9C>";
inline constexpr std::string_view kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>";
// Harmony's (the markup around a call; serve/reply.h reads the rest).
inline constexpr std::string_view kHarmonyReplyStart = "<|start|>assistant";
inline constexpr std::string_view kHarmonyCall = "<|call|>";

enum class ToolChoiceMode { kNone, kAuto, kRequired, kFunction };

// A request's tool_choice, API-neutral (Anthropic's any is kRequired, its
// tool kFunction, disable_parallel_tool_use parallel false).
struct ToolChoiceSpec {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string function;  // kFunction: the tool's name
  bool parallel = true;
};

// What one request's generations share: the markup, the tools' compiled
// schemas, the choice. Immutable.
struct ToolCallPlan {
  std::string family;
  std::vector<std::string> names;                                    // the tools' names
  std::vector<std::shared_ptr<const grammar::JsonGrammar>> schemas;  // by tool
  std::vector<std::shared_ptr<const KeyValueArguments>>
      pairs;  // by tool: glm-4.5, qwen3.5, k3-xtml
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  int function = -1;           // kFunction: the tool's index
  bool parallel = true;        // more than one call
  bool thinking_open = false;  // the prompt left a think block open
  // The generic format with tool_choice auto: a text reply's string.
  std::shared_ptr<const grammar::JsonGrammar> response;

  // Checks the family and compiles each tool's parameters (an object schema;
  // none: any object). Errors begin with the field they are about, the
  // schema's as "tools[1]." + `schema_field` (the API's name for it), then
  // ": "; "tools: ..." for a family whose calls are not constrained. Null
  // when nothing is to be held (the generic format's tool_choice none).
  static Result<std::shared_ptr<const ToolCallPlan>> Make(
      std::string_view family, std::span<const ChatTool> tools, ToolChoiceMode mode,
      std::string_view function, bool parallel, bool thinking_open, std::string_view schema_field);

  // The markup from a call's start to its arguments, of call `index` (0, 1, ...).
  std::string Head(size_t tool, int index) const;
  // Every form a first call of `tool` may take in free text, Head(tool, 0) first.
  std::vector<std::string> FirstHeadForms(size_t tool) const;
  // The markup after the arguments (key/value families: none, their
  // arguments' constraint writes the call's close).
  std::string Tail() const;
  // What may come before a forced first call, at the reply's start or after its think block.
  std::vector<std::string> Gaps(bool after_think) const;
  // Before a second call's head; what ends the calls (before end of turn).
  std::string Between() const;
  std::string End() const;
  // What opens a call in free text (each is in one of FirstHeadForms(k)).
  std::vector<std::string_view> Opens() const;
  std::vector<std::string_view> ThinkMarkers() const;  // open, close; none: {}
  bool generic() const;  // the generic format (the whole reply a JSON object)
  // glm-4.5, qwen3.5: whether tool `name`'s argument `key` is written raw (a string).
  bool RawValue(std::string_view name, std::string_view key) const;
};

class ToolCallConstraint : public grammar::TokenConstraint {
 public:
  // `tok` must outlive it.
  ToolCallConstraint(std::shared_ptr<const ToolCallPlan> plan, const Tokenizer& tok,
                     std::shared_ptr<const grammar::VocabIndex> vocab);
  size_t Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;
  bool complete() const override;
  bool finished() const override { return phase_ == Phase::kDone; }

 private:
  enum class Phase { kFree, kThink, kMarkup, kArgs, kDone };
  // A markup text the reply may be writing, and what follows it.
  struct Alt {
    std::string text;
    enum class Then { kArgs, kAfterCall, kThink, kDone } then;
    size_t tool = 0;  // kArgs: the tool, or names.size(): the generic text reply
  };
  void Start(bool after_think);  // at the reply's start, or after its think block
  void MarkupOf(std::vector<Alt> alts, std::string got);
  void Settle();  // a markup text written whole: on to what follows it
  bool MarkupAllows(std::string_view bytes) const;
  // Free text: where an opening would begin in tail_ + bytes, and which
  // (npos: none would be complete there).
  std::pair<size_t, std::string_view> OpenAt(std::string_view bytes) const;
  // The heads of a first call that opens with `open`.
  std::vector<Alt> FirstHeads(std::string_view open) const;
  bool FreeAllows(std::string_view bytes) const;

  std::shared_ptr<const ToolCallPlan> plan_;
  const Tokenizer& tok_;
  std::shared_ptr<const grammar::VocabIndex> vocab_;
  std::vector<int32_t> open_candidates_;  // tokens that may complete Open() after some text

  Phase phase_ = Phase::kFree;
  std::string tail_;  // free text, think block: the last bytes (markers' reach)
  std::vector<Alt> alts_;
  std::string got_;  // the markup written so far
  std::unique_ptr<grammar::TokenConstraint> args_;
  bool args_response_ = false;       // args_ holds the generic text reply, not a call
  std::vector<int32_t> think_ends_;  // forced: tokens that would end the reply while thinking
  std::shared_ptr<const ValueTokens> value_tokens_;  // key/value families: MakeValueTokens
  int calls_ = 0;
};

}  // namespace waste::serve
