// `vigil drill`: flags to a drill plan, the links it names, the drill's run, and its timeline
// (a table, or JSON with --json). Exit 0 when every named stage passed, 1 when one failed, 2 for
// usage, preflight and connection problems. Single-threaded (the engine link reads its stream on
// a thread of its own).
#include <cmath>
#include <iostream>

#include "api/convert.h"
#include "api/node_condition.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/files.h"
#include "common/status.h"
#include "drill/drill.h"
#include "drill/engine_link.h"
#include "drill/http_get.h"
#include "drill/node_links.h"
#include "drill/report.h"
#include "drill/web_links.h"
#include "fmt/format.h"
#include "kube/kube_api.h"
#include "kube/object.h"

namespace vigil::cli {
namespace {

using drill::Stage;
using drill::StageReport;

struct DrillFlags {
  ClientFlags client;
  int64_t gpu = -1;
  int64_t xid = -1;
  std::string field;
  std::string value;
  std::string scenario_file;
  std::string exporter, healthcheck, prometheus, alertmanager;
  std::vector<std::string> alerts;
  bool kubernetes = false;
  bool taint = false;
  bool remediation = false;
  std::string node;
  std::string taint_key = std::string(kDefaultTaintKey);
  std::string service_account_dir = std::string(kube::InClusterKube::kServiceAccountDir);
  std::string deadline = "2m";
  std::vector<std::string> stage_deadlines;
  bool no_cleanup = false;
  bool wait_recovery = false;
  bool force = false;
  bool allow_actions = false;
};

// The plan from the flags; the error names the flag.
absl::StatusOr<drill::DrillPlan> PlanFrom(const DrillFlags& flags) {
  drill::DrillPlan plan;
  const int faults = (flags.xid >= 0) + !flags.field.empty() + !flags.scenario_file.empty();
  if (faults != 1) {
    return absl::InvalidArgumentError(
        "give one fault: --xid CODE, --field NAME --value V, or --scenario FILE");
  }
  if (flags.gpu < 0) {
    return absl::InvalidArgumentError(
        "--gpu N is required: the GPU whose verdict the drill follows");
  }
  drill::Fault& fault = plan.fault;
  fault.gpu = static_cast<uint32_t>(flags.gpu);
  if (flags.xid >= 0) {
    fault.kind = drill::Fault::Kind::kXid;
    fault.xid = static_cast<uint32_t>(flags.xid);
  } else if (!flags.field.empty()) {
    fault.kind = drill::Fault::Kind::kField;
    auto field = ResolveField(flags.field);
    if (!field.ok()) return WithContext(field.status(), "--field");
    fault.field = *field;
    if (flags.value.empty()) return absl::InvalidArgumentError("--field needs --value V");
    char* end = nullptr;
    fault.value = std::strtod(flags.value.c_str(), &end);
    if (end != flags.value.c_str() + flags.value.size() || !std::isfinite(fault.value)) {
      return absl::InvalidArgumentError(fmt::format("--value '{}' is not a number", flags.value));
    }
  } else {
    fault.kind = drill::Fault::Kind::kScenario;
    auto text = ReadFile(flags.scenario_file);
    if (!text.ok()) return WithContext(text.status(), "--scenario");
    fault.scenario_yaml = *text;
    fault.scenario_source = flags.scenario_file;
  }
  if (!flags.value.empty() && flags.field.empty()) {
    return absl::InvalidArgumentError("--value goes with --field");
  }
  auto deadline = ParseDuration(flags.deadline);
  if (!deadline.ok()) return WithContext(deadline.status(), "--deadline");
  if (*deadline < absl::Seconds(1) || *deadline > absl::Hours(1)) {
    return absl::InvalidArgumentError("--deadline is between 1s and 1h");
  }
  std::vector<Stage> named = {Stage::kEngine};
  const std::pair<const std::string*, Stage> urls[] = {{&flags.exporter, Stage::kExporter},
                                                       {&flags.healthcheck, Stage::kHealthcheck},
                                                       {&flags.prometheus, Stage::kAlert},
                                                       {&flags.alertmanager, Stage::kAlertmanager}};
  const char* const url_flags[] = {"--exporter", "--healthcheck", "--prometheus", "--alertmanager"};
  for (size_t i = 0; i < std::size(urls); ++i) {
    if (urls[i].first->empty()) continue;
    if (auto valid = drill::CheckHttpUrl(url_flags[i], *urls[i].first); !valid.ok()) return valid;
    named.push_back(urls[i].second);
  }
  if (!flags.alerts.empty() && flags.prometheus.empty() && flags.alertmanager.empty()) {
    return absl::InvalidArgumentError("--alert goes with --prometheus or --alertmanager");
  }
  if (flags.kubernetes) {
    named.push_back(Stage::kNodeCondition);
    if (flags.taint) named.push_back(Stage::kTaint);
    if (flags.remediation) {
      for (Stage stage : drill::kRemediationStages) {
        named.push_back(stage);
      }
    }
  } else if (flags.taint || flags.remediation || !flags.node.empty()) {
    return absl::InvalidArgumentError("--taint, --remediation and --node go with --kubernetes");
  }
  for (Stage stage : named) plan.deadlines[stage] = drill::DefaultDeadline(stage, *deadline);
  for (const std::string& text : flags.stage_deadlines) {
    auto parsed = drill::ParseStageDeadline(text);
    if (!parsed.ok()) return WithContext(parsed.status(), "--stage-deadline");
    // --taint follows the health check's quarantine, of the node or of the GPU: which one is
    // found once the drill reaches the API; either name sets its deadline.
    if (parsed->first == Stage::kDeviceQuarantine && flags.taint) parsed->first = Stage::kTaint;
    if (!plan.deadlines.contains(parsed->first)) {
      return absl::InvalidArgumentError(
          fmt::format("--stage-deadline {}: the {} stage is not part of this drill (name its link)",
                      text, drill::StageName(parsed->first)));
    }
    plan.deadlines[parsed->first] = parsed->second;
  }
  plan.alerts = flags.alerts;
  plan.cleanup = !flags.no_cleanup;
  plan.wait_recovery = flags.wait_recovery;
  plan.force = flags.force;
  fault.allow_actions = flags.allow_actions;
  if (flags.allow_actions && fault.kind == drill::Fault::Kind::kScenario) {
    return absl::InvalidArgumentError(
        "--allow-actions goes with --xid or --field: a scenario's injections never drive actions");
  }
  return plan;
}

std::string Latency(const StageReport& row) {
  return row.seen_after ? fmt::format("{} ms", absl::ToInt64Milliseconds(*row.seen_after)) : "-";
}

void PrintReport(const drill::DrillReport& report) {
  std::cout << fmt::format("Drill: {} ({}) of node {}, engine {}, injection {}\n", report.fault,
                           report.target.uuid, report.target.node, report.target.instance_id,
                           report.injection_id);
  for (drill::Want phase : {drill::Want::kFault, drill::Want::kRecovered}) {
    Table table({"STAGE", "SEEN AFTER", "ENGINE SEQ", "DEADLINE", "RESULT", "DETAIL"});
    bool any = false;
    for (const StageReport& row : report.stages) {
      if (row.phase != phase) continue;
      any = true;
      table.AddRow({std::string(drill::StageName(row.stage)), Latency(row),
                    row.seq != 0 ? std::to_string(row.seq) : "-",
                    row.link.empty() ? "-" : absl::FormatDuration(row.deadline),
                    std::string(drill::ResultName(row.result)), row.detail});
    }
    if (!any) continue;
    std::cout << (phase == drill::Want::kFault ? "\nThe way there (since the injection):\n"
                                               : "\nThe way back (since the cleanup):\n");
    table.Print(std::cout);
  }
  for (const std::string& note : report.notes) std::cout << "\nNote: " << note << '\n';
  for (const std::string& problem : report.problems) std::cout << "\nProblem: " << problem << '\n';
  std::vector<std::string> pending, failed;
  for (const StageReport& row : report.stages) {
    if (row.result == StageReport::Result::kPending) {
      pending.emplace_back(drill::StageName(row.stage));
    }
    if (row.result == StageReport::Result::kFail) failed.emplace_back(drill::StageName(row.stage));
  }
  if (report.outcome == drill::DrillReport::Outcome::kPassed) {
    std::cout << (pending.empty()
                      ? "\nDrill passed: every named stage showed the fault and its end.\n"
                      : fmt::format("\nDrill passed: every named stage showed the fault; the way "
                                    "back of {} is pending (--wait-recovery follows it).\n",
                                    fmt::join(pending, ", ")));
  } else {
    std::cout << fmt::format(
        "\nDrill FAILED: {}.\n",
        failed.empty() ? std::string("see the problems above")
                       : fmt::format("{} did not make it{}", fmt::join(failed, ", "),
                                     report.problems.empty() ? "" : "; see the problems above"));
  }
}

int RunDrill(const DrillFlags& flags) {
  auto plan = PlanFrom(flags);
  if (!plan.ok()) return Fail("drill", plan.status());
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("drill", client.status());
  std::unique_ptr<kube::KubeApi> kube;
  if (flags.kubernetes) {
    auto in_cluster = kube::InClusterKube::Create(flags.service_account_dir, "drill");
    if (!in_cluster.ok()) return Fail("drill", in_cluster.status());
    kube = std::move(*in_cluster);
  }
  std::string node = flags.node;
  if (flags.kubernetes && node.empty()) {
    auto info = (*client)->GetEngineInfo();
    if (!info.ok()) return Fail("drill", info.status());
    node = info->node_name();
  }
  std::vector<std::unique_ptr<drill::Link>> links;
  links.push_back(std::make_unique<drill::EngineLink>(client->get(), plan->fault.gpu));
  if (!flags.exporter.empty()) links.push_back(drill::NewExporterLink(flags.exporter));
  if (!flags.healthcheck.empty()) links.push_back(drill::NewHealthcheckLink(flags.healthcheck));
  // The node's health check says how long the quarantine's way back takes, and whether it
  // quarantines GPUs or the node.
  std::optional<nlohmann::json> healthcheck_status;
  if (flags.kubernetes && !flags.healthcheck.empty()) {
    if (auto status = drill::HttpGet(flags.healthcheck, "/status"); status.ok()) {
      healthcheck_status = nlohmann::json::parse(*status, nullptr, false);
      const nlohmann::json& seconds =
          kube::At(kube::At(*healthcheck_status, "kubernetes"), "untaint_after_seconds");
      if (seconds.is_number_integer()) plan->untaint_after = absl::Seconds(seconds.get<int64_t>());
    }
  }
  std::vector<std::string> notes;
  if (flags.kubernetes) {
    links.push_back(drill::NewNodeConditionLink(kube.get(), node));
    if (flags.taint) {
      auto scope = drill::FindQuarantineScope(kube.get(), node,
                                              healthcheck_status ? &*healthcheck_status : nullptr);
      if (!scope.ok()) return Fail("drill", scope.status());
      notes.push_back(scope->why);
      if (scope->gpu) {
        plan->deadlines[Stage::kDeviceQuarantine] = plan->deadlines[Stage::kTaint];
        plan->deadlines.erase(Stage::kTaint);
        links.push_back(
            drill::NewDeviceQuarantineLink(kube.get(), node, flags.taint_key, flags.allow_actions));
      } else {
        links.push_back(
            drill::NewTaintLink(kube.get(), node, flags.taint_key, flags.allow_actions));
      }
    }
    if (flags.remediation) {
      for (Stage stage : drill::kRemediationStages) {
        links.push_back(drill::NewRemediationLink(kube.get(), node, stage, flags.allow_actions));
      }
    }
  }
  if (!flags.prometheus.empty()) {
    links.push_back(drill::NewPrometheusLink(flags.prometheus, flags.alerts));
  }
  if (!flags.alertmanager.empty()) {
    links.push_back(drill::NewAlertmanagerLink(flags.alertmanager, flags.alerts));
  }
  drill::Drill run(*plan, client->get(), std::move(links), Clock::Real());
  drill::DrillReport report = run.Run();
  report.notes.insert(report.notes.begin(), notes.begin(), notes.end());
  if (flags.client.json) {
    // Details quote servers' answers, cut to length: never let a split character abort the
    // report.
    std::cout << drill::ReportJson(report).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else if (report.outcome == drill::DrillReport::Outcome::kRefused ||
             report.outcome == drill::DrillReport::Outcome::kError) {
    const std::string_view what =
        report.outcome == drill::DrillReport::Outcome::kRefused ? "preflight" : "error";
    for (const std::string& problem : report.problems) {
      std::cerr << fmt::format("vigil drill: {}: {}\n", what, problem);
    }
    if (report.outcome == drill::DrillReport::Outcome::kRefused) {
      std::cerr << "vigil drill: nothing was injected\n";
    }
  } else {
    PrintReport(report);
  }
  return drill::ExitCode(report);
}

}  // namespace

CommandRunner AddDrillCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "drill",
      "Prove the alerting chain: inject a fault into this node's engine and follow it through "
      "every named link and back; exit 0 passed, 1 a stage failed, 2 refused");
  auto flags = std::make_shared<DrillFlags>();
  AddClientFlags(command, &flags->client);
  AddTokenFileFlag(command, &flags->client);
  command->add_option("--gpu", flags->gpu, "The GPU to drill (and whose verdict to follow)")
      ->check(CLI::Range(0, 1023));
  command->add_option("--xid", flags->xid, "Inject this XID")->check(CLI::Range(1, 999));
  command->add_option("--field", flags->field, "Inject this field (name or ID) ...");
  command->add_option("--value", flags->value, "... at this value");
  command->add_option("--scenario", flags->scenario_file, "Run this injection scenario (YAML)");
  command->add_option("--exporter", flags->exporter, "The node's exporter: http://HOST:9400");
  command->add_option("--healthcheck", flags->healthcheck,
                      "The node's health check: http://HOST:9401");
  command->add_flag("--kubernetes", flags->kubernetes,
                    "Follow the node's GpuProblem condition (in-cluster credentials)");
  command->add_flag("--taint", flags->taint,
                    "... and the health check's quarantine (with --kubernetes): the node's taint, "
                    "or where the health check quarantines GPUs (DRA devices) the GPU's "
                    "DeviceTaintRule with the node untainted (stage device-quarantine)");
  command->add_flag("--remediation", flags->remediation,
                    "... and the remediator's steps: quarantine, drain, recovery, handed back "
                    "(with --kubernetes; acted on only with --allow-actions)");
  command->add_option("--node", flags->node, "Kubernetes node (default: the engine's node)");
  command->add_option("--taint-key", flags->taint_key, "Key of the health check's taint")
      ->capture_default_str();
  command
      ->add_option("--service-account-dir", flags->service_account_dir,
                   "Where the pod's service account token and CA are")
      ->capture_default_str();
  command->add_option("--prometheus", flags->prometheus, "Prometheus: http://HOST:9090");
  command->add_option("--alert", flags->alerts,
                      "An alert expected to fire (repeatable; default: any naming this node and "
                      "GPU)");
  command->add_option("--alertmanager", flags->alertmanager, "Alertmanager: http://HOST:9093");
  command
      ->add_option("--deadline", flags->deadline,
                   "How long each stage may take (the alert stages get the rules' for: on "
                   "top)")
      ->capture_default_str();
  command->add_option("--stage-deadline", flags->stage_deadlines,
                      "STAGE=DURATION for one stage (" + drill::StageChoices() + "; repeatable)");
  command->add_flag("--no-cleanup", flags->no_cleanup,
                    "Leave the fault in place (the injection until it ends, the incidents)");
  command->add_flag("--wait-recovery", flags->wait_recovery,
                    "Follow the taint's removal and the alerts' resolution to the end");
  command->add_flag("--force", flags->force, "Drill a node that is already quarantined");
  command->add_flag("--allow-actions", flags->allow_actions,
                    "Let the health check act on the fault (taint the node); without it the "
                    "drill proves the chain up to the decision and reports \"would taint\"");
  return [=] { return RunDrill(*flags); };
}

}  // namespace vigil::cli
