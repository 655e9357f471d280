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

struct Rendered {
  std::vector<YAML::Node> objects;
  const YAML::Node* Find(const std::string& kind, const std::string& name) const {
    for (const YAML::Node& object : objects) {
      if (object["kind"].as<std::string>() == kind &&
          object["metadata"]["name"].as<std::string>() == name) {
        return &object;
      }
    }
    return nullptr;
  }
  std::vector<const YAML::Node*> All(const std::string& kind) const {
    std::vector<const YAML::Node*> found;
    for (const YAML::Node& object : objects) {
      if (object["kind"].as<std::string>() == kind) found.push_back(&object);
    }
    return found;
  }
};

Rendered Render(const std::string& dir) {
  auto result = Shell("kubectl kustomize " + dir);
  EXPECT_EQ(result.exit_code, 0) << "kubectl kustomize " << dir << ": " << result.err;
  // Nothing deprecated (bases, commonLabels, patchesStrategicMerge): a warning today is an error
  // in a later kustomize.
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr("Warning"))) << dir;
  Rendered rendered;
  for (const YAML::Node& object : YAML::LoadAll(result.out)) {
    EXPECT_TRUE(object.IsMap() && object["kind"]) << "not an object: " << object;
    if (object.IsMap() && object["kind"]) rendered.objects.push_back(object);
  }
  return rendered;
}

std::vector<std::string> Strings(const YAML::Node& node) {
  std::vector<std::string> out;
  for (const YAML::Node& item : node) out.push_back(item.as<std::string>());
  return out;
}

// Whether every label of `selector` is on `labels`.
bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector || selector.size() == 0) return false;
  for (const auto& entry : selector) {
    const std::string key = entry.first.as<std::string>();
    if (!labels[key] || labels[key].as<std::string>() != entry.second.as<std::string>()) {
      return false;
    }
  }
  return true;
}

const YAML::Node Container(const YAML::Node& daemonset) {
  return daemonset["spec"]["template"]["spec"]["containers"][0];
}

std::string EnvFieldPath(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& env : container["env"]) {
    if (env["name"].as<std::string>() == name && env["valueFrom"]) {
      return env["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
    }
  }
  return "";
}

