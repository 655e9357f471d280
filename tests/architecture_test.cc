// The module rules of docs/architecture.md, checked on the build itself: every folder of src/ is a
// module with a rule below, a paragraph in docs/architecture.md and a row in the README's layout;
// each module (a folder of src/ and its library) may use only the modules listed for it below, in
// what it links (the module graph CMake writes at configure time, build/module_graph.txt, followed
// transitively) and in what its sources include. Above all, the clients — client, exporter,
// healthcheck, cli — never reach the engine side (backend, sampling, health, inject, engine,
// server).
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/paths.h"

namespace vigil::testing {
namespace {

using Modules = std::set<std::string>;

// Each module and every module it may use (directly or through another): the arrows of
// docs/architecture.md, one way.
const std::map<std::string, Modules>& Allowed() {
  static const auto* const allowed = new std::map<std::string, Modules>{
      {"common", {}},
      {"fields", {"common"}},
      {"backend", {"common", "fields"}},
      {"kmsg", {"common", "fields", "backend"}},
      {"network", {"common", "fields", "backend", "sampling", "health"}},
      {"nvswitch", {"common", "fields", "backend", "kmsg", "sampling", "health"}},
      {"sampling", {"common", "fields"}},
      {"health", {"common", "fields", "backend", "sampling"}},
      {"inject", {"common", "fields", "sampling"}},
      {"engine", {"common", "fields", "backend", "sampling", "health", "inject"}},
      {"api", {"common", "fields"}},
      {"recorder",
       {"common", "fields", "backend", "sampling", "health", "inject", "engine", "api"}},
      {"tls", {"common"}},
      {"webconfig", {"common", "tls"}},
      {"procmetrics", {"common"}},
      {"pidmap", {"common"}},
      {"server",
       {"common", "fields", "backend", "sampling", "health", "inject", "engine", "api", "tls"}},
      {"client", {"common", "fields", "api", "tls"}},
      {"exporter",
       {"common", "fields", "api", "client", "tls", "podresources", "kube", "dra", "procmetrics",
        "pidmap"}},
      {"podresources", {"common"}},
      {"kube", {"common"}},
      {"dra", {"common", "fields", "api", "kube"}},
      {"report", {"common", "fields", "api"}},
      {"healthcheck",
       {"common", "fields", "api", "client", "tls", "kube", "podresources", "dra", "procmetrics"}},
      {"drill", {"common", "fields", "api", "client", "tls", "kube"}},
      {"remediator", {"common", "fields", "api", "kube", "dra", "procmetrics"}},
      {"cli",
       {"common", "fields", "api", "client", "tls", "webconfig", "exporter", "podresources",
        "healthcheck", "kube", "dra", "drill", "remediator", "report", "procmetrics", "pidmap"}},
      {"app", {"common",    "fields",      "backend",      "kmsg",     "network",     "nvswitch",
               "sampling",  "health",      "inject",       "engine",   "api",         "server",
               "client",    "kube",        "podresources", "exporter", "healthcheck", "remediator",
               "drill",     "cli",         "recorder",     "report",   "dra",         "tls",
               "webconfig", "procmetrics", "pidmap"}},
      {"testing", {"common"}},
  };
  return *allowed;
}

const Modules kEngineSide = {"backend", "kmsg",   "network", "nvswitch", "sampling",
                             "health",  "inject", "engine",  "recorder", "server"};
const Modules kClients = {"client",    "kube",        "podresources", "exporter", "healthcheck",
                          "webconfig", "remediator",  "drill",        "report",   "cli",
                          "dra",       "procmetrics", "pidmap"};

std::string Join(const Modules& modules) {
  std::string out;
  for (const std::string& module : modules) out += (out.empty() ? "" : ", ") + module;
  return out;
}

// module -> the modules it links directly, from the build's module_graph.txt ("vigil_x: vigil_y").
std::map<std::string, Modules> ReadLinkGraph() {
  std::ifstream in(VIGIL_MODULE_GRAPH);
  EXPECT_TRUE(in) << "cannot read " << VIGIL_MODULE_GRAPH << ": configure the build first";
  std::map<std::string, Modules> graph;
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || !line.starts_with("vigil_")) continue;
    Modules& deps = graph[line.substr(6, colon - 6)];
    std::istringstream words(line.substr(colon + 1));
    for (std::string dep; words >> dep;) {
      if (dep.starts_with("vigil_") && dep != "vigil_proto") deps.insert(dep.substr(6));
    }
  }
  return graph;
}

