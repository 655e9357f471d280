// Tests of the TLS overlays (components/tls, overlays/tls, overlays/remediation-tls): the rendered
// layout holds, cert-manager's objects make a CA that signs every certificate, and — what a render
// alone cannot show — the pieces fit: each pod is played on this machine with its volumes as the
// kubelet would mount them (the Secrets cert-manager would write, issued by a test CA with each
// Certificate's names; the ConfigMaps), and the real binary runs with the rendered arguments. The
// engine starts on its certificate and config, its exec probe passes, the exporter and the health
// check reach it over mutual TLS under the names their certificates carry, the engine grants
// each what the config says, and the scrape that each ServiceMonitor describes succeeds (the
// remediator's too, against the fake API server).
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manifests.h"
#include "process.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"

namespace vigil::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kDeploy = SourceDir() + "/deploy/kubernetes";
// The node the played pods run on (the engine's --node-name; the clients' $NODE_NAME).
const std::string kNodeName = "gpu-node-1";

// The Secrets cert-manager would write for the overlay's Certificates: each issued by one test CA
// (as the CA Issuer signs them all) with the Certificate's common name, DNS names and URIs.
std::map<std::string, TestPki::Issued> IssueCertificates(const Rendered& rendered, TestPki& pki) {
  std::map<std::string, TestPki::Issued> secrets;
  for (const YAML::Node* certificate : rendered.All("Certificate")) {
    const YAML::Node spec = (*certificate)["spec"];
    if (spec["isCA"] && spec["isCA"].as<bool>()) continue;
    TestPki::Request request{.common_name = spec["commonName"].as<std::string>()};
    if (spec["dnsNames"]) request.dns_names = Strings(spec["dnsNames"]);
    if (spec["uris"]) request.uris = Strings(spec["uris"]);
    const std::string secret = spec["secretName"].as<std::string>();
    secrets[secret] = pki.Issue(secret, request);
  }
  return secrets;
}

// Replaces every occurrence of `from` in `text` with `to`.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// One pod of a rendered DaemonSet on this machine: each Secret or ConfigMap volume it mounts is a
// directory ROOT/MOUNT_PATH holding what the kubelet would put there, and every mount path in its
// arguments and in those files points there instead. Host paths are not played.
class LocalPod {
 public:
  LocalPod(const Rendered& rendered, const YAML::Node& daemonset,
           const std::map<std::string, TestPki::Issued>& secrets, const std::string& ca_file,
           const std::string& root)
      : root_(root), container_(Container(daemonset)) {
    std::map<std::string, YAML::Node> volumes;
    for (const YAML::Node& volume : daemonset["spec"]["template"]["spec"]["volumes"]) {
      volumes[volume["name"].as<std::string>()] = volume;
    }
    for (const YAML::Node& mount : container_["volumeMounts"]) {
      const YAML::Node volume = volumes[mount["name"].as<std::string>()];
      const std::string path = mount["mountPath"].as<std::string>();
      if (volume["secret"] || volume["configMap"]) mount_paths_.push_back(path);
    }
    for (const YAML::Node& mount : container_["volumeMounts"]) {
      const YAML::Node volume = volumes[mount["name"].as<std::string>()];
      const std::string dir = Local(mount["mountPath"].as<std::string>());
      if (volume["secret"]) {
        const std::string name = volume["secret"]["secretName"].as<std::string>();
        auto issued = secrets.find(name);
        if (issued == secrets.end()) {
          EXPECT_TRUE(volume["secret"]["optional"] && volume["secret"]["optional"].as<bool>())
              << "the pod needs Secret " << name << ", which no Certificate issues";
          continue;
        }
        std::filesystem::create_directories(dir);
        std::filesystem::copy_file(issued->second.cert, dir + "/tls.crt");
        std::filesystem::copy_file(issued->second.key, dir + "/tls.key");
        std::filesystem::copy_file(ca_file, dir + "/ca.crt");
      } else if (volume["configMap"]) {
        const std::string name = volume["configMap"]["name"].as<std::string>();
        const YAML::Node* map = rendered.Find("ConfigMap", name);
        if (map == nullptr) {
          ADD_FAILURE() << "the pod mounts ConfigMap " << name << ", which is not rendered";
          continue;
        }
        std::filesystem::create_directories(dir);
        for (const auto& entry : (*map)["data"]) {
          std::ofstream(dir + "/" + entry.first.as<std::string>())
              << Localize(entry.second.as<std::string>());
        }
      }
    }
  }