void CheckLayout(const Rendered& rendered, const std::string& namespace_name) {
  SCOPED_TRACE("namespace " + namespace_name);
  // Three DaemonSets, and everything namespaced lands in the one namespace.
  std::set<std::string> daemonsets;
  for (const YAML::Node* daemonset : rendered.All("DaemonSet")) {
    daemonsets.insert((*daemonset)["metadata"]["name"].as<std::string>());
  }
  EXPECT_THAT(daemonsets,
              UnorderedElementsAre("vigil-engine", "vigil-exporter", "vigil-healthcheck"));
  for (const YAML::Node& object : rendered.objects) {
    const std::string kind = object["kind"].as<std::string>();
    if (kind == "ClusterRole" || kind == "ClusterRoleBinding" || kind == "Namespace") continue;
    EXPECT_EQ(object["metadata"]["namespace"].as<std::string>(), namespace_name) << kind;
  }

  // The engine's Service: node-local, port 5555, selecting the engine Pods.
  const YAML::Node* service = rendered.Find("Service", "vigil-engine");
  const YAML::Node* engine = rendered.Find("DaemonSet", "vigil-engine");
  ASSERT_NE(service, nullptr);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ((*service)["spec"]["internalTrafficPolicy"].as<std::string>(), "Local");
  EXPECT_EQ((*service)["spec"]["ports"][0]["port"].as<int>(), 5555);
  EXPECT_TRUE(
      Selects((*service)["spec"]["selector"], (*engine)["spec"]["template"]["metadata"]["labels"]));
  for (const char* client : {"vigil-exporter", "vigil-healthcheck"}) {
    EXPECT_FALSE(
        Selects((*service)["spec"]["selector"],
                (*rendered.Find("DaemonSet", client))["spec"]["template"]["metadata"]["labels"]))
        << client;
  }

  // The engine: GPU nodes, node name from the downward API, state and socket on the host, gRPC
  // probes against grpc.health.v1, node-critical, bounded memory.
  const YAML::Node pod = (*engine)["spec"]["template"]["spec"];
  const YAML::Node container = Container(*engine);
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.present"].as<std::string>(), "true");
  EXPECT_EQ(pod["priorityClassName"].as<std::string>(), "system-node-critical");
  EXPECT_EQ(EnvFieldPath(container, "NODE_NAME"), "spec.nodeName");
  const std::vector<std::string> args = Strings(container["args"]);
  EXPECT_EQ(args.front(), "engine");
  EXPECT_THAT(args, Contains("--listen=0.0.0.0:5555"));
  EXPECT_THAT(args, Contains("--socket=/run/vigil/vigil.sock"));
  EXPECT_EQ(container["readinessProbe"]["grpc"]["port"].as<int>(), 5555);
  EXPECT_EQ(container["livenessProbe"]["grpc"]["port"].as<int>(), 5555);
  EXPECT_TRUE(container["resources"]["limits"]["memory"]);
  std::map<std::string, std::string> host_paths;
  for (const YAML::Node& volume : pod["volumes"]) {
    if (volume["hostPath"]) {
      host_paths[volume["name"].as<std::string>()] = volume["hostPath"]["path"].as<std::string>();
    }
  }
  EXPECT_EQ(host_paths["state"], "/var/lib/vigil");
  EXPECT_EQ(host_paths["socket"], "/run/vigil");
  // The kernel log, read-only, with the capability reading it may need; the driver's
  // administrator's for the reset, GPM and MIG.
  EXPECT_EQ(host_paths["kmsg"], "/dev/kmsg");
  EXPECT_THAT(args, Contains("--kmsg=/dev/kmsg"));
  // Where /dev/kmsg is closed to the container: the journal, under the host's /var/log.
  EXPECT_EQ(host_paths["host-log"], "/var/log");
  EXPECT_THAT(args, Contains("--journal=/host/var/log/journal"));
  EXPECT_EQ(Strings(container["securityContext"]["capabilities"]["add"]),
            (std::vector<std::string>{"SYSLOG", "SYS_ADMIN"}));
  EXPECT_EQ(Strings(container["securityContext"]["capabilities"]["drop"]),
            std::vector<std::string>{"ALL"});
  bool tolerates_own_taint = false;
  for (const YAML::Node& toleration : pod["tolerations"]) {
    tolerates_own_taint |= toleration["key"].as<std::string>() == "vigil.dev/gpu-problem";
  }
  EXPECT_TRUE(tolerates_own_taint) << "a tainted node must keep its engine";

  // The clients: at the Service by name, their node's name, hardened, HTTP probes.
  const std::string engine_address =
      "--engine=" + (*service)["metadata"]["name"].as<std::string>() + ":5555";
  for (const char* name : {"vigil-exporter", "vigil-healthcheck"}) {
    SCOPED_TRACE(name);
    const YAML::Node* client = rendered.Find("DaemonSet", name);
    ASSERT_NE(client, nullptr);
    const YAML::Node client_pod = (*client)["spec"]["template"]["spec"];
    const YAML::Node c = Container(*client);
    EXPECT_THAT(Strings(c["args"]), Contains(engine_address));
    EXPECT_EQ(EnvFieldPath(c, "NODE_NAME"), "spec.nodeName");
    EXPECT_TRUE(client_pod["securityContext"]["runAsNonRoot"].as<bool>());
    EXPECT_NE(client_pod["securityContext"]["runAsUser"].as<int>(), 0);
    EXPECT_TRUE(c["securityContext"]["readOnlyRootFilesystem"].as<bool>());
    EXPECT_FALSE(c["securityContext"]["allowPrivilegeEscalation"].as<bool>());
    EXPECT_EQ(Strings(c["securityContext"]["capabilities"]["drop"]),
              std::vector<std::string>{"ALL"});
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
  }
  const YAML::Node* exporter = rendered.Find("DaemonSet", "vigil-exporter");
  bool pod_resources = false;
  for (const YAML::Node& volume : (*exporter)["spec"]["template"]["spec"]["volumes"]) {
    pod_resources |= volume["hostPath"] && volume["hostPath"]["path"].as<std::string>() ==
                                               "/var/lib/kubelet/pod-resources";
  }
  EXPECT_TRUE(pod_resources);

  // RBAC: the health check's service account may do exactly this, nothing more.
  const YAML::Node* healthcheck = rendered.Find("DaemonSet", "vigil-healthcheck");
  const std::string account =
      (*healthcheck)["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>();
  ASSERT_NE(rendered.Find("ServiceAccount", account), nullptr);
  const YAML::Node* binding = rendered.Find("ClusterRoleBinding", "vigil-healthcheck");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["subjects"][0]["name"].as<std::string>(), account);
  EXPECT_EQ((*binding)["subjects"][0]["namespace"].as<std::string>(), namespace_name);
  const YAML::Node* role =
      rendered.Find("ClusterRole", (*binding)["roleRef"]["name"].as<std::string>());
  ASSERT_NE(role, nullptr);
  std::map<std::string, std::set<std::string>> granted;
  for (const YAML::Node& rule : (*role)["rules"]) {
    const std::vector<std::string> groups = Strings(rule["apiGroups"]);
    ASSERT_EQ(groups.size(), 1u);
    for (const std::string& resource : Strings(rule["resources"])) {
      const std::string name = groups[0].empty() ? resource : groups[0] + "/" + resource;
      for (const std::string& verb : Strings(rule["verbs"])) granted[name].insert(verb);
    }
  }
  EXPECT_EQ(granted,
            (std::map<std::string, std::set<std::string>>{
                {"nodes", {"get", "list", "watch", "patch"}},
                {"nodes/status", {"get", "patch"}},
                {"events", {"create", "patch"}},
                {"resource.k8s.io/resourceslices", {"get", "list", "watch"}},
                {"resource.k8s.io/devicetaintrules", {"get", "list", "create", "delete"}}}));
  for (const char* name : {"vigil-engine", "vigil-exporter"}) {
    const YAML::Node spec = (*rendered.Find("DaemonSet", name))["spec"]["template"]["spec"];
    EXPECT_FALSE(spec["serviceAccountName"] &&
                 spec["serviceAccountName"].as<std::string>() == account);
  }

  // The NetworkPolicy admits only the two clients, only on 5555.
  const auto policies = rendered.All("NetworkPolicy");
  ASSERT_EQ(policies.size(), 1u);
  const YAML::Node policy = (*policies[0])["spec"];
  EXPECT_TRUE(Selects(policy["podSelector"]["matchLabels"],
                      (*engine)["spec"]["template"]["metadata"]["labels"]));
  EXPECT_EQ(Strings(policy["policyTypes"]), std::vector<std::string>{"Ingress"});
  ASSERT_EQ(policy["ingress"].size(), 1u);
  std::set<std::string> admitted;
  for (const YAML::Node& from : policy["ingress"][0]["from"]) {
    for (const auto& [name, daemonset] : std::map<std::string, const YAML::Node*>{
             {"exporter", exporter}, {"healthcheck", healthcheck}, {"engine", engine}}) {
      if (Selects(from["podSelector"]["matchLabels"],
                  (*daemonset)["spec"]["template"]["metadata"]["labels"])) {
        admitted.insert(name);
      }
    }
    EXPECT_FALSE(from["namespaceSelector"]) << "no other namespace";
    EXPECT_FALSE(from["ipBlock"]);
  }
  EXPECT_THAT(admitted, UnorderedElementsAre("exporter", "healthcheck"));
  EXPECT_EQ(policy["ingress"][0]["ports"][0]["port"].as<int>(), 5555);

  // Scraped by the Prometheus Operator, with alerts (and the remediator's, where deployed).
  size_t monitors = 0, rules = 0;
  for (const YAML::Node* monitor : rendered.All("ServiceMonitor")) {
    monitors += !(*monitor)["metadata"]["name"].as<std::string>().starts_with("vigil-remediat");
  }
  for (const YAML::Node* rule : rendered.All("PrometheusRule")) {
    rules += !(*rule)["metadata"]["name"].as<std::string>().starts_with("vigil-remediat");
  }
  EXPECT_EQ(monitors, 2u);
  EXPECT_EQ(rules, 1u);
}

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

// Runs the binary with a container's args (after `replace`): they parse, and it fails only for
// want of the in-cluster credentials; returns its stderr.
std::string RunArgs(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& replace = {}) {
  std::string command = VigilBinary();
  for (std::string arg : args) {
    for (const auto& [prefix, value] : replace) {
      if (arg.starts_with(prefix)) arg = value;
    }
    // The kubelet expands $(POD_NAMESPACE) from the downward API: the namespace kustomize sets.
    if (const size_t at = arg.find("$(POD_NAMESPACE)"); at != std::string::npos) {
      arg.replace(at, std::string_view("$(POD_NAMESPACE)").size(), "vigil");
    }
    command += " '" + arg + "'";
  }
  const CommandResult run = Shell(command);
  EXPECT_EQ(run.exit_code, 2) << command;
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("--help`"))) << "a flag did not parse: " << run.err;
  return run.err;
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
