// Benchmark of the way back after an engine restart (`make bench`), with the real binaries: the
// engine is killed (-9), stays away 2 s, and starts again on the same address; each round
// measures how long after the new engine's first tick the exporter serves GPU series of the new
// instance and the health check a verdict of it. 10 rounds; mean and max per client.
// Goal (issue 11): max <= 1 s after the new engine's first tick, on the Unix socket and on TCP.
#include <benchmark/benchmark.h>
#include <signal.h>

#include <algorithm>
#include <numeric>

#include "absl/time/clock.h"
#include "client/engine_client.h"
#include "daemon.h"
#include "fields/catalogue.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using testing::EngineProcess;
using testing::HttpDaemon;

// The time of the engine's first tick: its earliest sample of a field sampled every tick.
absl::StatusOr<absl::Time> FirstTick(const std::string& address) {
  auto client = EngineClient::Create(address);
  if (!client.ok()) return client.status();
  v1::GetHistoryRequest request;
  request.add_gpus(0);
  request.add_field_ids(fid::kGpuTemp);
  request.set_max_samples(1);
  auto history = (*client)->GetHistory(request);
  if (!history.ok()) return history.status();
  if (history->series_size() == 0 || history->series(0).samples_size() == 0) {
    return absl::UnavailableError("no tick yet");
  }
  return absl::FromUnixMicros(history->series(0).samples(0).timestamp_us());
}

std::string InstanceOf(const std::string& address) {
  auto client = EngineClient::Create(address);
  if (!client.ok()) return "";
  auto info = (*client)->GetEngineInfo();
  return info.ok() ? info->instance_id() : "";
}

// Polls every 5 ms until `served` holds; the time it first did, or InfiniteFuture after 10 s.
absl::Time FirstServed(const std::function<bool()>& served) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    if (served()) return absl::Now();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::InfiniteFuture();
}

void BM_ReconnectAfterRestart(benchmark::State& state) {
  const bool tcp = state.range(0) == 1;
  constexpr int kRounds = 10;
  testing::TempDir dir;
  const std::vector<std::string> listen = {"--listen",
                                           "127.0.0.1:" + std::to_string(testing::FreePort())};
  auto engine = std::make_unique<EngineProcess>(dir.path(), "bench", 2, listen);
  const std::string address = tcp ? engine->tcp_address : engine->unix_address;
  HttpDaemon exporter("exporter", dir.path(), address, {"--node-name", "bench"});
  HttpDaemon healthcheck("healthcheck", dir.path(), address, {"--node-name", "bench"});
  if (address.empty() || exporter.port() == 0 || healthcheck.port() == 0) {
    state.SkipWithError("could not start the engine, exporter or health check");
    return;
  }
  std::vector<double> exporter_ms, healthcheck_ms;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      engine->process->Signal(SIGKILL);
      engine->process->Wait();
      FirstServed(
          [&] { return exporter.Get("/metrics").find("vigil_engine_up 0") != std::string::npos; });
      absl::SleepFor(absl::Seconds(2));  // away long enough for backoffs to grow
      engine = std::make_unique<EngineProcess>(dir.path(), "bench", 2, listen);
      const std::string instance = InstanceOf(address);
      const absl::Time exporter_at = FirstServed([&] {
        const std::string body = exporter.Get("/metrics");
        return body.find(instance) != std::string::npos &&
               body.find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos;
      });
      const absl::Time healthcheck_at = FirstServed([&] {
        const nlohmann::json status = nlohmann::json::parse(healthcheck.Get("/status"), nullptr,
                                                            /*allow_exceptions=*/false);
        return status.is_object() && status["engine"]["instance_id"] == instance &&
               status["seq"].get<uint64_t>() >= 1;
      });
      const auto first_tick = FirstTick(address);
      if (instance.empty() || !first_tick.ok() || exporter_at == absl::InfiniteFuture() ||
          healthcheck_at == absl::InfiniteFuture()) {
        state.SkipWithError("a client did not come back within 10 s");
        return;
      }
      exporter_ms.push_back(absl::ToDoubleMilliseconds(exporter_at - *first_tick));
      healthcheck_ms.push_back(absl::ToDoubleMilliseconds(healthcheck_at - *first_tick));
    }
  }
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  state.counters["exporter_mean_ms"] = mean(exporter_ms);
  state.counters["exporter_max_ms"] = *std::max_element(exporter_ms.begin(), exporter_ms.end());
  state.counters["healthcheck_mean_ms"] = mean(healthcheck_ms);
  state.counters["healthcheck_max_ms"] =
      *std::max_element(healthcheck_ms.begin(), healthcheck_ms.end());
  state.SetLabel(tcp ? "tcp" : "unix socket");
}
BENCHMARK(BM_ReconnectAfterRestart)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace vigil
