// The flags every compute command shares, filling in the engine's options
// (runtime/engine.h opens the engine from them).
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/engine.h"

namespace waste::cli {

// Adds --budget, --threads, --ctx, --chunk, --readers, --lookahead,
// --experts-per-token, --verify, --isa, --expert-table, --q4-input,
// --socket (its default: ClientDaemonSocket()), --local, --spawn.
void AddEngineFlags(CLI::App* cmd, EngineOptions* o);
// Adds --chat-format, for the commands that chat (chat, serve).
void AddChatFormatFlag(CLI::App* cmd, EngineOptions* o);
// Adds --reattach-wait, for the commands that go through ForwardThroughRestarts.
void AddReattachFlag(CLI::App* cmd, EngineOptions* o);

// What --help says of a client outliving its daemon (run, chat and serve).
inline constexpr const char* kReattachHelp =
    "When wasted restarts in the middle (an upgrade, systemctl restart, a crash), the "
    "conversation, which lives in this process, is kept: the command waits up to "
    "--reattach-wait seconds for a wasted serving the same container on the same socket, "
    "attaches to it and goes on where it was, with the logits it would have had. Another "
    "container there, or none in time, stops it with a message; what it printed stays.";

}  // namespace waste::cli
