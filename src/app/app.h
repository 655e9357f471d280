// The app module, the composition root: the `vigil` command line, one binary with several roles
// (SPEC "One binary, several roles"). The only module that sees both the engine side (engine,
// server) and the clients, because `vigil node` runs them in one process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/commands.h"

namespace vigil::cli {

// Parses argv, runs the chosen command and returns the process exit code.
int Main(int argc, char** argv);

// Adds every command to `app` (the `vigil` tree); the runners, by command name, run the one the
// parse chose. The runners own the flags the options write to: keep them while `app` parses.
[[nodiscard]] std::vector<std::pair<std::string, CommandRunner>> AddCommands(CLI::App* app);

// argv (without the program name) as `app` should parse it: `--name=` with nothing after the `=`
// becomes `--name` and an empty argument, for every option of the command it is given to that
// takes a value — so it means "empty", as manifests write it (`--kmsg=` turns the kernel log
// off), instead of CLI11's reading, which takes the next argument as the value. Arguments after
// `--`, and flags (which take no value), are left as they are.
std::vector<std::string> EmptyValuesMadeExplicit(const CLI::App& app,
                                                 const std::vector<std::string>& args);

}  // namespace vigil::cli
