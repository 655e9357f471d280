// `vigil inject field|xid|scenario|list|clear`: fault injection into the engine every client
// reads, so that one injection exercises the whole alerting chain. The engine authorises and
// audits; this side validates what it can before sending (field names, value syntax, files).
#include <iostream>

#include "api/convert.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil::cli {
namespace {

struct InjectFlags {
  ClientFlags client;
  // field / xid
  int64_t gpu = -1;
  std::string nic_port;  // field: a NIC port's instead of a GPU's
  std::string field;
  std::string value;
  std::string add;
  std::string duration;
  int64_t xid = 0;
  int64_t gpu_instance = -1;   // xid: the MIG GPU instance
  bool allow_actions = false;  // field / xid: let the health check's taint follow
  // scenario
  std::string scenario_file;
  // clear
  std::string id;
  bool all = false;
};

std::string Who(const v1::Principal& principal) { return principal.description(); }

// "GPU 2" or "NIC port mlx5_3/1": what the injection is on.
std::string Target(const v1::Injection& injection) {
  return injection.nic_port().empty() ? fmt::format("GPU {}", injection.gpu())
                                      : "NIC port " + injection.nic_port();
}

std::string FieldOrXid(const v1::Injection& injection) {
  if (injection.mode() == v1::INJECTION_MODE_XID) return fmt::format("XID {}", injection.xid());
  if (!injection.nic_port().empty()) return injection.port_field();
  const FieldInfo* field = FindField(injection.field_id());
  return field != nullptr ? std::string(field->name) : std::to_string(injection.field_id());
}

std::string ValueText(const v1::Injection& injection) {
  if (injection.mode() == v1::INJECTION_MODE_XID) return "-";
  const std::string number = injection.value() == static_cast<int64_t>(injection.value())
                                 ? std::to_string(static_cast<int64_t>(injection.value()))
                                 : fmt::format("{}", injection.value());
  return injection.mode() == v1::INJECTION_MODE_ADD ? "+" + number : number;
}

nlohmann::json InjectionJson(const v1::Injection& injection) {
  return {{"id", injection.id()},
          {"gpu", injection.nic_port().empty() ? nlohmann::json(injection.gpu()) : nullptr},
          {"nic_port", injection.nic_port()},
          {"field_id", injection.field_id()},
          {"field", injection.mode() == v1::INJECTION_MODE_XID ? "" : FieldOrXid(injection)},
          {"xid", injection.xid()},
          {"mode", std::string(InjectionModeText(injection.mode()))},
          {"value", injection.value()},
          {"who", Who(injection.principal())},
          {"uid", injection.principal().uid()},
          {"start_time", FormatTimeUs(injection.start_time_us())},
          {"expire_time", FormatTimeUs(injection.expire_time_us())},
          {"scenario_id", injection.scenario_id()}};
}

nlohmann::json ScenarioJson(const v1::Scenario& scenario) {
  return {{"id", scenario.id()},
          {"name", scenario.name()},
          {"state", std::string(ScenarioStateText(scenario.state()))},
          {"steps", scenario.steps()},
          {"steps_done", scenario.steps_done()},
          {"who", Who(scenario.principal())},
          {"start_time", FormatTimeUs(scenario.start_time_us())},
          {"duration_us", scenario.duration_us()},
          {"error", scenario.error()}};
}

void PrintInjection(const ClientFlags& flags, const v1::Injection& injection) {
  if (flags.json) {
    std::cout << InjectionJson(injection).dump() << std::endl;
    return;
  }
  std::cout << fmt::format(
                   "{}: {} {} {}", injection.id(), Target(injection), FieldOrXid(injection),
                   injection.mode() == v1::INJECTION_MODE_XID
                       ? "raised"
                       : fmt::format(
                             "{} {} until {}",
                             injection.mode() == v1::INJECTION_MODE_ADD ? "raised by" : "set to",
                             ValueText(injection).substr(
                                 injection.mode() == v1::INJECTION_MODE_ADD ? 1 : 0),
                             FormatTimeUs(injection.expire_time_us())))
            << " (by " << Who(injection.principal()) << ")" << std::endl;
}

int RunField(const InjectFlags& flags) {
  if (flags.value.empty() == flags.add.empty()) {
    return Fail("inject field", "give exactly one of --value V and --add N");
  }
  if ((flags.gpu >= 0) == !flags.nic_port.empty()) {
    return Fail("inject field",
                "give exactly one of --gpu N (a GPU's field) and --port HCA/PORT (a NIC port's)");
  }
  v1::InjectFieldRequest request;
  if (!flags.nic_port.empty()) {
    // The port's fields are the engine's to check: it knows the ports and what each has.
    request.set_nic_port(flags.nic_port);
    request.set_port_field(flags.field);
  } else {
    auto field = ResolveField(flags.field);
    if (!field.ok()) return Fail("inject field", WithContext(field.status(), "--field"));
    request.set_gpu(static_cast<uint32_t>(flags.gpu));
    request.set_field_id((*field)->id);
  }
  request.set_allow_actions(flags.allow_actions);
  if (!flags.value.empty()) {
    char* end = nullptr;
    const double value = std::strtod(flags.value.c_str(), &end);
    if (end != flags.value.c_str() + flags.value.size() || !std::isfinite(value)) {
      return Fail("inject field", fmt::format("--value '{}' is not a number", flags.value));
    }
    request.set_value(value);
  } else {
    const std::optional<int64_t> add = ParseInt64(flags.add);
    if (!add || *add <= 0) {
      return Fail(
          "inject field",
          fmt::format("--add '{}' must be a positive integer: counters only grow", flags.add));
    }
    request.set_add(*add);
  }
  if (!flags.duration.empty()) {
    auto duration = ParseDuration(flags.duration);
    if (!duration.ok()) return Fail("inject field", WithContext(duration.status(), "--for"));
    if (*duration <= absl::ZeroDuration()) return Fail("inject field", "--for must be more than 0");
    request.set_duration_us(absl::ToInt64Microseconds(*duration));
  }
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("inject field", client.status());
  auto injection = (*client)->InjectField(request);
  if (!injection.ok()) return Fail("inject field", injection.status());
  PrintInjection(flags.client, *injection);
  return kExitOk;
}

int RunXid(const InjectFlags& flags) {
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("inject xid", client.status());
  v1::InjectXidRequest request;
  request.set_gpu(static_cast<uint32_t>(flags.gpu));
  request.set_xid(static_cast<uint32_t>(flags.xid));
  request.set_allow_actions(flags.allow_actions);
  if (flags.gpu_instance >= 0) request.set_gpu_instance(static_cast<uint32_t>(flags.gpu_instance));
  auto response = (*client)->InjectXid(request);
  if (!response.ok()) return Fail("inject xid", response.status());
  PrintInjection(flags.client, response->injection());
  return kExitOk;
}

int RunScenario(const InjectFlags& flags) {
  auto text = ReadFile(flags.scenario_file);
  if (!text.ok()) return Fail("inject scenario", text.status());
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("inject scenario", client.status());
  v1::RunScenarioRequest request;
  request.set_yaml(*text);
  request.set_source(flags.scenario_file);
  auto scenario = (*client)->RunScenario(request);
  if (!scenario.ok()) return Fail("inject scenario", scenario.status());
  if (flags.client.json) {
    std::cout << ScenarioJson(*scenario).dump() << std::endl;
  } else {
    std::cout << fmt::format(
                     "{}: scenario '{}' started: {} step(s) over {}, run by the engine (stop it "
                     "with `vigil inject clear {}`; watch it with `vigil events`)",
                     scenario->id(), scenario->name(), scenario->steps(),
                     absl::FormatDuration(absl::Microseconds(scenario->duration_us())),
                     scenario->id())
              << std::endl;
  }
  return kExitOk;
}

int RunList(const InjectFlags& flags) {
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("inject list", client.status());
  auto list = (*client)->ListInjections();
  if (!list.ok()) return Fail("inject list", list.status());
  if (flags.client.json) {
    nlohmann::json json = {{"injections", nlohmann::json::array()},
                           {"scenarios", nlohmann::json::array()}};
    for (const auto& injection : list->injections()) {
      json["injections"].push_back(InjectionJson(injection));
    }
    for (const auto& scenario : list->scenarios())
      json["scenarios"].push_back(ScenarioJson(scenario));
    std::cout << json.dump() << std::endl;
    return kExitOk;
  }
  if (list->injections_size() == 0) {
    std::cout << "No active injections.\n";
  } else {
    Table table({"ID", "GPU/PORT", "FIELD/XID", "VALUE", "WHO", "STARTED", "EXPIRES", "SCENARIO"});
    for (const auto& injection : list->injections()) {
      table.AddRow(
          {injection.id(),
           injection.nic_port().empty() ? std::to_string(injection.gpu()) : injection.nic_port(),
           FieldOrXid(injection), ValueText(injection), Who(injection.principal()),
           FormatTimeUs(injection.start_time_us()), FormatTimeUs(injection.expire_time_us()),
           injection.scenario_id()});
    }
    table.Print(std::cout);
  }
  if (list->scenarios_size() > 0) {
    std::cout << '\n';
    Table table({"SCENARIO", "NAME", "STATE", "STEPS", "WHO", "STARTED", "ERROR"});
    for (const auto& scenario : list->scenarios()) {
      table.AddRow(
          {scenario.id(), scenario.name(), std::string(ScenarioStateText(scenario.state())),
           fmt::format("{}/{}", scenario.steps_done(), scenario.steps()), Who(scenario.principal()),
           FormatTimeUs(scenario.start_time_us()), scenario.error()});
    }
    table.Print(std::cout);
  }
  return kExitOk;
}

int RunClear(const InjectFlags& flags) {
  if (flags.id.empty() == !flags.all) {
    return Fail("inject clear", "give an id (inj-N or scn-N) or --all");
  }
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("inject clear", client.status());
  v1::ClearInjectionsRequest request;
  if (flags.all) {
    request.set_all(true);
  } else {
    request.set_id(flags.id);
  }
  auto cleared = (*client)->ClearInjections(request);
  if (!cleared.ok()) return Fail("inject clear", cleared.status());
  if (flags.client.json) {
    std::cout << nlohmann::json{{"cleared", std::vector<std::string>(cleared->cleared().begin(),
                                                                     cleared->cleared().end())}}
                     .dump()
              << std::endl;
  } else if (cleared->cleared_size() == 0) {
    std::cout << "Nothing was active.\n";
  } else {
    std::string ids;
    for (const auto& id : cleared->cleared()) ids += (ids.empty() ? "" : ", ") + id;
    std::cout << "Cleared " << ids << "; real readings resume from the next tick.\n";
  }
  return kExitOk;
}

void AddInjectClientFlags(CLI::App* command, InjectFlags* flags) {
  AddClientFlags(command, &flags->client);
  AddTokenFileFlag(command, &flags->client);
}

}  // namespace

