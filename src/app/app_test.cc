// Tests of the `vigil` command line as CLI11 parses it: every option of every command that takes
// a value reads `--name=` as empty — never the next argument — and `--name=V`, `--name V` and
// `--name ''` as written.
#include "app/app.h"

#include <algorithm>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::cli {
namespace {

using ::testing::ElementsAre;

// Parses `args` (without the program name) as `vigil` does; the parse error, or "" when none
// (--help's CallForHelp counts as none: the options before it were read).
std::string Parse(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed = EmptyValuesMadeExplicit(app, args);
  std::reverse(reversed.begin(), reversed.end());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return "";
  } catch (const CLI::ParseError& error) {
    return error.what();
  }
  return "";
}

// Every (sub)command of `app` with the words that choose it ("inject", "xid").
void ForEachCommand(CLI::App* app, std::vector<std::string> path,
                    const std::function<void(const std::vector<std::string>&, CLI::App*)>& visit) {
  if (!path.empty()) visit(path, app);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    std::vector<std::string> deeper = path;
    deeper.push_back(sub->get_name());
    ForEachCommand(sub, deeper, visit);
  }
}

// The long names of the options of `command` that take a value (not flags, not positionals).
std::vector<std::string> ValueOptions(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_items_expected_max() == 0 || option->get_lnames().empty()) continue;
    names.push_back("--" + option->get_lnames().front());
  }
  return names;
}

TEST(AppTest, AnEmptyValueAfterTheEqualsSignIsEmptyOnEveryCommandsOptions) {
  CLI::App tree("vigil", "vigil");
  const auto tree_runners = AddCommands(&tree);
  int checked = 0;
  ForEachCommand(&tree, {}, [&](const std::vector<std::string>& path, CLI::App* command) {
    for (const std::string& name : ValueOptions(*command)) {
      // Each form, with the next argument one CLI11 would otherwise take as the value.
      const std::vector<std::pair<std::vector<std::string>, std::string>> forms = {
          {{name + "="}, ""}, {{name, ""}, ""}, {{name + "=v1"}, "v1"}, {{name, "v1"}, "v1"}};
      for (const auto& [words, value] : forms) {
        CLI::App app("vigil", "vigil");
        const auto runners = AddCommands(&app);  // they own the flags the options write to
        std::vector<std::string> args = path;
        args.insert(args.end(), words.begin(), words.end());
        args.push_back("--help");
        (void)Parse(app, args);  // a validator may refuse the value: that is not the point
        CLI::App* chosen = &app;
        for (const std::string& word : path) chosen = chosen->get_subcommand(word);
        const CLI::Option* option = chosen->get_option(name);
        EXPECT_THAT(option->results(), ElementsAre(value))
            << "vigil " << ::testing::PrintToString(args);
      }
      ++checked;
    }
  });
  EXPECT_GT(checked, 100) << "every command's options";
}

TEST(AppTest, TheEnginesEmptyKmsgLeavesTheNodeNameItsOwn) {
  CLI::App app("vigil", "vigil");
  const auto runners = AddCommands(&app);
  ASSERT_EQ(Parse(app, {"engine", "--kmsg=", "--node-name", "n1"}), "");
  CLI::App* engine = app.get_subcommand("engine");
  EXPECT_EQ(engine->get_option("--kmsg")->as<std::string>(), "");
  EXPECT_EQ(engine->get_option("--node-name")->as<std::string>(), "n1");
}

TEST(AppTest, OnlyAValueOptionsEmptyEqualsIsRewritten) {
  CLI::App app("vigil", "vigil");
  const auto runners = AddCommands(&app);
  // A flag keeps CLI11's reading; after `--` nothing is an option; an unknown option is left to
  // the parser's error.
  EXPECT_THAT(EmptyValuesMadeExplicit(app, {"healthcheck", "--taint=", "--kubernetes"}),
              ElementsAre("healthcheck", "--taint=", "--kubernetes"));
  EXPECT_THAT(EmptyValuesMadeExplicit(app, {"engine", "--kmsg=", "--", "--kmsg="}),
              ElementsAre("engine", "--kmsg", "", "--", "--kmsg="));
  EXPECT_THAT(EmptyValuesMadeExplicit(app, {"engine", "--no-such=", "x"}),
              ElementsAre("engine", "--no-such=", "x"));
  EXPECT_THAT(EmptyValuesMadeExplicit(app, {"inject", "xid", "--engine=", "--gpu", "0"}),
              ElementsAre("inject", "xid", "--engine", "", "--gpu", "0"));
}

}  // namespace
}  // namespace vigil::cli
