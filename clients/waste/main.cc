// waste: the compute client. So far: inspect a container (info, plan) and
// write synthetic ones (synth). run, eval, chat and bench arrive with the
// engine (issue 3).
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