CommandRunner AddInjectCommand(CLI::App* parent) {
  CLI::App* inject = parent->add_subcommand(
      "inject", "Fault injection into the engine: values, XIDs, scenarios (privileged, audited)");
  inject->require_subcommand(1);
  auto flags = std::make_shared<InjectFlags>();

  CLI::App* field = inject->add_subcommand(
      "field",
      "Replace a field's reading (--value) or raise a counter (--add) for a while, of a GPU or "
      "of a NIC port");
  AddInjectClientFlags(field, flags.get());
  field->add_option("--gpu", flags->gpu, "GPU index")->check(CLI::Range(0, 1023));
  field->add_option("--port", flags->nic_port,
                    "A NIC port instead of a GPU, as vigil discovery names it (mlx5_3/1)");
  field
      ->add_option("--field", flags->field,
                   "DCGM field name or ID; of a NIC port: state (1 DOWN, 4 ACTIVE), phys_state "
                   "(2 Polling, 5 LinkUp), rate (Gb/s) or a counter (link_downed, symbol_error)")
      ->required();
  field->add_option("--value", flags->value, "The value to report instead of the real one");
  field->add_option("--add", flags->add,
                    "Raise a cumulative counter by N on top of its real reading");
  field->add_option("--for", flags->duration, "How long (default 60s, e.g. 5s, 10m)");
  const std::string allow_actions_help =
      "Let automatic actions (the health check's taint) follow this fault; without it they are "
      "only reported";
  field->add_flag("--allow-actions", flags->allow_actions, allow_actions_help);

  CLI::App* xid = inject->add_subcommand("xid", "Raise an XID as if the driver had reported it");
  AddInjectClientFlags(xid, flags.get());
  xid->add_option("--gpu", flags->gpu, "GPU index")->required()->check(CLI::Range(0, 1023));
  xid->add_option("--xid", flags->xid, "XID code, e.g. 79")->required()->check(CLI::Range(1, 999));
  xid->add_option("--gpu-instance", flags->gpu_instance,
                  "MIG: the GPU instance it is raised in (see vigil discovery)")
      ->check(CLI::Range(0, 1023));
  xid->add_flag("--allow-actions", flags->allow_actions, allow_actions_help);

  CLI::App* scenario = inject->add_subcommand(
      "scenario", "Run a timeline of injections from a YAML file (see scenarios/)");
  AddInjectClientFlags(scenario, flags.get());
  scenario->add_option("file", flags->scenario_file, "Scenario file")->required();

  CLI::App* list = inject->add_subcommand("list", "Show active injections and scenarios");
  AddClientFlags(list, &flags->client);

  CLI::App* clear =
      inject->add_subcommand("clear", "End an injection or scenario early (or --all)");
  AddInjectClientFlags(clear, flags.get());
  clear->add_option("id", flags->id, "Injection (inj-N) or scenario (scn-N) id");
  clear->add_flag("--all", flags->all, "Everything active");

  return [=] {
    if (field->parsed()) return RunField(*flags);
    if (xid->parsed()) return RunXid(*flags);
    if (scenario->parsed()) return RunScenario(*flags);
    if (list->parsed()) return RunList(*flags);
    return RunClear(*flags);
  };
}

}  // namespace vigil::cli