Modules Closure(const std::map<std::string, Modules>& graph, const std::string& module) {
  Modules seen;
  std::vector<std::string> todo = {module};
  while (!todo.empty()) {
    const std::string next = todo.back();
    todo.pop_back();
    auto it = graph.find(next);
    if (it == graph.end()) continue;
    for (const std::string& dep : it->second) {
      if (seen.insert(dep).second) todo.push_back(dep);
    }
  }
  return seen;
}

// Every module of a folder src/X/ that one of its files includes ("X/y.h"), by file.
std::map<std::string, Modules> IncludesOf(const std::string& module) {
  static const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  std::map<std::string, Modules> used;
  const std::filesystem::path dir = std::filesystem::path(SourceDir()) / "src" / module;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".h") && !name.ends_with(".cc")) continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch match;
    while (std::getline(in, line)) {
      if (std::regex_search(line, match, include) && Allowed().contains(match[1].str())) {
        used[name].insert(match[1].str());
      }
    }
  }
  return used;
}

TEST(ArchitectureTest, EveryModuleHasItsFolderAndLibrary) {
  const auto graph = ReadLinkGraph();
  for (const auto& [module, allowed] : Allowed()) {
    EXPECT_TRUE(std::filesystem::is_directory(std::filesystem::path(SourceDir()) / "src" / module))
        << "src/" << module;
    if (module != "testing") {
      EXPECT_TRUE(graph.contains(module)) << "vigil_" << module;
    }
  }
  for (const auto& [module, deps] : graph) {
    EXPECT_TRUE(Allowed().contains(module))
        << "vigil_" << module << " is not in the module table: add it to docs/architecture.md "
        << "and this test";
  }
}

// The folders of src/ are the modules: a new folder without a rule here would have its includes
// and links unchecked, and one undocumented would be a module nobody can find.
TEST(ArchitectureTest, EveryFolderOfSrcHasARuleASectionAndALayoutRow) {
  const std::filesystem::path root(SourceDir());
  const auto read = [&](const std::string& file) {
    std::ifstream in(root / file);
    EXPECT_TRUE(in) << file;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string architecture = read("docs/architecture.md");
  const std::string readme = read("README.md");
  int folders = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root / "src")) {
    if (!entry.is_directory()) continue;
    const std::string module = entry.path().filename().string();
    ++folders;
    EXPECT_TRUE(Allowed().contains(module))
        << "src/" << module << "/ has no rule: add it to Allowed() in tests/architecture_test.cc "
        << "with the modules it may use, and to docs/architecture.md";
    // (A find, not a matcher: the failure is the one line, not the whole page.)
    EXPECT_NE(architecture.find("\n**" + module + "** — "), std::string::npos)
        << "docs/architecture.md has no paragraph for src/" << module << "/ (\"**" << module
        << "** — its role, what it may use, its threads\")";
    EXPECT_NE(readme.find("| `src/" + module + "/` |"), std::string::npos)
        << "the README's layout has no row for src/" << module << "/";
  }
  EXPECT_EQ(folders, static_cast<int>(Allowed().size()))
      << "folders of src/ and rules in Allowed() differ in number";
}

