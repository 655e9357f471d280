// The app module, the composition root: the `vigil` command line, one binary with several roles
// (SPEC "One binary, several roles"). The only module that sees both the engine side (engine,
// server) and the clients, because `vigil node` runs them in one process.
#pragma once

namespace vigil::cli {

// Parses argv, runs the chosen command and returns the process exit code.
int Main(int argc, char** argv);

}  // namespace vigil::cli
