// The `vigil` command line: one binary, several roles (SPEC "One binary, several roles").
#pragma once

namespace vigil::cli {

// Parses argv, runs the chosen command and returns the process exit code.
int Main(int argc, char** argv);

}  // namespace vigil::cli