  // `text` with every mount path of a played volume pointing under the pod's root.
  std::string Localize(std::string text) const {
    for (const std::string& path : mount_paths_)
      text = ReplaceAll(text, path + "/", Local(path) + "/");
    return text;
  }
  // The container's arguments starting with any of `prefixes`, localised.
  std::vector<std::string> Args(const std::vector<std::string>& prefixes) const {
    std::vector<std::string> args;
    for (const std::string& arg : Strings(container_["args"])) {
      for (const std::string& prefix : prefixes) {
        if (arg.starts_with(prefix)) {
          args.push_back(Localize(arg));
          break;
        }
      }
    }
    return args;
  }
  const YAML::Node& container() const { return container_; }

 private:
  std::string Local(const std::string& mount_path) const { return root_ + mount_path; }

  std::string root_;
  YAML::Node container_;
  std::vector<std::string> mount_paths_;
};

std::string Quoted(const std::vector<std::string>& args) {
  std::string command;
  for (const std::string& arg : args) command += (command.empty() ? "'" : " '") + arg + "'";
  return command;
}

// cert-manager's objects: a self-signed Issuer makes the CA, whose Issuer signs every other
// Certificate, each renewed ahead of expiry with a new key.
void CheckCertManagerChain(const Rendered& rendered) {
  const YAML::Node* selfsigned = rendered.Find("Issuer", "vigil-selfsigned");
  ASSERT_NE(selfsigned, nullptr);
  EXPECT_TRUE((*selfsigned)["spec"]["selfSigned"]);
  const YAML::Node* ca = rendered.Find("Certificate", "vigil-ca");
  ASSERT_NE(ca, nullptr);
  EXPECT_TRUE((*ca)["spec"]["isCA"].as<bool>());
  EXPECT_EQ((*ca)["spec"]["issuerRef"]["name"].as<std::string>(), "vigil-selfsigned");
  const YAML::Node* issuer = rendered.Find("Issuer", "vigil-ca");
  ASSERT_NE(issuer, nullptr);
  EXPECT_EQ((*issuer)["spec"]["ca"]["secretName"].as<std::string>(),
            (*ca)["spec"]["secretName"].as<std::string>());
  size_t issued = 0;
  for (const YAML::Node* certificate : rendered.All("Certificate")) {
    const YAML::Node spec = (*certificate)["spec"];
    if (spec["isCA"]) continue;
    ++issued;
    SCOPED_TRACE((*certificate)["metadata"]["name"].as<std::string>());
    EXPECT_EQ(spec["issuerRef"]["name"].as<std::string>(), "vigil-ca");
    EXPECT_EQ(spec["privateKey"]["rotationPolicy"].as<std::string>(), "Always");
    EXPECT_TRUE(spec["renewBefore"]);
  }
  EXPECT_GE(issued, 5u) << "the engine's, two clients' and the endpoints'";
}

