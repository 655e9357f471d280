// Engine benchmarks (`make bench`): the cost of ingesting a sample, of a whole tick inside the
// engine, of fanning ticks out to 100 subscribers over the Unix socket, and the engine's memory
// with a full hour of history; and the nvml backend's own cost per tick on the fake libnvidia-ml.
// Goals (issue 2): ingest <= 100 ns/sample, tick of 8 GPUs x all fields <= 100 us, fan-out
// p99 <= 5 ms, RSS <= 40 MiB; (issue 7) nvml overhead per tick of 8 GPUs x all fields <= 100 us.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <grpc/grpc.h>
#include <time.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <thread>

#include "backend/deadline_backend.h"
#include "backend/nvml_backend.h"
#include "backend/sim_backend.h"
#include "client/engine_client.h"
#include "engine/engine.h"
#include "engine/tick_loop.h"
#include "exporter/pod_usage.h"
#include "exporter/render.h"
#include "fields/catalogue.h"
#include "network/fake_sysfs.h"
#include "network/monitor.h"
#include "reference/packed_history.h"
#include "sampling/history.h"
#include "server/server.h"
#include "testing/temp_dir.h"
#ifdef VIGIL_BENCH_NVML
#include "fake_nvml/script.h"
#endif

namespace vigil {
namespace {

// A backend whose reads cost (almost) nothing: every field answers a constant of its type, so a
// tick's measured cost is the engine's own.
class ConstantBackend : public Backend {
 public:
  // `processes`: the compute processes each GPU lists (with memory and SM share).
  explicit ConstantBackend(uint32_t gpus, uint32_t processes = 0) : processes_(processes) {
    for (uint32_t i = 0; i < gpus; ++i) {
      gpus_.push_back({.index = i,
                       .uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i),
                       .name = "NVIDIA H100 80GB HBM3",
                       .driver_version = "580.82.07"});
    }
  }
  std::string_view name() const override { return "constant"; }
  const std::vector<GpuIdentity>& gpus() const override { return gpus_; }
  absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time,
                    absl::Span<FieldValue> out) override {
    for (size_t i = 0; i < fields.size(); ++i) {
      switch (FindField(fields[i])->type) {
        case FieldType::kInt64:
          out[i] = FieldValue::Int(gpu * 1000 + fields[i]);
          break;
        case FieldType::kDouble:
          out[i] = FieldValue::Double(gpu + 0.5);
          break;
        case FieldType::kString:
          out[i] = FieldValue::String(gpus_[gpu].uuid);
          break;
      }
    }
    return absl::OkStatus();
  }
  void StartEvents(EventSink*) override {}
  void StopEvents() override {}
  absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) override {
    std::vector<GpuProcess> processes;
    for (uint32_t i = 0; i < processes_; ++i) {
      processes.push_back(
          {.pid = gpu * 1000 + i, .used_memory_bytes = (i + 1ull) << 28, .sm_util = i * 5 % 100});
    }
    return processes;
  }
  absl::StatusOr<std::string> ResetGpu(uint32_t) override {
    return absl::UnimplementedError("the benchmark's backend does not reset");
  }

 private:
  std::vector<GpuIdentity> gpus_;
  uint32_t processes_ = 0;
};

EngineConfig EveryFieldEvery(absl::Duration interval) {
  EngineConfig config;
  config.tick_interval = interval;
  for (const FieldInfo& field : AllFields()) config.interval_overrides[field.id] = interval;
  return config;
}

std::vector<FieldType> CatalogueTypes() {
  std::vector<FieldType> types;
  for (const FieldInfo& field : AllFields()) types.push_back(field.type);
  return types;
}

