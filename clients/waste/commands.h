// The subcommands of `waste`, each registered on the CLI11 app and run by main.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace waste::cli {

// Each Add* registers a subcommand; its callback runs it and sets the exit code.
void AddInfo(CLI::App& app, int* exit_code);
void AddPlan(CLI::App& app, int* exit_code);
void AddSynth(CLI::App& app, int* exit_code);
void AddRun(CLI::App& app, int* exit_code);
void AddEval(CLI::App& app, int* exit_code);
void AddTokenize(CLI::App& app, int* exit_code);  // tokenize and detokenize
void AddBench(CLI::App& app, int* exit_code);
void AddChat(CLI::App& app, int* exit_code);
void AddReplay(CLI::App& app, int* exit_code);   // a routing trace against wasted's cache
void AddConvert(CLI::App& app, int* exit_code);  // convert (a Hugging Face checkpoint) and verify
void AddServe(CLI::App& app, int* exit_code);    // the OpenAI-compatible HTTP server

// waste info on a GGUF file (gguf_info.cc); the exit code.
// `chat_format`, when not empty, is the user's --chat-format.
int RunGgufInfo(const std::string& path, bool as_json, const std::string& chat_format);

}  // namespace waste::cli
