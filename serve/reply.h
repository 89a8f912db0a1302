// A chat reply's tokens as what a client is shown, API-neutral: pieces of
// text, of thinking, and of tool calls. OpenAI's chat completions
// (content, reasoning_content, tool_calls) and Anthropic's Messages (text,
// thinking and tool_use blocks) are both written from these events, whole or
// streamed (serve/openai.h, serve/anthropic.h).
//
// Markup never reaches an event: end-of-turn and other special tokens, the
// family's thinking and tool-call delimiters are consumed here. Stop strings
// end the text (and nothing after them is shown); UTF-8 is held back to whole
// characters, as ReplyText does (serve/openai.h).
//
// The family's syntax (ChatFormat::family), read on the reply's bytes (the
// texts of its markup's special tokens included, other specials dropped), so
// that a marker is found whether the tokenizer has it as one special token or
// as plain text; bytes that may be the start of a marker wait for the next
// token, as stop strings do:
//
//   qwen3, glm-4.5       <think>..</think> reasoning; <tool_call>..</tool_call> a call:
//                        qwen3's a JSON object {"name", "arguments"}, GLM's
//                        NAME <arg_key>K</arg_key><arg_value>V</arg_value>..., each V
//                        the JSON value it parses as, else a string (vLLM's glm45);
//                        raw when the plan's tool says the key's values are strings
//   qwen3.5              as qwen3, a call <function=NAME> with <parameter=K>\nV\n
//                        </parameter> per argument, V read as GLM's
//   deepseek-v3, -v3.1   <think>..</think> (R1-style and V3.1's thinking); calls in
//                        <｜tool▁calls▁begin｜>..<｜tool▁calls▁end｜>, each
//                        <｜tool▁call▁begin｜>..<｜tool▁call▁end｜>: V3's
//                        function<｜tool▁sep｜>NAME\n```json\nARGS\n```, V3.1's
//                        NAME<｜tool▁sep｜>ARGS
//   kimi-k2              <think>..</think>; <|tool_calls_section_begin|>, each call
//                        <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
//                        ARGS<|tool_call_end|>, <|tool_calls_section_end|>
//   harmony              messages: a header up to <|message|>, a body up to <|end|>,
//                        <|return|> or <|call|>; the analysis channel is reasoning, the
//                        final and commentary channels text, a header with
//                        to=functions.NAME a call whose body is ARGS
//   k3-xtml              the think element is reasoning, the response element text, a call
//                        element <|open|>call tool="NAME" index="N"<|sep|>..<|close|>call<|sep|>
//                        a call whose argument elements (key, type: a string's value raw,
//                        others JSON) or json element (the arguments' text) are its
//                        arguments, the rest (the message's own tags) hidden
//   demo                 with a tool plan, the generic format (one JSON object,
//                        engine/tokenizer/chat_generic.h) read by GenericReply
//                        (serve/generic_reply.h): the response's text, the calls;
//                        otherwise as below
//   other (none)         every token but the specials is text
//
// Newlines that join a segment to markup are the markup's (as the templates
// strip them when they render a past reply): the leading ones of reasoning
// and of text after a marker, the trailing ones before a marker.
//
// A call is held back until its end marker, then checked: a name of
// [A-Za-z0-9_.:-] (at most 128), arguments a JSON object. A good one gives
// kToolCallStart, one kToolCallArgs (the arguments' JSON text) and
// kToolCallEnd together; a malformed one (bad JSON, no name, or still open
// when the reply ends) is shown as text, markup and all, as vLLM's and
// llama.cpp's servers return it. Calls held to their tools by a constraint
// (ReplyOptions::tool_plan, written as ToolCallPlan::Head and Tail spell
// them) are valid by construction and streamed instead: kToolCallStart once
// the name is read, the arguments in pieces as they arrive (their white
// space at either end dropped; glm-4.5's, qwen3.5's and K3's key/value pairs written
// as compact JSON text by KeyValueReader, serve/tool_arguments.h), and
// kToolCallEnd at the end marker, or when the reply ends inside the call
// (max_tokens: the arguments stop where the reply did, less a tail that may
// begin the call's or a value's close; cut_in_call). Stop strings are
// looked for in the text and in the reasoning (each apart), not in calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/format/chat.h"
#include "engine/model/stop.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/openai.h"
#include "serve/tool_constraint.h"

