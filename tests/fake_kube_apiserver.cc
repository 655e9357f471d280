// The fake Kubernetes API server (src/testing/fake_kube_api.h) as a process of its own, for
// scripts that need a cluster's API on one machine (`make drill`):
//   fake_kube_apiserver DIR NODE...
// writes its credentials (a self-signed certificate, a service account directory) under DIR,
// adds each NODE as a GPU node (nvidia.com/gpu.present=true), prints one line
//   KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=PORT SERVICE_ACCOUNT_DIR=DIR/...
// and serves until SIGTERM or SIGINT. Exit 2 when it cannot start.
#include <filesystem>
#include <iostream>

#include "common/signals.h"
#include "testing/fake_kube_api.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: fake_kube_apiserver DIR NODE...\n";
    return 2;
  }
  vigil::SignalWaiter signals;  // before the server's threads start
  std::string error;
  std::error_code ignored;  // an unusable DIR shows in Start()'s error
  std::filesystem::create_directories(argv[1], ignored);
  auto api = vigil::testing::FakeKubeApi::Start(argv[1], &error);
  if (api == nullptr || api->port() == 0) {
    std::cerr << "fake_kube_apiserver: cannot start: " << error << "\n";
    return 2;
  }
  for (int i = 2; i < argc; ++i) api->AddNode(argv[i], {{"nvidia.com/gpu.present", "true"}});
  std::cout << "KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=" << api->port()
            << " SERVICE_ACCOUNT_DIR=" << api->credentials().service_account_dir << std::endl;
  signals.Wait();
  return 0;
}