TEST(ArchitectureTest, LibrariesLinkOnlyWhatTheyMayUse) {
  const auto graph = ReadLinkGraph();
  for (const auto& [module, deps] : graph) {
    auto allowed = Allowed().find(module);
    if (allowed == Allowed().end()) continue;  // reported above
    Modules wrong;
    for (const std::string& dep : Closure(graph, module)) {
      if (!allowed->second.contains(dep)) wrong.insert(dep);
    }
    EXPECT_THAT(wrong, ::testing::IsEmpty())
        << "vigil_" << module << " links (directly or through another library) " << Join(wrong)
        << "; it may use only: " << Join(allowed->second);
  }
}

TEST(ArchitectureTest, ClientsNeverLinkTheEngineSide) {
  const auto graph = ReadLinkGraph();
  for (const std::string& client : kClients) {
    ASSERT_TRUE(graph.contains(client)) << client;
    Modules reached;
    for (const std::string& dep : Closure(graph, client)) {
      if (kEngineSide.contains(dep)) reached.insert(dep);
    }
    EXPECT_THAT(reached, ::testing::IsEmpty())
        << "the client library vigil_" << client << " links the engine side: " << Join(reached);
  }
}

TEST(ArchitectureTest, SourcesIncludeOnlyWhatTheirModuleMayUse) {
  for (const auto& [module, allowed] : Allowed()) {
    for (const auto& [file, used] : IncludesOf(module)) {
      for (const std::string& dep : used) {
        if (dep == module || (dep == "testing" && file.ends_with("_test.cc"))) continue;
        EXPECT_TRUE(allowed.contains(dep))
            << "src/" << module << "/" << file << " includes " << dep << "/: module " << module
            << " may use only: " << Join(allowed);
      }
    }
  }
}

// The code of a source file with its comments and the contents of its string and character
// literals blanked (raw strings too), line breaks kept: what brace counting may look at.
std::string CodeOnly(const std::string& text) {
  std::string out = text;
  size_t i = 0;
  const auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k) {
      if (out[k] != '\n') out[k] = ' ';
    }
  };
  while (i < text.size()) {
    if (text.compare(i, 2, "//") == 0) {
      const size_t end = text.find('\n', i);
      blank(i, end == std::string::npos ? text.size() : end);
      i = end == std::string::npos ? text.size() : end;
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      blank(i, end == std::string::npos ? text.size() : end + 2);
      i = end == std::string::npos ? text.size() : end + 2;
    } else if (text.compare(i, 2, "R\"") == 0 &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])))) {
      const size_t open = text.find('(', i + 2);
      const std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
      const size_t end = text.find(close, open);
      blank(i + 1, end == std::string::npos ? text.size() : end + close.size());
      i = end == std::string::npos ? text.size() : end + close.size();
    } else if (text[i] == '"' ||
               (text[i] == '\'' &&
                (i == 0 || !std::isxdigit(static_cast<unsigned char>(text[i - 1]))))) {
      // A string or character literal (a ' after a digit is a digit separator: 1'000).
      const char quote = text[i];
      size_t k = i + 1;
      while (k < text.size() && text[k] != quote && text[k] != '\n') k += text[k] == '\\' ? 2 : 1;
      blank(i + 1, k);
      i = k + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// House rule: no function in src/ (tests included) is longer than 120 lines — but these
// table-like switches, one case per field, each a call into the source the field comes from.
TEST(ArchitectureTest, NoFunctionIsLongerThan120Lines) {
  const std::set<std::string> tables = {"src/backend/sim_gpu.cc SimGpu::Read",
                                        "src/backend/nvml_backend.cc Direct"};
  const std::filesystem::path root(SourceDir());
  const std::regex control(R"(^\s*(\}\s*)?(if|for|while|switch|else|do|catch|try)\b)");
  const std::regex type(R"(^\s*(namespace|class|struct|enum|union|extern)\b)");
  const std::regex name(R"(([A-Za-z_][A-Za-z0-9_:~]*)\s*\()");
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "src")) {
    const std::string path = entry.path().string();
    if (!path.ends_with(".cc") && !path.ends_with(".h")) continue;
    std::ifstream in(entry.path());
    const std::string code =
        CodeOnly(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    const std::string file = std::filesystem::relative(entry.path(), root).string();
    struct Open {
      int line;
      bool function;
      std::string name;
    };
    std::vector<Open> open;
    std::string head;  // the text since the last ; { or }: what a brace opens
    int line = 1;
    for (char c : code) {
      if (c == '\n') ++line;
      if (c == '{') {
        std::smatch called;
        const size_t last = head.find_last_not_of(" \t\n");
        const bool function = (head.find(')') != std::string::npos ||
                               (last != std::string::npos && head[last] == ']')) &&
                              !std::regex_search(head, control) && !std::regex_search(head, type);
        const bool named = function && std::regex_search(head, called, name);
        open.push_back({line, function, named ? called[1].str() : ""});
        head.clear();
      } else if (c == '}') {
        if (!open.empty()) {
          const Open block = open.back();
          open.pop_back();
          const int length = line - block.line + 1;
          EXPECT_FALSE(block.function && length > 120 && !tables.contains(file + " " + block.name))
              << file << ":" << block.line << ": " << (block.name.empty() ? "a lambda" : block.name)
              << " is " << length << " lines long; split it along its steps (at most 120)";
        }
        head.clear();
      } else if (c == ';') {
        head.clear();
      } else {
        head.push_back(c);
      }
    }
  }
}