// The HTTPS endpoint of `daemon` answers the scrape its ServiceMonitor describes (CA, server
// name, path) with `expected` in the body, the kubelet's probe (HTTPS, unverified) with 200, and
// plain HTTP with no page.
void CheckScrape(const Rendered& rendered, const std::string& monitor_name, HttpDaemon& daemon,
                 const std::string& ca_file, const std::string& expected) {
  SCOPED_TRACE(monitor_name);
  const YAML::Node* monitor = rendered.Find("ServiceMonitor", monitor_name);
  ASSERT_NE(monitor, nullptr);
  const YAML::Node endpoint = (*monitor)["spec"]["endpoints"][0];
  EXPECT_EQ(endpoint["scheme"].as<std::string>(), "https");
  const std::string secret = endpoint["tlsConfig"]["ca"]["secret"]["name"].as<std::string>();
  EXPECT_NE(rendered.All("Certificate").end(),
            std::find_if(rendered.All("Certificate").begin(), rendered.All("Certificate").end(),
                         [&](const YAML::Node* certificate) {
                           return (*certificate)["spec"]["secretName"].as<std::string>() == secret;
                         }))
      << "the CA comes from a Secret cert-manager writes";
  EXPECT_EQ(endpoint["tlsConfig"]["ca"]["secret"]["key"].as<std::string>(), "ca.crt");
  const std::string server_name = endpoint["tlsConfig"]["serverName"].as<std::string>();
  const std::string path = endpoint["path"] ? endpoint["path"].as<std::string>() : "/metrics";
  const std::string port = std::to_string(daemon.port());
  CommandResult scrape;
  EXPECT_TRUE(Eventually([&] {
    scrape =
        Shell("curl -sS --fail --max-time 5 --cacert " + ca_file + " --resolve " + server_name +
              ":" + port + ":127.0.0.1 https://" + server_name + ":" + port + path);
    return scrape.exit_code == 0 && scrape.out.find(expected) != std::string::npos;
  })) << scrape.err
      << scrape.out.substr(0, 500) << daemon.process().Stderr();
  CommandResult probe;
  EXPECT_TRUE(Eventually([&] {
    probe =
        Shell("curl -sSk --fail --max-time 5 -o /dev/null https://127.0.0.1:" + port + "/readyz");
    return probe.exit_code == 0;
  })) << probe.err;
  const CommandResult plain =
      Shell("curl -sS --max-time 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:" + port + path);
  EXPECT_NE(plain.out, "200") << "plain HTTP to the TLS endpoint";
}

// Plays the overlay's engine, exporter and health check on this machine (see the file comment).
void PlayOverlay(const std::string& overlay) {
  SCOPED_TRACE(overlay);
  const Rendered rendered = Render(kDeploy + "/overlays/" + overlay);
  CheckLayout(rendered, "vigil", EngineTransport::kMutualTls);
  CheckCertManagerChain(rendered);
  TempDir dir;
  TestPki pki(dir.path().string(), "vigil-ca");
  const auto secrets = IssueCertificates(rendered, pki);
  auto pod = [&](const std::string& name) {
    const YAML::Node* daemonset = rendered.Find("DaemonSet", name);
    EXPECT_NE(daemonset, nullptr) << name;
    return LocalPod(rendered, *daemonset, secrets, pki.ca_file(), dir.File(name));
  };

  // The engine on its certificate, CA and config; the probe the kubelet would run.
  const LocalPod engine_pod = pod("vigil-engine");
  for (const char* token : {"--inject-token-file", "--insecure-token-over-plaintext"}) {
    EXPECT_THAT(engine_pod.Args({token}), ::testing::IsEmpty()) << "no token over TLS";
  }
  EngineProcess engine(dir.path().string(), kNodeName, 2, engine_pod.Args({"--tls-", "--config="}));
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  EXPECT_THAT(engine.process->Stderr(), HasSubstr("(mutual TLS)"));
  std::vector<std::string> probe =
      Strings(engine_pod.container()["livenessProbe"]["exec"]["command"]);
  probe[0] = VigilBinary();
  for (std::string& arg : probe) {
    arg = ReplaceAll(arg, "unix:///run/vigil/vigil.sock", engine.unix_address);
  }
  const CommandResult probed = Shell(Quoted(probe));
  EXPECT_EQ(probed.exit_code, 0) << probed.err;

  // The clients dial the Service by name; here the name is the server name to check.
  const std::string address = "tls://" + engine.tcp_address;
  auto client_tls = [](const LocalPod& client) {
    std::vector<std::string> args = client.Args({"--tls-"});
    EXPECT_EQ(args.size(), 3u) << "CA, certificate and key";
    args.push_back("--tls-server-name=vigil-engine");
    return args;
  };
  const LocalPod exporter_pod = pod("vigil-exporter");
  const LocalPod check_pod = pod("vigil-healthcheck");

  // Each client certificate may do what the engine's config grants it: the exporter reads and
  // may not inject; the health check may reset a GPU, and the audit names it.
  std::vector<std::string> inject = {VigilBinary(), "inject", "xid",      "--gpu", "0",
                                     "--xid",       "79",     "--engine", address};
  for (const std::string& arg : client_tls(exporter_pod)) inject.push_back(arg);
  const CommandResult refused = Shell(Quoted(inject));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("spiffe://cluster.local/ns/vigil/sa/vigil-exporter may not "
                                     "inject"));
  std::vector<std::string> reset = {VigilBinary(), "reset-gpu", "--gpu", "1", "--engine", address};
  for (const std::string& arg : client_tls(check_pod)) reset.push_back(arg);
  const CommandResult reset_done = Shell(Quoted(reset));
  EXPECT_EQ(reset_done.exit_code, 0) << reset_done.err << engine.process->Stderr();
  const CommandResult events =
      Shell(Quoted({VigilBinary(), "events", "--no-follow", "--engine", engine.unix_address}));
  EXPECT_THAT(events.out,
              HasSubstr("certificate spiffe://cluster.local/ns/vigil/sa/vigil-healthcheck"));

  // The endpoints serve HTTPS from their web config, fed over mutual TLS, and answer the
  // ServiceMonitors' scrapes.
  std::vector<std::string> exporter_args = client_tls(exporter_pod);
  for (const std::string& arg : exporter_pod.Args({"--web-config-file="})) {
    exporter_args.push_back(arg);
  }
  HttpDaemon exporter("exporter", dir.path().string(), address, exporter_args);
  ASSERT_NE(exporter.port(), 0) << exporter.process().Stderr();
  EXPECT_THAT(exporter.process().Stderr(), HasSubstr("listening on https://"));
  CheckScrape(rendered, "vigil-exporter", exporter, pki.ca_file(), "DCGM_FI_DEV_GPU_TEMP{");

  std::vector<std::string> check_args = client_tls(check_pod);
  for (const std::string& arg : check_pod.Args({"--web-config-file="})) check_args.push_back(arg);
  check_args.push_back("--node-name=" + kNodeName);  // the downward API's NODE_NAME
  HttpDaemon check("healthcheck", dir.path().string(), address, check_args);
  ASSERT_NE(check.port(), 0) << check.process().Stderr();
  CheckScrape(rendered, "vigil-healthcheck", check, pki.ca_file(), "vigil_healthcheck_");
}

