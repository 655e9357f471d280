// Tests of the Kubernetes deployment: `kubectl kustomize` renders the base and every overlay, and
// the rendered objects are what the architecture needs — the engine Service node-local on 5555
// and selecting the engine Pods, three DaemonSets, clients pointed at the Service, probes,
// hardening, least-privilege RBAC, a NetworkPolicy that admits only the clients — and the alert
// rules pass `promtool check rules` and their unit tests (tests/deploy/rules_test.yaml).
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manifests.h"
#include "process.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"
#include "yaml-cpp/yaml.h"

namespace vigil::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

const std::string kDeploy = SourceDir() + "/deploy/kubernetes";
TEST(DeployTest, BaseAndOwnNamespaceOverlayRenderTheNodeLocalArchitecture) {
  const Rendered base = Render(kDeploy + "/base");
  CheckLayout(base, "vigil");
  EXPECT_TRUE(base.All("Namespace").empty()) << "the overlays decide who owns the namespace";
  const Rendered rendered = Render(kDeploy + "/overlays/vigil");
  CheckLayout(rendered, "vigil");
  EXPECT_NE(rendered.Find("Namespace", "vigil"), nullptr);
}

TEST(DeployTest, MonitoringOverlayMovesEverythingIntoMonitoring) {
  const Rendered rendered = Render(kDeploy + "/overlays/monitoring");
  CheckLayout(rendered, "monitoring");
  EXPECT_TRUE(rendered.All("Namespace").empty()) << "kube-prometheus-stack owns the namespace";
  for (const YAML::Node* monitor : rendered.All("ServiceMonitor")) {
    EXPECT_EQ((*monitor)["metadata"]["labels"]["release"].as<std::string>(),
              "kube-prometheus-stack");
  }
}

// promtool check rules, then its unit tests, of the one PrometheusRule `name` in `rendered`.
void CheckRules(const Rendered& rendered, const std::string& name, const std::string& file,
                const std::string& tests) {
  const YAML::Node* rule = rendered.Find("PrometheusRule", name);
  ASSERT_NE(rule, nullptr) << name;
  TempDir dir;
  {
    YAML::Emitter out;
    out << (*rule)["spec"];
    std::ofstream(dir.File(file)) << out.c_str() << "\n";
  }
  std::filesystem::copy_file(SourceDir() + "/tests/deploy/" + tests, dir.File(tests));
  auto check = Shell("promtool check rules " + dir.File(file));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_THAT(check.out + check.err, HasSubstr("SUCCESS"));
  auto test = Shell("promtool test rules " + dir.File(tests));
  EXPECT_EQ(test.exit_code, 0) << test.out << test.err;
  EXPECT_THAT(test.out + test.err, HasSubstr("SUCCESS"));
}

// A role's rights as "resource:verb".
std::set<std::string> RightsOf(const YAML::Node& role) {
  std::set<std::string> rights;
  for (const YAML::Node& rule : role["rules"]) {
    for (const std::string& resource : Strings(rule["resources"])) {
      for (const std::string& verb : Strings(rule["verbs"])) rights.insert(resource + ":" + verb);
    }
  }
  return rights;
}

TEST(DeployTest, AlertRulesPassPromtoolAndTheirUnitTests) {
  const Rendered rendered = Render(kDeploy + "/base");
  ASSERT_EQ(rendered.All("PrometheusRule").size(), 1u);
  CheckRules(rendered, "vigil", "rules.yaml", "rules_test.yaml");
}