namespace waste::serve {

class GenericReply;
class KeyValueReader;

struct ReplyEvent {
  enum class Kind {
    kText,           // text: a piece of the answer
    kReasoning,      // text: a piece of the model's thinking
    kToolCallStart,  // a call begins: tool_index, name (whole), id (made here)
    kToolCallArgs,   // text: a piece of the call's arguments (JSON text)
    kToolCallEnd,    // the call's arguments are complete
  };
  Kind kind = Kind::kText;
  std::string text;
  int tool_index = -1;  // the call's place in the reply: 0, 1, ...
  std::string name;     // kToolCallStart: the function's name
  std::string id;       // kToolCallStart: "call_..." (unique in the server's life)
  bool operator==(const ReplyEvent&) const = default;
};

struct ReplyOptions {
  std::vector<int32_t> end_of_turn;  // ids that end the reply (EndOfTurnIds); none: never
  std::vector<std::string> stops;    // the request's stop strings
  // The generation prompt left a think block open, so the reply's first
  // tokens are reasoning (DeepSeek-R1's and V3.1's <think>, Qwen3-Thinking's,
  // K3's think element). None: as the format's own generation prompt
  // (chat.open) leaves it, ThinkingOpen.
  std::optional<bool> thinking_open{};
  // The plan whose ToolCallConstraint holds the calls (serve/tool_constraint.h):
  // their arguments are streamed as they arrive (above); the key/value
  // families' markup and raw values are known by it. None: no constraint.
  std::shared_ptr<const ToolCallPlan> tool_plan{};
};

// Whether `open` (a generation prompt of `chat`'s family) ends inside a think
// block: its last <think> after its last </think> (K3: it ends with the
// think element's open tag).
bool ThinkingOpen(const ChatFormat& chat, std::string_view open);

// The markup that ends a reply's reasoning and begins its answer in
// `chat`'s family (</think>; harmony's analysis message ended and its final
// one begun; K3's think element closed and its response opened); empty for
// a family without reasoning.
std::string ThinkClose(const ChatFormat& chat);

// "call_" and 24 random letters and digits.
std::string NewToolCallId();

// Feed every generated token in order, then Flush once at the end.
// `tok` and `chat` must outlive it.
class ReplyParser {
 public:
  ReplyParser(const Tokenizer& tok, const ChatFormat& chat, ReplyOptions o);
  ~ReplyParser();
  std::vector<ReplyEvent> Feed(int32_t id);
  std::vector<ReplyEvent> Flush();
  // An end-of-turn id or a stop string ended the reply.
  bool done() const { return done_; }
  // The stop string that ended the reply (Anthropic's stop_sequence); empty when none did.
  const std::string& stop_sequence() const {
    return stop_text_.stopped() ? stop_text_.matched() : stop_reasoning_.matched();
  }

  // The reply ended inside a call (max_tokens cut it): a streamed call is
  // listed as far as it was written (its arguments unfinished JSON), a call
  // held whole is shown as text.
  bool cut_in_call() const { return cut_in_call_; }

  // Where the reply is: what its bytes go to until the next marker.
  enum class Mode {
    kText,
    kReasoning,
    kSection,  // between the calls of a tool-calls section (dropped)
    kCall,     // a call's markup, held until its end
    kHeader,   // harmony's message header, XTML's open tag: read at its end
    kHidden,   // shown nowhere (between harmony's messages, XTML's other elements)
  };
  enum class Act { kNone, kCallBegin, kCallEnd, kHeaderEnd };
  struct Rule {
    std::string marker;
    Mode next;
    Act act = Act::kNone;
  };
  // Where the reply is now.
  Mode mode() const { return mode_; }

 private:
  void Bytes(std::string_view b);
  void Scan();
  void ToSink(std::string_view s);
  void Marker(const Rule& r);
  void Show(ReplyEvent::Kind kind, std::string_view s);
  void Emit(ReplyEvent::Kind kind, std::string_view piece);
  void Append(ReplyEvent::Kind kind, std::string text);
  void EndSegment();
  void EndCall(std::string_view end);
  // Streamed calls: the call's start once its name is read, its arguments so far.
  void StreamCall();
  void StreamPairs();               // glm-4.5's, qwen3.5's and K3's (KeyValueReader)
  void PushArgs(std::string text);  // a piece of the open call's arguments, if any
  void Finish();
  // The generic format's reader's events (`end`: the reply ended).
  void Generic(std::string_view bytes, bool end);
  std::vector<ReplyEvent> Take();

  const Tokenizer& tok_;
  const ChatFormat& chat_;
  std::vector<int32_t> end_;
  std::vector<std::vector<Rule>> rules_;  // by Mode
  std::vector<int32_t> markup_ids_;       // specials whose text the syntax reads
  bool strip_markup_newlines_ = false;

  Mode mode_ = Mode::kText;
  std::string partial_;    // bytes of an unfinished UTF-8 character
  std::string scan_;       // bytes not yet past the markers' reach
  std::string header_;     // the header being read
  std::string call_;       // the call being read, its opening marker first
  std::string call_name_;  // harmony, K3: the call's name from its header
  size_t call_begin_ = 0;  // call_'s bytes before its body
  int calls_ = 0;
  bool calls_constrained_ = false;
  std::shared_ptr<const ToolCallPlan> tool_plan_;
  size_t args_at_ = 0;  // streamed call: where in call_ the arguments not yet sent begin; 0: unread
  bool args_sent_ = false;                 // streamed call: some of its arguments were sent
  std::unique_ptr<GenericReply> generic_;  // the generic format's reader, when it is in force
  std::unique_ptr<KeyValueReader> pairs_;  // streamed glm-4.5, K3 call: its pairs' reader
  bool cut_in_call_ = false;

  // The segment of text or reasoning being shown.
  ReplyEvent::Kind shown_kind_ = ReplyEvent::Kind::kText;
  bool segment_start_ = true;  // no byte of it shown yet
  bool after_markup_ = false;  // it follows a marker (its leading newlines are the markup's)
  std::string newlines_;       // trailing newlines held
  StopMatcher stop_text_, stop_reasoning_;

  std::vector<ReplyEvent> out_;
  bool done_ = false;
};

}  // namespace waste::serve
