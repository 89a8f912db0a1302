#include "clients/waste/engine_flags.h"

#include "engine/tokenizer/gguf_tokenizer.h"
#include "protocol/socket_path.h"

namespace waste::cli {

void AddEngineFlags(CLI::App* cmd, EngineOptions* o) {
  cmd->add_option("--budget", o->budget,
                  "Memory for trunk, state and expert cache (default: this machine's)");
  cmd->add_option("--threads", o->threads, "Compute threads (default: every usable CPU)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--ctx", o->context, "Context length")
      ->check(CLI::Range(1, 1 << 22))
      ->capture_default_str();
  cmd->add_option("--chunk", o->chunk,
                  "Prefill tokens per chunk (0: planned, 32 when every expert fits in the "
                  "cache, else up to 2048 as memory allows)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--readers", o->readers, "Expert reads in flight")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--lookahead", o->lookahead,
                  "Experts per token hinted for the next MoE layer by running its router "
                  "early (0: off)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--experts-per-token", o->experts_per_token,
                  "Route this many experts per token instead of the model's top_k (1 to "
                  "top_k; fewer is faster and less exact: docs/MEASUREMENTS.md)");
  cmd->add_flag("--verify", o->verify, "Check the crc32 of every expert record read");
  cmd->add_option("--isa", o->isa,
                  "Kernel instruction set: scalar, avx2, avx512, amx (AVX-512 with AMX-INT8 "
                  "tiles for the 4-bit products; default: the best)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512", "amx"}));
  cmd->add_option("--expert-table", o->expert_table,
                  "Routed experts' lookup table: f32 (exact) or i8 (an int8 copy, faster, "
                  "not exact: docs/MEASUREMENTS.md)")
      ->check(CLI::IsMember({"f32", "i8"}))
      ->capture_default_str();
  cmd->add_option("--q4-input", o->q4_input,
                  "Inputs of the 4-bit products (Q4G trunk, Q4GR experts) on AVX2 and AVX-512: "
                  "exact or i8 (8 bits per 32 columns, faster, not exact: "
                  "docs/MEASUREMENTS.md; the scalar path is exact either way)")
      ->check(CLI::IsMember({"exact", "i8"}))
      ->capture_default_str();
  o->socket = ClientDaemonSocket();
  cmd->add_option("--socket", o->socket, "wasted's socket")->capture_default_str();
  cmd->add_flag("--local", o->local, "Run in this process even when a wasted is listening");
  cmd->add_flag("--spawn", o->spawn,
                "Start a wasted when none is listening (it exits after 5 idle minutes)");
}

void AddChatFormatFlag(CLI::App* cmd, EngineOptions* o) {
  cmd->add_option("--chat-format", o->chat_format,
                  "Lay out conversations in this family's format instead of the model's own "
                  "(one of " +
                      GgufChatFamilies() + ")");
}

void AddReattachFlag(CLI::App* cmd, EngineOptions* o) {
  cmd->add_option("--reattach-wait", o->reattach_wait,
                  "Seconds to wait for wasted to come back when it goes away in the middle "
                  "(0: stop at once)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
}

}  // namespace waste::cli
