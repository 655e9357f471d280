// Implements the manifests helpers with kubectl, yaml-cpp and the binary.
#include "manifests.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "process.h"
#include "testing/paths.h"

namespace vigil::testing {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

const YAML::Node* Rendered::Find(const std::string& kind, const std::string& name) const {
  for (const YAML::Node& object : objects) {
    if (object["kind"].as<std::string>() == kind &&
        object["metadata"]["name"].as<std::string>() == name) {
      return &object;
    }
  }
  return nullptr;
}

std::vector<const YAML::Node*> Rendered::All(const std::string& kind) const {
  std::vector<const YAML::Node*> found;
  for (const YAML::Node& object : objects) {
    if (object["kind"].as<std::string>() == kind) found.push_back(&object);
  }
  return found;
}

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

const YAML::Node Container(const YAML::Node& workload) {
  return workload["spec"]["template"]["spec"]["containers"][0];
}

std::string EnvFieldPath(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& env : container["env"]) {
    if (env["name"].as<std::string>() == name && env["valueFrom"]) {
      return env["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
    }
  }
  return "";
}

void CheckLayout(const Rendered& rendered, const std::string& namespace_name,
                 EngineTransport transport) {
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
  const bool tls = transport == EngineTransport::kMutualTls;
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    if (tls) {
      // The kubelet's gRPC probe speaks no TLS: the engine is asked over its Unix socket.
      EXPECT_EQ(Strings(container[probe]["exec"]["command"]),
                (std::vector<std::string>{"/usr/bin/vigil", "info",
                                          "--engine=unix:///run/vigil/vigil.sock", "--timeout=4s"}))
          << probe;
    } else {
      EXPECT_EQ(container[probe]["grpc"]["port"].as<int>(), 5555) << probe;
    }
  }
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
  const std::string engine_address = std::string("--engine=") + (tls ? "tls://" : "") +
                                     (*service)["metadata"]["name"].as<std::string>() + ":5555";
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
    for (const char* probe : {"readinessProbe", "livenessProbe"}) {
      EXPECT_EQ(
          c[probe]["httpGet"]["scheme"] ? c[probe]["httpGet"]["scheme"].as<std::string>() : "HTTP",
          tls ? "HTTPS" : "HTTP")
          << probe;
    }
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

std::string RunArgs(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& replace) {
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

}  // namespace vigil::testing