TEST(DeployTest, TheRemediationOverlayAddsTheRemediatorAndTheNodesHandOff) {
  const Rendered rendered = Render(kDeploy + "/overlays/remediation");
  CheckLayout(rendered, "vigil");
  const YAML::Node* deployment = rendered.Find("Deployment", "vigil-remediator");
  ASSERT_NE(deployment, nullptr);
  EXPECT_EQ((*deployment)["spec"]["replicas"].as<int>(), 2) << "one active, one standing by";
  const YAML::Node container = (*deployment)["spec"]["template"]["spec"]["containers"][0];
  const std::vector<std::string> args = Strings(container["args"]);
  EXPECT_THAT(args, Contains("--mode=dry-run")) << "shipped in dry-run";
  EXPECT_THAT(args, Contains("--reboot-via=none")) << "never a reboot by default";
  EXPECT_EQ(EnvFieldPath(container, "POD_NAME"), "metadata.name");
  EXPECT_THAT(RunArgs(args, {{"--lease-namespace=", "--lease-namespace=vigil"}}),
              HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  // Eviction rights are the remediator's alone.
  const YAML::Node* role = rendered.Find("ClusterRole", "vigil-remediator");
  ASSERT_NE(role, nullptr);
  const std::set<std::string> rights = RightsOf(*role);
  EXPECT_EQ(rights, (std::set<std::string>{"nodes:get", "nodes:list", "nodes:watch", "nodes:patch",
                                           "pods:list", "pods/eviction:create", "events:create",
                                           "resourceclaims:get", "devicetaintrules:get",
                                           "devicetaintrules:list", "devicetaintrules:delete"}));
  for (const YAML::Node* other : rendered.All("ClusterRole")) {
    if ((*other)["metadata"]["name"].as<std::string>() == "vigil-remediator") continue;
    for (const YAML::Node& rule : (*other)["rules"]) {
      EXPECT_THAT(Strings(rule["resources"]), ::testing::Not(Contains("pods/eviction")))
          << (*other)["metadata"]["name"];
    }
  }
  const YAML::Node* lease = rendered.Find("Role", "vigil-remediator-lease");
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(Strings((*lease)["rules"][0]["resources"]), std::vector<std::string>{"leases"});
  // The circuit breaker: the remediator writes the ConfigMap the health checks read, by name.
  EXPECT_THAT(args, Contains("--circuit-breaker=$(POD_NAMESPACE)/vigil-circuit-breaker"));
  EXPECT_EQ(RightsOf(*lease),
            (std::set<std::string>{"leases:get", "leases:create", "leases:update",
                                   "configmaps:create", "configmaps:get", "configmaps:update"}));
  const YAML::Node* reader = rendered.Find("Role", "vigil-healthcheck-breaker");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(RightsOf(*reader),
            (std::set<std::string>{"configmaps:get", "configmaps:list", "configmaps:watch"}));
  EXPECT_EQ(Strings((*reader)["rules"][0]["resourceNames"]),
            std::vector<std::string>{"vigil-circuit-breaker"});
  // The node side: the health check hands off, with the token and the kubelet's socket; the
  // engine takes the token.
  const YAML::Node* check = rendered.Find("DaemonSet", "vigil-healthcheck");
  ASSERT_NE(check, nullptr);
  const std::vector<std::string> check_args = Strings(Container(*check)["args"]);
  EXPECT_THAT(check_args, Contains("--remediation"));
  EXPECT_THAT(check_args, Contains("--circuit-breaker=$(POD_NAMESPACE)/vigil-circuit-breaker"));
  EXPECT_EQ(EnvFieldPath(Container(*check), "POD_NAMESPACE"), "metadata.namespace");
  EXPECT_THAT(check_args, Contains("--engine-token-file=/etc/vigil/inject/token"));
  EXPECT_THAT(RunArgs(check_args, {{"--engine-token-file=", "--log-level=info"}}),
              HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  const YAML::Node* engine = rendered.Find("DaemonSet", "vigil-engine");
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(Strings(Container(*engine)["args"]),
              Contains("--inject-token-file=/etc/vigil/inject/token"));
  // Over plain TCP the engine takes the token only where the overlay says it accepts the risk.
  EXPECT_THAT(Strings(Container(*engine)["args"]), Contains("--insecure-token-over-plaintext"));
  CheckRules(rendered, "vigil-remediation", "remediation_rules.yaml",
             "remediation_rules_test.yaml");
}

// An overlay that lets the exporter read the API server for `flag`: its own service account with
// `rights` and nothing more, its token mounted there only (the base keeps it without one).
void CheckExporterReadsTheApi(const std::string& overlay, const std::string& flag,
                              const std::set<std::string>& rights) {
  SCOPED_TRACE(overlay);
  const Rendered rendered = Render(kDeploy + "/overlays/" + overlay);
  CheckLayout(rendered, "vigil");
  const YAML::Node* exporter = rendered.Find("DaemonSet", "vigil-exporter");
  ASSERT_NE(exporter, nullptr);
  const YAML::Node pod = (*exporter)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(), "vigil-exporter");
  EXPECT_TRUE(pod["automountServiceAccountToken"].as<bool>());
  const std::vector<std::string> args = Strings(Container(*exporter)["args"]);
  EXPECT_THAT(args, Contains(flag));
  EXPECT_EQ(EnvFieldPath(Container(*exporter), "NODE_NAME"), "spec.nodeName");
  EXPECT_THAT(RunArgs(args), HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  const YAML::Node* role = rendered.Find("ClusterRole", "vigil-exporter");
  ASSERT_NE(role, nullptr);
  EXPECT_EQ(RightsOf(*role), rights);
  const YAML::Node* binding = rendered.Find("ClusterRoleBinding", "vigil-exporter");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["subjects"][0]["namespace"].as<std::string>(), "vigil");
  const Rendered base_rendered = Render(kDeploy + "/base");
  const YAML::Node* base = base_rendered.Find("DaemonSet", "vigil-exporter");
  ASSERT_NE(base, nullptr);
  EXPECT_FALSE((*base)["spec"]["template"]["spec"]["automountServiceAccountToken"].as<bool>());
}

TEST(DeployTest, ThePodUidOverlayLetsTheExporterReadPodsAndNothingMore) {
  CheckExporterReadsTheApi("pod-uid", "--kubernetes-enable-pod-uid",
                           {"pods:get", "pods:list", "pods:watch"});
}

TEST(DeployTest, TheDraOverlayLetsTheExporterReadResourceSlicesAndNothingMore) {
  CheckExporterReadsTheApi("dra", "--kubernetes-enable-dra",
                           {"resourceslices:get", "resourceslices:list", "resourceslices:watch"});
}

// Per-pod usage of shared GPUs: the pod-uid overlay's rights, the flag, and the host's /proc
// mounted read-only for the exporter alone — not hostPID, which would move the pod into the host's
// PID namespace (deploy/kubernetes/overlays/virtual-gpus/exporter.yaml says why).
TEST(DeployTest, TheVirtualGpusOverlayMountsTheHostsProcReadOnlyWithoutHostPid) {
  CheckExporterReadsTheApi("virtual-gpus", "--kubernetes-virtual-gpus",
                           {"pods:get", "pods:list", "pods:watch"});
  const Rendered rendered = Render(kDeploy + "/overlays/virtual-gpus");
  const YAML::Node* exporter = rendered.Find("DaemonSet", "vigil-exporter");
  ASSERT_NE(exporter, nullptr);
  const YAML::Node pod = (*exporter)["spec"]["template"]["spec"];
  EXPECT_FALSE(pod["hostPID"].IsDefined() && pod["hostPID"].as<bool>());
  const std::vector<std::string> args = Strings(Container(*exporter)["args"]);
  EXPECT_THAT(args, Contains("--proc-root=/host/proc"));
  std::string proc_volume;
  for (const YAML::Node& volume : pod["volumes"]) {
    if (volume["hostPath"] && volume["hostPath"]["path"].as<std::string>() == "/proc") {
      proc_volume = volume["name"].as<std::string>();
    }
  }
  ASSERT_FALSE(proc_volume.empty());
  bool mounted = false;
  for (const YAML::Node& mount : Container(*exporter)["volumeMounts"]) {
    if (mount["name"].as<std::string>() != proc_volume) continue;
    mounted = true;
    EXPECT_EQ(mount["mountPath"].as<std::string>(), "/host/proc");
    EXPECT_TRUE(mount["readOnly"].as<bool>());
  }
  EXPECT_TRUE(mounted);
  // The other volumes (the kubelet's socket) are kept.
  EXPECT_THAT(args, Contains("--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"));
  EXPECT_EQ(pod["volumes"].size(), 2u);
}

// The device plugin's restart is opt-in: the remediator's flags, and the right to delete Pods in
// the plugin's namespace only — never cluster-wide.
TEST(DeployTest, TheDevicePluginRestartOverlayMayDeletePodsInThePluginsNamespaceOnly) {
  const Rendered rendered = Render(kDeploy + "/overlays/device-plugin-restart");
  const YAML::Node* deployment = rendered.Find("Deployment", "vigil-remediator");
  ASSERT_NE(deployment, nullptr);
  const std::vector<std::string> args = Strings(Container(*deployment)["args"]);
  EXPECT_THAT(args, Contains("--device-plugin-selector=app=nvidia-device-plugin-daemonset"));
  EXPECT_THAT(args, Contains("--device-plugin-namespace=gpu-operator"));
  EXPECT_THAT(args, Contains("--mode=dry-run")) << "the remediation overlay's flags are kept";
  EXPECT_THAT(RunArgs(args, {{"--lease-namespace=", "--lease-namespace=vigil"}}),
              HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  const YAML::Node* role = rendered.Find("Role", "vigil-remediator-device-plugin");
  ASSERT_NE(role, nullptr);
  EXPECT_EQ((*role)["metadata"]["namespace"].as<std::string>(), "gpu-operator");
  EXPECT_EQ(RightsOf(*role), std::set<std::string>{"pods:delete"});
  const YAML::Node* binding = rendered.Find("RoleBinding", "vigil-remediator-device-plugin");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["metadata"]["namespace"].as<std::string>(), "gpu-operator");
  EXPECT_EQ((*binding)["subjects"][0]["name"].as<std::string>(), "vigil-remediator");
  EXPECT_EQ((*binding)["subjects"][0]["namespace"].as<std::string>(), "vigil");
  for (const YAML::Node* cluster_role : rendered.All("ClusterRole")) {
    EXPECT_THAT(RightsOf(*cluster_role), ::testing::Not(Contains("pods:delete")))
        << (*cluster_role)["metadata"]["name"];
  }
  // Everything else stays in Vigil's namespace.
  for (const YAML::Node& object : rendered.objects) {
    if (!object["metadata"]["namespace"]) continue;
    const std::string name = object["metadata"]["name"].as<std::string>();
    if (name == "vigil-remediator-device-plugin") continue;
    EXPECT_EQ(object["metadata"]["namespace"].as<std::string>(), "vigil") << name;
  }
}

TEST(DeployTest, TheDrillJobRunsOnItsNodeWithNothingButTheRightsItNeeds) {
  const Rendered drill = Render(kDeploy + "/drill");
  const YAML::Node* job = drill.Find("Job", "vigil-drill");
  ASSERT_NE(job, nullptr);
  const YAML::Node spec = (*job)["spec"]["template"]["spec"];
  EXPECT_EQ(spec["serviceAccountName"].as<std::string>(), "vigil-drill");
  EXPECT_EQ(spec["restartPolicy"].as<std::string>(), "Never");
  EXPECT_TRUE(spec["nodeSelector"]["kubernetes.io/hostname"]) << "a drill is about one node";
  EXPECT_EQ(spec["volumes"][0]["hostPath"]["path"].as<std::string>(), "/run/vigil")
      << "the engine's socket, as the engine's DaemonSet shares it";
  // Its arguments are the binary's: parsed, they fail only for want of an engine.
  std::vector<std::string> args = Strings(spec["containers"][0]["args"]);
  EXPECT_THAT(RunArgs(args, {{"--engine=", "--engine=unix:///nonexistent/vigil.sock"}}),
              HasSubstr("--kubernetes"))
      << "the in-cluster credentials are missing here, after every flag parsed";
  // Rights: read nodes, and list the GPU's DeviceTaintRules and the node's ResourceSlices;
  // nothing else.
  const YAML::Node* role = drill.Find("ClusterRole", "vigil-drill");
  ASSERT_NE(role, nullptr);
  EXPECT_EQ(RightsOf(*role),
            (std::set<std::string>{"nodes:get", "devicetaintrules:list", "resourceslices:list"}));
  // It reaches its own node's exporter and health check: node-local Services selecting the
  // base's Pods.
  const Rendered base = Render(kDeploy + "/base");
  for (const auto& [service, daemonset] : std::vector<std::pair<std::string, std::string>>{
           {"vigil-exporter-local", "vigil-exporter"},
           {"vigil-healthcheck-local", "vigil-healthcheck"}}) {
    const YAML::Node* local = drill.Find("Service", service);
    ASSERT_NE(local, nullptr) << service;
    EXPECT_EQ((*local)["spec"]["internalTrafficPolicy"].as<std::string>(), "Local");
    const YAML::Node* pods = base.Find("DaemonSet", daemonset);
    ASSERT_NE(pods, nullptr);
    EXPECT_TRUE(
        Selects((*local)["spec"]["selector"], (*pods)["spec"]["template"]["metadata"]["labels"]))
        << service;
    bool url = false;
    for (const std::string& arg : args)
      url |= arg.find("http://" + service + ":") != std::string::npos;
    EXPECT_TRUE(url) << "the Job reaches " << service;
  }
}

}  // namespace
// The dashboard's ConfigMap, as Grafana's sidecar picks it up: labelled grafana_dashboard "1",
// holding the very JSON of deploy/grafana/vigil.json.
TEST(DeployTest, TheGrafanaDashboardRendersAsASidecarConfigMap) {
  const Rendered rendered = Render(SourceDir() + "/deploy/grafana");
  const auto maps = rendered.All("ConfigMap");
  ASSERT_EQ(maps.size(), 1u);
  const YAML::Node& map = *maps[0];
  EXPECT_EQ(map["metadata"]["labels"]["grafana_dashboard"].as<std::string>(), "1");
  std::ifstream file(SourceDir() + "/deploy/grafana/vigil.json");
  const std::string json((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(map["data"]["vigil.json"].as<std::string>(), json);
}

}  // namespace vigil::testing
