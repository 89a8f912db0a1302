// waste: the compute client. Inspect a container (info, plan), write
// synthetic ones (synth), and run the model in this process (run, eval,
// chat, bench, tokenize, detokenize), replay a routing trace against
// wasted's cache (replay), convert a Hugging Face checkpoint (convert), and
// serve OpenAI's HTTP API (serve).
#include <cstdio>

#include "clients/waste/commands.h"
#include "waste/version.h"

int main(int argc, char** argv) {
  CLI::App app{"waste: run mixture-of-experts models larger than RAM"};
  app.set_version_flag("--version", "waste " WASTE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  waste::cli::AddInfo(app, &exit_code);
  waste::cli::AddPlan(app, &exit_code);
  waste::cli::AddSynth(app, &exit_code);
  waste::cli::AddRun(app, &exit_code);
  waste::cli::AddEval(app, &exit_code);
  waste::cli::AddTokenize(app, &exit_code);
  waste::cli::AddBench(app, &exit_code);
  waste::cli::AddChat(app, &exit_code);
  waste::cli::AddReplay(app, &exit_code);
  waste::cli::AddConvert(app, &exit_code);
  waste::cli::AddServe(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