TEST(DeployTlsTest, TheTlsOverlaysPiecesFitWhenPlayedWithTheBinary) { PlayOverlay("tls"); }

TEST(DeployTlsTest, RemediationWithTlsResetsWithTheHealthChecksCertificateAndNoToken) {
  PlayOverlay("remediation-tls");
  const Rendered rendered = Render(kDeploy + "/overlays/remediation-tls");
  const YAML::Node* check = rendered.Find("DaemonSet", "vigil-healthcheck");
  ASSERT_NE(check, nullptr);
  const std::vector<std::string> args = Strings(Container(*check)["args"]);
  EXPECT_THAT(args, Contains("--remediation"));
  EXPECT_THAT(args, Not(Contains(HasSubstr("token"))));
  for (const YAML::Node& volume : (*check)["spec"]["template"]["spec"]["volumes"]) {
    EXPECT_FALSE(volume["secret"] &&
                 volume["secret"]["secretName"].as<std::string>() == "vigil-inject-token")
        << "the token's Secret need not exist";
  }

  // The remediator serves HTTPS from its web config and answers its ServiceMonitor's scrape
  // (against the fake API server, as its in-cluster credentials would point).
  TempDir dir;
  std::string error;
  auto api = FakeKubeApi::Start(dir.path().string(), &error);
  ASSERT_NE(api, nullptr) << error;
  TestPki pki(dir.path().string(), "vigil-ca");
  const auto secrets = IssueCertificates(rendered, pki);
  const YAML::Node* deployment = rendered.Find("Deployment", "vigil-remediator");
  ASSERT_NE(deployment, nullptr);
  const LocalPod pod(rendered, *deployment, secrets, pki.ca_file(), dir.File("vigil-remediator"));
  std::vector<std::string> remediator_args = {
      "--service-account-dir", api->credentials().service_account_dir, "--identity", "r1"};
  for (const std::string& arg : pod.Args({"--"})) {
    if (arg.starts_with("--listen=")) continue;  // the daemon picks a free port
    remediator_args.push_back(ReplaceAll(arg, "$(POD_NAMESPACE)", "vigil"));
  }
  HttpDaemon remediator("remediator", dir.path().string(), "", remediator_args);
  ASSERT_NE(remediator.port(), 0) << remediator.process().Stderr();
  CheckScrape(rendered, "vigil-remediator", remediator, pki.ca_file(), "vigil_remediator_");
}

}  // namespace
}  // namespace vigil::testing