// The lock order is stated once, where the compiler can see it: ABSL_ACQUIRED_BEFORE on the
// mutexes in the headers. docs/architecture.md names each of those pairs as
// "`Class::outer` → `Class::inner`", so the page cannot drift from the code.
TEST(ArchitectureTest, TheDocsStateEveryLockOrderTheHeadersAnnotate) {
  const std::filesystem::path root(SourceDir());
  std::ifstream doc_in(root / "docs/architecture.md");
  const std::string doc((std::istreambuf_iterator<char>(doc_in)), std::istreambuf_iterator<char>());
  const std::regex annotated(R"((\w+)\s+ABSL_ACQUIRED_BEFORE\(([^)]*)\))");
  const std::regex class_name(R"((?:class|struct)\s+(\w+)[^;{]*\{)");
  int pairs = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "src")) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string code = CodeOnly(text);  // the same offsets, comments blanked
    for (auto it = std::sregex_iterator(text.begin(), text.end(), annotated);
         it != std::sregex_iterator(); ++it) {
      // The class: the innermost one whose braces hold the annotation.
      const size_t at = static_cast<size_t>(it->position());
      std::string owner;
      for (auto c = std::sregex_iterator(code.begin(), code.end(), class_name);
           c != std::sregex_iterator(); ++c) {
        const size_t open = static_cast<size_t>(c->position() + c->length()) - 1;
        if (open > at) break;
        int depth = 0;
        size_t close = open;
        for (; close < code.size(); ++close) {
          depth += code[close] == '{' ? 1 : code[close] == '}' ? -1 : 0;
          if (depth == 0) break;
        }
        if (close > at) owner = (*c)[1];
      }
      std::stringstream inners((*it)[2].str());
      for (std::string inner; std::getline(inners, inner, ',');) {
        inner.erase(0, inner.find_first_not_of(' '));
        const std::string stated =
            "`" + owner + "::" + (*it)[1].str() + "` → `" + owner + "::" + inner + "`";
        ++pairs;
        EXPECT_NE(doc.find(stated), std::string::npos)
            << entry.path().filename().string() << " annotates " << (*it)[0]
            << ": docs/architecture.md's lock order must say " << stated;
      }
    }
  }
  EXPECT_GT(pairs, 0) << "no ABSL_ACQUIRED_BEFORE found: the test reads nothing";
}

}  // namespace
}  // namespace vigil::testing
