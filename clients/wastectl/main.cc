// wastectl: inspect and steer a running wasted over its socket. It speaks the
// protocol only and links no engine. Its commands (status, clients, warm,
// drop, stop) arrive with the daemon (issues 4 and 7).
#include <CLI/CLI.hpp>

#include "waste/version.h"
#include "wasted.capnp.h"

int main(int argc, char** argv) {
  CLI::App app{"wastectl: inspect and control a running wasted"};
  app.set_version_flag("--version", "wastectl " WASTE_VERSION " (protocol " +
                                        std::to_string(waste::proto::PROTOCOL_VERSION) + ")");
  app.footer(
      "Commands for a running daemon (status, clients, warm, drop, stop) are not built yet.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::fprintf(stderr, "wastectl: no command given (see --help)\n");
  return 2;
}