// An hour of the simulator's telemetry (8 GPUs, every field, every second), read once so that
// the history benchmarks measure the store, not the simulator: values[tick][gpu][field index].
struct SimHour {
  std::vector<FieldType> types = CatalogueTypes();
  std::vector<std::vector<std::vector<FieldValue>>> values;
  SimHour() {
    std::vector<FieldId> ids;
    for (const FieldInfo& field : AllFields()) ids.push_back(field.id);
    auto sim = SimBackend::Create({.gpu_count = 8, .seed = 1});
    absl::Time now = absl::FromUnixSeconds(1'800'000'000);
    for (int tick = 0; tick < 3600; ++tick) {
      auto& gpus = values.emplace_back(8, std::vector<FieldValue>(ids.size()));
      now += absl::Seconds(1);
      for (uint32_t gpu = 0; gpu < 8; ++gpu) {
        (void)(*sim)->Read(gpu, ids, now, absl::MakeSpan(gpus[gpu]));
      }
    }
  }
  static const SimHour& Get() {
    static const SimHour* hour = new SimHour();
    return *hour;
  }
  // Appends tick `tick` (of the hour, repeated) to `store` as seq `seq`.
  template <typename Store>
  void Feed(Store& store, uint64_t seq, absl::Time now) const {
    store.BeginTick(seq, now);
    const auto& gpus = values[seq % values.size()];
    for (uint32_t gpu = 0; gpu < 8; ++gpu) {
      for (size_t f = 0; f < types.size(); ++f) store.Append(gpu, f, gpus[gpu][f]);
    }
    store.Trim(now);
  }
};

// Ingest cost per sample of the compressed store on the simulator's values (goal <= 100 ns).
void BM_HistoryIngest(benchmark::State& state) {
  const SimHour& hour = SimHour::Get();
  HistoryStore store(8, hour.types,
                     std::vector<absl::Duration>(hour.types.size(), absl::Seconds(1)),
                     absl::Hours(1));
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  uint64_t seq = 0;
  int64_t samples = 0;
  for (auto _ : state) {
    hour.Feed(store, ++seq, now);
    now += absl::Seconds(1);
    samples += 8 * static_cast<int64_t>(hour.types.size());
  }
  state.SetItemsProcessed(samples);
  state.counters["ns_per_sample"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_HistoryIngest);

// Bytes per sample after an hour of the simulator's telemetry (8 GPUs x every field at 1 s): the
// encoded bit streams alone, and everything the store holds (block headers, the open blocks'
// spare capacity, the tick table); the uncompressed store it replaced for comparison. Goal <= 2.
void BM_HistoryBytesPerSample(benchmark::State& state) {
  const SimHour& hour = SimHour::Get();
  const std::vector<absl::Duration> intervals(hour.types.size(), absl::Seconds(1));
  for (auto _ : state) {
    HistoryStore store(8, hour.types, intervals, absl::Hours(24));
    PackedHistoryStore reference(8, hour.types, intervals, absl::Hours(24));
    absl::Time now = absl::FromUnixSeconds(1'800'000'000);
    for (uint64_t seq = 1; seq <= hour.values.size(); ++seq) {
      now += absl::Seconds(1);
      hour.Feed(store, seq, now);
      hour.Feed(reference, seq, now);
    }
    const double samples = static_cast<double>(store.sample_count());
    state.counters["samples"] = samples;
    state.counters["encoded_bytes_per_sample"] =
        static_cast<double>(store.encoded_bytes()) / samples;
    state.counters["held_bytes_per_sample"] = static_cast<double>(store.memory_bytes()) / samples;
    state.counters["uncompressed_bytes_per_sample"] =
        static_cast<double>(reference.memory_bytes()) / samples;
  }
}
BENCHMARK(BM_HistoryBytesPerSample)->Iterations(1)->Unit(benchmark::kMillisecond);

// GetHistory of one hour of one GPU x every field from an engine that holds 24 h of history:
// the decode cost of a day-sized store (per call, and per sample returned).
void BM_HistoryReadHourOfOneGpu(benchmark::State& state) {
  const SimHour& hour = SimHour::Get();
  HistoryStore store(8, hour.types,
                     std::vector<absl::Duration>(hour.types.size(), absl::Seconds(1)),
                     absl::Hours(24));
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  for (uint64_t seq = 1; seq <= 2 * hour.values.size(); ++seq) {
    now += absl::Seconds(1);
    hour.Feed(store, seq, now);
  }
  int64_t samples = 0;
  std::vector<HistorySample> out;
  for (auto _ : state) {
    for (size_t f = 0; f < hour.types.size(); ++f) {
      bool truncated = false;
      store.Read(3, f, now - absl::Hours(1), now).Decode(100000, &out, &truncated);
      samples += static_cast<int64_t>(out.size());
    }
  }
  state.SetItemsProcessed(samples);
  state.counters["ns_per_sample"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_HistoryReadHourOfOneGpu)->Unit(benchmark::kMillisecond);

// One tick of 8 GPUs with every field due; Args: the NIC ports the engine also reads (a fake sysfs
// tree of 8 InfiniBand rails and a dual-port RoCE HCA on a tmpfs-like temp dir), their state every
// tick and their counters every 30th, as the network policy's defaults do (0: no network source);
// and the compute processes each GPU lists (read with GPU utilisation, every tick here).
void BM_EngineTick(benchmark::State& state) {
  FakeClock clock;
  const EngineConfig config = EveryFieldEvery(absl::Seconds(1));
  auto engine =
      Engine::Create({.node_name = "bench", .config = config, .clock = &clock},
                     std::make_unique<ConstantBackend>(8, static_cast<uint32_t>(state.range(1))));
  testing::TempDir dir;
  const int ports = static_cast<int>(state.range(0));
  if (ports > 0) {
    testing::FakeSysfs sysfs(dir.File("sys"));
    for (int i = 0; i < ports - 2; ++i) {
      const std::string bus_id = fmt::format("0000:{:02x}:00.0", 0x20 + i);
      sysfs.AddPciFunction({"pci0000:00", bus_id}, 0);
      sysfs.AddHca(fmt::format("mlx5_{}", i), bus_id, {testing::FakeSysfs::Port{}});
    }
    sysfs.AddPciFunction({"pci0000:00", "0000:e1:00.0"}, 1);
    testing::FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
    sysfs.AddHca(fmt::format("mlx5_{}", ports - 2), "0000:e1:00.0", {roce, roce}, "ens8f0np0");
    auto reader = network::SysfsPorts::Open(Env::Default(), sysfs.root());
    std::vector<network::MappedPort> mapped;
    for (network::NicPort& port : reader->Discover().ports) {
      mapped.push_back({.port = std::move(port),
                        .attachment = {.gpus = {static_cast<uint32_t>(mapped.size() % 8)}}});
    }
    (*engine)->AddHealthSource(std::make_unique<network::NetworkMonitor>(
        *std::move(reader), std::move(mapped), config.network, 8));
  }
  for (auto _ : state) {
    clock.Advance(absl::Seconds(1));
    (*engine)->RunTick();
  }
  state.counters["fields"] = static_cast<double>(AllFields().size());
  state.counters["gpus"] = 8;
  state.counters["nic_ports"] = ports;
  state.counters["processes_per_gpu"] = static_cast<double>(state.range(1));
}
BENCHMARK(BM_EngineTick)->Args({0, 0})->Args({10, 0})->Args({0, 16})->Unit(benchmark::kMicrosecond);

#ifdef VIGIL_BENCH_NVML
double ProcessCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// The CPU cost of one clock_gettime(CLOCK_THREAD_CPUTIME_ID), a system call.
double ThreadClockCostUs() {
  constexpr int kReads = 100'000;
  timespec now;
  const double before = ProcessCpuSeconds();
  for (int i = 0; i < kReads; ++i) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return (ProcessCpuSeconds() - before) * 1e6 / kReads;
}

// The nvml backend on the fake libnvidia-ml with 8 GPUs and every field due every tick; Arg 1
// behind DeadlineBackend as `vigil engine --backend nvml` runs it, Arg 0 the backend alone, Arg 2
// as Arg 1 with every GPU in MIG mode, split into seven 1g.10gb instances (the MIG layout read
// every 5 s on the tick thread, each instance's fields every tick).
// cpu_us_per_tick: the process's CPU time per tick, every thread; in_library_us_per_tick: the
// CPU time inside the fake's entry points (it times each call on its thread's CPU clock);
// overhead_us_per_tick: the rest less the timing's own cost outside the timed windows (about one
// clock read per call) — Vigil's own cost on top of the library calls (goal <= 100 us). Real
// NVML calls cost far more than the fake's; scripts/gpu-check times those on a GPU node.
void BM_NvmlTick(benchmark::State& state) {
  testing::TempDir dir;
  testing::FakeNvmlScript script(dir.File("fake-nvml.json"), 8);
  const bool mig = state.range(0) == 2;
  if (mig) {
    for (int gpu = 0; gpu < 8; ++gpu) {
      nlohmann::json instances = nlohmann::json::array();
      for (int slot = 0; slot < 7; ++slot) {
        const int id = 7 + slot;
        instances.push_back(
            {{"gpu_instance", id},
             {"compute_instance", 0},
             {"profile", "1g.10gb"},
             {"uuid", fmt::format("MIG-{:08d}-0000-0000-0000-0000000000{:02d}", gpu, id)},
             {"placement", {slot, 1}},
             {"memory_total", 10ULL << 30},
             {"memory_used", 1ULL << 30},
             {"gpm", {{"1", 20.0}, {"2", 30.0}}}});
      }
      script.gpu(gpu)["mig"] = {{"mode", 1}, {"instances", instances}};
    }
    script.Write();
  }
  const std::string path = testing::FakeNvmlDir() + "/current/libnvidia-ml.so.1";
  auto library = OpenNvml(path);
  if (!library.ok()) {
    state.SkipWithError(std::string(library.status().message()).c_str());
    return;
  }
  // The fake's own clock of time spent in its entry points (same handle: dlopen counts refs).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto in_library_nanos = reinterpret_cast<long long (*)()>(dlsym(handle, "fakeNvmlCallNanos"));
  auto library_calls = reinterpret_cast<long long (*)()>(dlsym(handle, "fakeNvmlCalls"));
  const double clock_cost_us = ThreadClockCostUs();
  auto nvml = NvmlBackend::Create(std::move(*library));
  FakeClock clock;
  std::unique_ptr<Backend> backend = std::move(*nvml);
  if (state.range(0) >= 1) {
    backend = std::make_unique<DeadlineBackend>(std::move(backend), absl::Milliseconds(500));
  }
  auto engine = Engine::Create(
      {.node_name = "bench", .config = EveryFieldEvery(absl::Seconds(1)), .clock = &clock},
      std::move(backend));
  clock.Advance(absl::Seconds(1));
  (*engine)->RunTick();  // the first GPM sample; rates need two
  const double cpu_before = ProcessCpuSeconds();
  const long long library_before = in_library_nanos();
  const long long calls_before = library_calls();
  int64_t ticks = 0;
  for (auto _ : state) {
    clock.Advance(absl::Seconds(1));
    (*engine)->RunTick();
    ++ticks;
  }
  const double cpu_us = (ProcessCpuSeconds() - cpu_before) * 1e6 / static_cast<double>(ticks);
  const double library_us =
      static_cast<double>(in_library_nanos() - library_before) / 1e3 / static_cast<double>(ticks);
  const double calls = static_cast<double>(library_calls() - calls_before) / ticks;
  state.counters["cpu_us_per_tick"] = cpu_us;
  state.counters["in_library_us_per_tick"] = library_us;
  state.counters["library_calls_per_tick"] = calls;
  state.counters["overhead_us_per_tick"] = cpu_us - library_us - calls * clock_cost_us;
  state.counters["gpus"] = 8;
  state.counters["mig_instances"] = mig ? 8 * 7 : 0;
  state.counters["fields"] = static_cast<double>(AllFields().size());
  engine->reset();
  dlclose(handle);
}
// Arg 1: behind DeadlineBackend, as `vigil engine` runs it; 0: the backend alone; 2: as 1 with
// 8 x 7 MIG instances.
BENCHMARK(BM_NvmlTick)->Arg(1)->Arg(0)->Arg(2)->Unit(benchmark::kMicrosecond);
#endif

double Percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(fraction * values.size()))];
}

// 100 subscribers on the Unix socket, 8 GPUs x 30 fields, 10 ticks/s; latency from the tick's
// timestamp to the client holding the decoded message.
void BM_SubscriptionFanout(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  testing::TempDir dir;
  const std::string socket = dir.File("bench.sock");
  auto sim = SimBackend::Create({.gpu_count = 8, .seed = 1});
  auto engine = Engine::Create(
      {.node_name = "bench", .config = EveryFieldEvery(absl::Milliseconds(100))}, std::move(*sim));
  auto server = EngineServer::Start(engine->get(), {.unix_socket_path = socket});
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  TickLoop loop(engine->get(), absl::Milliseconds(100));
  loop.Start();

  v1::SubscribeRequest request;
  int added = 0;
  for (const FieldInfo& field : AllFields()) {
    if (field.type != FieldType::kString && added++ < 30) request.add_field_ids(field.id);
  }
  for (auto _ : state) {
    std::vector<std::vector<double>> latencies(subscribers);
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<EngineClient>> clients;
    std::vector<std::unique_ptr<TickSubscription>> streams;
    for (int i = 0; i < subscribers; ++i) {
      clients.push_back(std::move(*EngineClient::Create("unix://" + socket)));
      streams.push_back(clients.back()->Subscribe(request));
    }
    const absl::Time end = absl::Now() + absl::Seconds(10);
    for (int i = 0; i < subscribers; ++i) {
      threads.emplace_back([&, i] {
        bool first = true;
        while (absl::Now() < end) {
          auto event = streams[i]->Next();
          if (event.kind != TickSubscription::Event::kMessage) return;
          if (first) {  // the first message is the latest snapshot, not a fresh tick
            first = false;
            continue;
          }
          latencies[i].push_back(absl::ToDoubleMilliseconds(
              absl::Now() - absl::FromUnixMicros(event.message->timestamp_us())));
        }
      });
    }
    for (auto& thread : threads) thread.join();
    std::vector<double> all;
    for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    state.counters["deliveries"] = static_cast<double>(all.size());
    state.counters["p50_ms"] = Percentile(all, 0.50);
    state.counters["p99_ms"] = Percentile(all, 0.99);
    state.counters["max_ms"] = Percentile(all, 1.0);
    state.counters["tick_ms"] =
        (*engine)->stats().last_tick_duration_ns.load() / 1e6;  // includes handing out 100 writes
    streams.clear();
  }
  loop.Stop();
  (*server)->Shutdown(absl::Seconds(1));
}
BENCHMARK(BM_SubscriptionFanout)
    ->Arg(1)
    ->Arg(10)
    ->Arg(100)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

// Health evaluation of one tick: 8 GPUs, every system evaluated. Arg 0: healthy GPUs (energy,
// violation time and traffic counters moving, error counters still); arg 1: every GPU failing
// several rules at every tick (messages rebuilt, incidents updated) — the worst case.
void BM_HealthEvaluate(benchmark::State& state) {
  const bool failing = state.range(0) == 1;
  std::vector<const FieldInfo*> fields;
  std::vector<absl::Duration> intervals;
  for (const FieldInfo& field : AllFields()) {
    fields.push_back(&field);
    intervals.push_back(absl::Seconds(1));
  }
  auto layout = std::make_shared<const FieldLayout>(fields);
  std::vector<GpuIdentity> gpus;
  for (uint32_t i = 0; i < 8; ++i) gpus.push_back({.index = i, .uuid = "GPU-" + std::to_string(i)});
  HealthEvaluator health(DefaultHealthPolicy(), layout, gpus, intervals, nullptr, {});
  Snapshot snapshot;
  snapshot.gpu_count = 8;
  snapshot.layout = layout;
  snapshot.values.resize(8 * layout->size());
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::vector<HealthTransition> transitions;
  int64_t tick = 0;
  for (auto _ : state) {
    state.PauseTiming();  // building the snapshot is the engine's job, not health's
    ++tick;
    now += absl::Seconds(1);
    snapshot.seq = static_cast<uint64_t>(tick);
    snapshot.time = now;
    for (uint32_t gpu = 0; gpu < 8; ++gpu) {
      for (size_t i = 0; i < layout->size(); ++i) {
        const FieldInfo& field = layout->field(i);
        FieldValue value = field.type == FieldType::kDouble   ? FieldValue::Double(1)
                           : field.type == FieldType::kString ? FieldValue::String("x")
                           : field.cumulative && (failing || field.id == fid::kTotalEnergy ||
                                                  field.id == fid::kPowerViolation)
                               ? FieldValue::Int(tick)
                               : FieldValue::Int(field.id == fid::kPcieLinkGen          ? 5
                                                 : field.id == fid::kPcieLinkWidth      ? 16
                                                 : field.id == fid::kInforomConfigValid ? 1
                                                                                        : 0);
        snapshot.values[gpu * layout->size() + i] = {std::move(value), snapshot.seq, now};
      }
    }
    transitions.clear();
    state.ResumeTiming();
    benchmark::DoNotOptimize(health.Evaluate(snapshot, now, &transitions));
  }
}
BENCHMARK(BM_HealthEvaluate)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Time from an injected XID 79 to the FAIL transition arriving on a client's health stream over
// the Unix socket, with the default 1 s tick. Goal: within one tick interval + 10 ms.
void BM_Xid79ToHealthFail(benchmark::State& state) {
  testing::TempDir dir;
  const std::string socket = dir.File("bench.sock");
  auto sim = SimBackend::Create({.gpu_count = 8, .seed = 1});
  auto engine = Engine::Create({.node_name = "bench"}, std::move(*sim));
  auto server = EngineServer::Start(engine->get(), {.unix_socket_path = socket});
  TickLoop loop(engine->get(), absl::Seconds(1));
  loop.Start();
  auto client = std::move(*EngineClient::Create("unix://" + socket));
  auto stream = client->WatchHealth({});
  stream->Next();  // the current verdict
  // Past start-up: the first aligned tick may come up to 1.5 intervals after the immediate one.
  absl::SleepFor(absl::Seconds(2));
  const Principal principal{.transport = "bench", .description = "bench"};
  std::vector<double> latencies, after_tick;
  for (auto _ : state) {
    for (uint32_t gpu = 0; gpu < 8; ++gpu) {
      // Inject at a different point of the tick each time.
      absl::SleepFor(absl::Milliseconds(137 * (gpu + 1)));
      const absl::Time injected = absl::Now();
      (void)(*engine)->InjectXid({.gpu = gpu, .xid = 79}, principal);
      while (true) {
        auto event = stream->Next();
        if (event.kind != HealthSubscription::Event::kMessage) break;
        bool failed = false;
        for (const auto& transition : event.message->transitions()) {
          failed |= transition.gpu() == gpu && transition.to() == v1::HEALTH_STATUS_FAIL;
        }
        if (failed) {
          latencies.push_back(absl::ToDoubleMilliseconds(absl::Now() - injected));
          // Ticks fall on whole seconds: the part of the wait after the next tick started is
          // the engine's own delay (evaluation, fan-out, delivery).
          const absl::Time next_tick =
              absl::Ceil(injected - absl::UnixEpoch(), absl::Seconds(1)) + absl::UnixEpoch();
          after_tick.push_back(absl::ToDoubleMilliseconds(absl::Now() - next_tick));
          if (std::getenv("VIGIL_BENCH_VERBOSE") != nullptr) {
            fprintf(stderr, "xid79 gpu %u: %.1f ms (injected at +%lld ms into the second)\n", gpu,
                    latencies.back(), static_cast<long long>(absl::ToUnixMillis(injected) % 1000));
          }
          break;
        }
      }
    }
  }
  state.counters["samples"] = static_cast<double>(latencies.size());
  state.counters["mean_ms"] =
      latencies.empty()
          ? 0
          : std::accumulate(latencies.begin(), latencies.end(), 0.0) / latencies.size();
  state.counters["max_ms"] = Percentile(latencies, 1.0);
  state.counters["max_after_tick_ms"] = Percentile(after_tick, 1.0);
  state.counters["tick_ms"] = 1000;
  stream->Cancel();
  loop.Stop();
  (*server)->Shutdown(absl::Seconds(1));
}
BENCHMARK(BM_Xid79ToHealthFail)->Iterations(1)->Unit(benchmark::kSecond);

// One render of /metrics. Arg: GPUs; the second arg picks the counters: 0 = dcgm-exporter's
// default list, 1 = 40 numeric fields (the larger deployment the issue sizes); the third: MIG
// GPU instances per GPU (each GPU exported as its instances, as dcgm-exporter does); the fourth:
// compute processes per GPU, with --kubernetes-virtual-gpus and each GPU time-sliced by four pods
// (0: neither).
void BM_ExporterRender(benchmark::State& state) {
  const uint32_t gpu_count = static_cast<uint32_t>(state.range(0));
  const uint32_t mig_instances = static_cast<uint32_t>(state.range(2));
  const uint32_t processes = static_cast<uint32_t>(state.range(3));
  constexpr uint32_t kPodsPerGpu = 4;
  std::string csv(DefaultCountersCsv());
  if (state.range(1) == 1) {
    csv.clear();
    int added = 0;
    for (const FieldInfo& field : AllFields()) {
      if (field.type == FieldType::kString || added == 40) continue;
      csv += fmt::format("{}, {}, {}\n", field.name, field.cumulative ? "counter" : "gauge",
                         field.help);
      ++added;
    }
    csv += "DCGM_FI_DRIVER_VERSION, label, Driver Version\n";
  }
  auto counters = ParseCounters(csv, "bench");
  ExporterView view;
  view.engine_up = true;
  view.info.set_node_name("bench");
  view.tick.set_instance_id("0123456789abcdef0123456789abcdef");
  view.tick.set_seq(1234);
  for (uint32_t i = 0; i < gpu_count; ++i) {
    v1::Gpu& gpu = view.gpus.emplace_back();
    gpu.set_index(i);
    gpu.set_uuid(fmt::format("GPU-{:08x}-aaaa-bbbb-cccc-dddddddddddd", i));
    gpu.set_pci_bus_id(fmt::format("00000000:{:02X}:00.0", i));
    gpu.set_device(fmt::format("nvidia{}", i));
    gpu.set_name("NVIDIA H100 80GB HBM3");
    const auto add = [&](FieldId id, std::optional<uint32_t> gpu_instance) {
      v1::FieldValue* value = view.tick.add_values();
      value->set_gpu(i);
      value->set_field_id(id);
      value->set_status(v1::VALUE_STATUS_OK);
      if (gpu_instance) value->set_gpu_instance(*gpu_instance);
      switch (FindField(id)->type) {
        case FieldType::kInt64:
          value->set_int_value(1000 + id);
          break;
        case FieldType::kDouble:
          value->set_double_value(0.5 + id);
          break;
        case FieldType::kString:
          value->set_string_value("580.82.07");
          break;
      }
    };
    for (FieldId id : counters->FieldIds()) add(id, std::nullopt);
    // MIG: the GPU's instances, each with its own values of the per-instance fields, after the
    // GPU's (as the engine sends them).
    gpu.set_mig_mode(mig_instances > 0);
    for (uint32_t gi = 1; gi <= mig_instances; ++gi) {
      v1::MigInstance* instance = gpu.add_mig_instances();
      instance->set_gpu_instance_id(gi);
      instance->set_profile("1g.10gb");
      instance->set_uuid(fmt::format("MIG-{:08x}-{:04x}-bbbb-cccc-dddddddddddd", i, gi));
      for (FieldId id : counters->FieldIds()) {
        if (SampledPerMigInstance(id)) add(id, gi);
      }
    }
    // Shared: the pods the kubelet gave the GPU's replicas, and their processes.
    if (processes == 0) continue;
    v1::GpuProcesses* list = view.tick.add_processes();
    list->set_gpu(i);
    list->set_known(true);
    for (uint32_t pod = 0; pod < kPodsPerGpu; ++pod) {
      view.pods[gpu.uuid()].push_back(
          PodInfo{.pod = fmt::format("train-{}-{}", i, pod),
                  .namespace_name = "ml",
                  .container = "trainer",
                  .uid = fmt::format("6f1e0c3a-1b2c-4d5e-8f90-{:06x}{:06x}", i, pod),
                  .vgpu = std::to_string(pod)});
    }
    for (uint32_t p = 0; p < processes; ++p) {
      v1::GpuProcess* process = list->add_processes();
      process->set_pid(10'000 * (i + 1) + p);
      process->set_gpu_instance(-1);
      process->set_used_memory_bytes((1ll + p) << 30);
      process->set_sm_util(static_cast<int32_t>(p % 7));
      view.process_pods.uid_of[process->pid()] = view.pods[gpu.uuid()][p % kPodsPerGpu].uid;
    }
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text =
        RenderMetrics(*counters, view, {.hostname = "node-1", .virtual_gpus = processes > 0});
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["series_fields"] = static_cast<double>(counters->counters.size());
  state.counters["entities"] = gpu_count * std::max<uint32_t>(1, mig_instances);
}
// GPUs, counters (0: dcgm-exporter's defaults, 1: 40 fields), MIG instances per GPU.
BENCHMARK(BM_ExporterRender)
    ->Args({8, 0, 0, 0})
    ->Args({64, 1, 0, 0})
    ->Args({8, 0, 7, 0})
    ->Args({8, 1, 7, 0})
    ->Args({8, 0, 0, 16})
    ->Unit(benchmark::kMicrosecond);

// The exporter's lookup of the GPU processes' pods (--kubernetes-virtual-gpus) in a /proc tree,
// once per engine tick: 8 GPUs with Arg processes each, every one in a pod's cgroup (cgroup v2,
// systemd driver). On tmpfs or the page cache, as /proc is memory too.
void BM_ProcessPodLookup(benchmark::State& state) {
  const uint32_t per_gpu = static_cast<uint32_t>(state.range(0));
  testing::TempDir dir;
  google::protobuf::RepeatedPtrField<v1::GpuProcesses> lists;
  for (uint32_t gpu = 0; gpu < 8; ++gpu) {
    v1::GpuProcesses* list = lists.Add();
    list->set_gpu(gpu);
    list->set_known(true);
    for (uint32_t p = 0; p < per_gpu; ++p) {
      const uint32_t pid = 10'000 * (gpu + 1) + p;
      list->add_processes()->set_pid(pid);
      std::filesystem::create_directories(dir.File(std::to_string(pid)));
      std::ofstream(dir.File(fmt::format("{}/cgroup", pid))) << fmt::format(
          "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
          "6f1e0c3a_1b2c_4d5e_8f90_{:06x}{:06x}.slice/cri-containerd-{:064x}.scope\n",
          gpu, p % 4, pid);
    }
  }
  std::string error;
  size_t found = 0;
  for (auto _ : state) {
    ProcessPods pods = LookUpProcessPods(dir.path().string(), lists, &error);
    found = pods.uid_of.size();
    benchmark::DoNotOptimize(pods);
  }
  state.counters["processes"] = static_cast<double>(found);
}
BENCHMARK(BM_ProcessPodLookup)->Arg(16)->Unit(benchmark::kMicrosecond);

double RssMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

// The engine (sim, 8 GPUs, every field every second) after state.range(0) hours of ticks (its
// history kept for 24 h), driven by a fake clock so it takes seconds, not hours. Goal for 24 h:
// RSS growth <= 64 MiB.
void BM_EngineRssHoursOfHistory(benchmark::State& state) {
  for (auto _ : state) {
    const double before = RssMiB();
    FakeClock clock;
    auto sim = SimBackend::Create({.gpu_count = 8, .seed = 1});
    auto engine = Engine::Create(
        {.node_name = "bench", .config = EveryFieldEvery(absl::Seconds(1)), .clock = &clock},
        std::move(*sim));
    for (int64_t i = 0; i < 3600 * state.range(0); ++i) {
      clock.Advance(absl::Seconds(1));
      (*engine)->RunTick();
    }
    state.counters["process_rss_mib"] = RssMiB();
    state.counters["rss_growth_mib"] = RssMiB() - before;
    auto history = (*engine)->History({.gpus = {0}, .fields = {150}});
    state.counters["samples_per_series"] = static_cast<double>((*history)[0].samples.size());
  }
}
BENCHMARK(BM_EngineRssHoursOfHistory)->Arg(1)->Arg(24)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace vigil

int main(int argc, char** argv) {
  grpc_init();
  // As in the vigil binary: no per-lock deadlock-detection bookkeeping in production code paths.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
