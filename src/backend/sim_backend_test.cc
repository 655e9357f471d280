// Tests for the simulated backend: determinism, identity, plausibility of the physics, counters.
#include "backend/sim_backend.h"

#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "fields/catalogue.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

std::vector<FieldId> AllBackendFields() {
  std::vector<FieldId> ids;
  for (const FieldInfo& field : AllFields()) {
    if (!field.from_events) ids.push_back(field.id);
  }
  return ids;
}

std::unique_ptr<SimBackend> MakeSim(uint32_t gpus, uint64_t seed) {
  auto sim = SimBackend::Create({.gpu_count = gpus, .seed = seed});
  EXPECT_TRUE(sim.ok());
  return std::move(*sim);
}

std::vector<FieldValue> ReadAll(SimBackend& sim, uint32_t gpu, absl::Time now,
                                const std::vector<FieldId>& fields) {
  std::vector<FieldValue> out(fields.size());
  EXPECT_TRUE(sim.Read(gpu, fields, now, absl::MakeSpan(out)).ok());
  return out;
}

TEST(SimBackendTest, RejectsBadGpuCounts) {
  EXPECT_FALSE(SimBackend::Create({.gpu_count = 0}).ok());
  EXPECT_FALSE(SimBackend::Create({.gpu_count = SimBackend::kMaxGpus + 1}).ok());
}

TEST(SimBackendTest, IdentitiesLookReal) {
  auto sim = MakeSim(8, 42);
  std::set<std::string> uuids, buses;
  const std::regex uuid_shape("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  const std::regex bus_shape("[0-9A-F]{8}:[0-9A-F]{2}:00\\.0");
  for (const GpuIdentity& gpu : sim->gpus()) {
    EXPECT_TRUE(std::regex_match(gpu.uuid, uuid_shape)) << gpu.uuid;
    EXPECT_TRUE(std::regex_match(gpu.pci_bus_id, bus_shape)) << gpu.pci_bus_id;
    EXPECT_EQ(gpu.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpu.serial.size(), 13u);
    EXPECT_EQ(gpu.device, "nvidia" + std::to_string(gpu.index));
    uuids.insert(gpu.uuid);
    buses.insert(gpu.pci_bus_id);
  }
  EXPECT_EQ(uuids.size(), 8u);
  EXPECT_EQ(buses.size(), 8u);
  // Same seed, same identities; another seed, other UUIDs.
  EXPECT_EQ(MakeSim(8, 42)->gpus()[3].uuid, sim->gpus()[3].uuid);
  EXPECT_NE(MakeSim(8, 43)->gpus()[3].uuid, sim->gpus()[3].uuid);
}

TEST(SimBackendTest, DeterministicWhateverIsReadInBetween) {
  const std::vector<FieldId> all = AllBackendFields();
  auto a = MakeSim(2, 7);
  auto b = MakeSim(2, 7);
  ReadAll(*a, 1, kStart, all);
  ReadAll(*b, 1, kStart, {fid::kGpuTemp});
  // `a` is read every second; `b` only reads one field, at odd times, in between.
  for (int s = 1; s <= 600; ++s) {
    ReadAll(*a, 1, kStart + absl::Seconds(s), all);
    if (s % 7 == 0) ReadAll(*b, 1, kStart + absl::Seconds(s) - absl::Milliseconds(350), {150});
  }
  const absl::Time end = kStart + absl::Seconds(601);
  EXPECT_EQ(ReadAll(*a, 1, end, all), ReadAll(*b, 1, end, all));
  auto c = MakeSim(2, 8);
  ReadAll(*c, 1, kStart, all);
  EXPECT_NE(ReadAll(*c, 1, end, all), ReadAll(*a, 1, end, all));
}

TEST(SimBackendTest, UnsupportedFieldsSayNotSupported) {
  auto sim = MakeSim(1, 1);
  auto values = ReadAll(*sim, 0, kStart, {fid::kFanSpeed, fid::kVgpuLicenseStatus, 9999});
  for (const FieldValue& value : values) EXPECT_EQ(value.status, ValueStatus::kNotSupported);
}

TEST(SimBackendTest, EveryCatalogueFieldHasTheCatalogueType) {
  auto sim = MakeSim(1, 1);
  const std::vector<FieldId> all = AllBackendFields();
  const auto values = ReadAll(*sim, 0, kStart, all);
  for (size_t i = 0; i < all.size(); ++i) {
    if (!values[i].ok()) continue;
    const FieldType type = FindField(all[i])->type;
    EXPECT_EQ(values[i].value.index(), static_cast<size_t>(type)) << all[i];
  }
}

// Runs a GPU for `hours` sampled every second and checks the physics hold throughout.
TEST(SimBackendTest, PhysicallyPlausibleOverHours) {
  auto sim = MakeSim(4, 3);
  const std::vector<FieldId> fields = {fid::kGpuUtil,
                                       fid::kPowerUsage,
                                       fid::kGpuTemp,
                                       fid::kSmClock,
                                       fid::kClocksEventReasons,
                                       fid::kTotalEnergy,
                                       fid::kFbUsed,
                                       fid::kFbFree,
                                       fid::kFbReserved,
                                       fid::kPcieReplayCounter,
                                       fid::kEccSbeVolTotal,
                                       fid::kPowerViolation,
                                       fid::kThermalViolation,
                                       fid::kNvlinkBandwidthTotal,
                                       fid::kMemoryTemp};
  for (uint32_t gpu = 0; gpu < 4; ++gpu) {
    std::map<FieldId, int64_t> last_counter;
    std::vector<double> utils, powers;
    double last_temp = -1;
    int busy_seconds = 0, idle_seconds = 0;
    for (int s = 0; s < 3 * 3600; ++s) {
      const auto v = ReadAll(*sim, gpu, kStart + absl::Seconds(s), fields);
      const double util = v[0].as_int(), power = v[1].as_double();
      const double temp = v[2].as_int();
      utils.push_back(util);
      powers.push_back(power);
      ASSERT_GE(util, 0);
      ASSERT_LE(util, 100);
      ASSERT_GE(power, 50);
      ASSERT_LE(power, 700.5);
      ASSERT_GE(temp, 20);
      ASSERT_LE(temp, 95);
      // Thermal lag: a second never moves the die more than a few degrees.
      if (last_temp >= 0) {
        ASSERT_LE(std::abs(temp - last_temp), 3) << "gpu " << gpu << " s " << s;
      }
      last_temp = temp;
      const int64_t reasons = v[4].as_int();
      if (util == 0) {
        ++idle_seconds;
        EXPECT_TRUE(reasons & clock_event::kGpuIdle);
      }
      if (util > 90) {
        ++busy_seconds;
        EXPECT_GT(v[3].as_int(), 1000) << "SM clock under load";
      }
      ASSERT_EQ(v[6].as_int() + v[7].as_int() + v[8].as_int(), 81559);
      // Field 449 is a rate (MB/s, as DCGM defines it), within NVLink 4's 900 GB/s.
      EXPECT_GE(v[13].as_int(), 0);
      EXPECT_LE(v[13].as_int(), 900'000'000'000 / 1024 / 1000);
      for (size_t c : {5u, 9u, 10u, 11u, 12u}) {
        const int64_t value = v[c].as_int();
        auto [it, fresh] = last_counter.emplace(fields[c], value);
        ASSERT_GE(value, it->second) << "counter " << fields[c] << " went back";
        it->second = value;
      }
    }
    EXPECT_GT(busy_seconds, 600) << "gpu " << gpu << " never trained";
    EXPECT_GT(idle_seconds + busy_seconds, 0);
    // Power tracks utilisation.
    double mu = 0, mp = 0;
    for (size_t i = 0; i < utils.size(); ++i) mu += utils[i], mp += powers[i];
    mu /= utils.size();
    mp /= powers.size();
    double cov = 0, vu = 0, vp = 0;
    for (size_t i = 0; i < utils.size(); ++i) {
      cov += (utils[i] - mu) * (powers[i] - mp);
      vu += (utils[i] - mu) * (utils[i] - mu);
      vp += (powers[i] - mp) * (powers[i] - mp);
    }
    EXPECT_GT(cov / std::sqrt(vu * vp), 0.8) << "gpu " << gpu;
  }
}

TEST(SimBackendTest, LostGpuFailsAloneAndComesBack) {
  auto sim = MakeSim(2, 1);
  std::vector<FieldValue> out(1);
  sim->SetGpuLost(1, true);
  EXPECT_EQ(sim->Read(1, {fid::kGpuTemp}, kStart, absl::MakeSpan(out)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(sim->Read(0, {fid::kGpuTemp}, kStart, absl::MakeSpan(out)).ok());
  sim->SetGpuLost(1, false);
  EXPECT_TRUE(sim->Read(1, {fid::kGpuTemp}, kStart, absl::MakeSpan(out)).ok());
}

TEST(SimBackendTest, AResetZeroesTheVolatileCountersAndEndsWhatWasSimulated) {
  auto sim = MakeSim(2, 1);
  const std::vector<FieldId> fields = {fid::kTotalEnergy, fid::kEccSbeVolTotal,
                                       fid::kEccSbeAggTotal};
  std::vector<FieldValue> before(3), after(3);
  const absl::Time later = kStart + absl::Hours(1);
  ASSERT_TRUE(sim->Read(0, fields, later, absl::MakeSpan(before)).ok());
  ASSERT_GT(before[0].as_int(), 0);
  sim->SetGpuLost(0, true);
  const GpuProcess trainer{.pid = 4242, .used_memory_bytes = 1ull << 30, .sm_util = 40};
  sim->SetProcesses(1, {trainer});
  ASSERT_EQ(sim->ReadProcesses(0).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(*sim->ReadProcesses(1), ::testing::ElementsAre(trainer));

  auto said = sim->ResetGpu(0);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_THAT(*said, ::testing::HasSubstr("was reset"));
  ASSERT_TRUE(sim->Read(0, fields, later, absl::MakeSpan(after)).ok()) << "no longer lost";
  EXPECT_LT(after[0].as_int(), before[0].as_int()) << "energy went back";
  EXPECT_EQ(after[1].as_int(), 0) << "volatile ECC zeroed";
  EXPECT_EQ(after[2].as_int(), before[2].as_int()) << "aggregate ECC kept (InfoROM)";
  EXPECT_THAT(*sim->ReadProcesses(1), ::testing::ElementsAre(trainer)) << "GPU 1 untouched";
  EXPECT_EQ(sim->resets(), 1);
}

// --sim-process: a pod's workload that starts and ends in sim time (the engine's clock as its
// reads give it), on a whole GPU with its SM share or on a MIG instance without one.
TEST(SimBackendTest, WorkloadsStartAndEndInSimTime) {
  auto trainer = ParseSimWorkload("1:4001:3072:30@10s-70s");
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto server = ParseSimWorkload("1:4101:1024");
  ASSERT_TRUE(server.ok()) << server.status();
  auto inference = ParseSimWorkload("0/1:5001:2048@5s");
  ASSERT_TRUE(inference.ok()) << inference.status();
  EXPECT_EQ(inference->process.gpu_instance, 1);
  EXPECT_EQ(inference->process.sm_util, std::nullopt) << "NVML samples none on an instance";
  auto sim = SimBackend::Create({.gpu_count = 2,
                                 .mig = {{.gpu = 0, .profiles = {"3g.40gb"}}},
                                 .workloads = {*trainer, *server, *inference}});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const std::vector<FieldId> fields = {fid::kGpuTemp};
  const auto at = [&](absl::Duration since) {
    for (uint32_t gpu = 0; gpu < 2; ++gpu) ReadAll(**sim, gpu, kStart + since, fields);
    std::vector<uint32_t> pids;
    for (uint32_t gpu = 0; gpu < 2; ++gpu) {
      const auto processes = (*sim)->ReadProcesses(gpu);
      EXPECT_TRUE(processes.ok()) << processes.status();
      for (const GpuProcess& process : processes.value_or(std::vector<GpuProcess>())) {
        pids.push_back(process.pid);
      }
    }
    return pids;
  };
  EXPECT_THAT(at(absl::ZeroDuration()), ::testing::ElementsAre(4101u));
  EXPECT_THAT(at(absl::Seconds(10)), ::testing::ElementsAre(5001u, 4001u, 4101u));
  auto processes = (*sim)->ReadProcesses(1);
  ASSERT_EQ(processes->size(), 2u);
  EXPECT_EQ((*processes)[0],
            (GpuProcess{.pid = 4001, .used_memory_bytes = 3072ull << 20, .sm_util = 30}));
  EXPECT_EQ((*processes)[1].sm_util, 0u) << "no share given: a process with no sample";
  EXPECT_THAT(at(absl::Seconds(70)), ::testing::ElementsAre(5001u, 4101u)) << "the trainer ended";
}

TEST(SimBackendTest, BadWorkloadsAreRefusedWithTheForm) {
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"1:4001", "not GPU:PID:MEMORY_MIB"},
           {"x:4001:10", "the GPU is not an index"},
           {"1:0:10", "the pid is not one"},
           {"1:4001:lots", "the memory is not a number of MiB"},
           {"1:4001:10:101", "not a percentage"},
           {"0/1:4001:10:30", "no SM share on a GPU instance"},
           {"1:4001:10@later", "the start is not a duration"},
           {"1:4001:10@70s-10s", "it ends before it starts"}}) {
    auto workload = ParseSimWorkload(text);
    ASSERT_FALSE(workload.ok()) << text;
    EXPECT_THAT(workload.status().message(), ::testing::HasSubstr(why)) << text;
    EXPECT_THAT(workload.status().message(), ::testing::HasSubstr("e.g. 2:4001:3072:30@10s-70s"));
  }
  const auto create = [](const std::string& text) {
    return SimBackend::Create({.gpu_count = 2, .workloads = {*ParseSimWorkload(text)}}).status();
  };
  EXPECT_THAT(create("2:4001:10").message(), ::testing::HasSubstr("there is no GPU 2"));
  EXPECT_THAT(create("0/3:4001:10").message(), ::testing::HasSubstr("GPU 0 has no GPU instance 3"));
  auto twice = SimBackend::Create(
      {.gpu_count = 2, .workloads = {*ParseSimWorkload("1:7:1"), *ParseSimWorkload("1:7:2")}});
  EXPECT_THAT(twice.status().message(), ::testing::HasSubstr("pid 7 is given twice on GPU 1"));
  EXPECT_THAT(create("1:7:90000").message(),
              ::testing::HasSubstr("90000 MiB is more than the 81559 MiB the GPU has"));
  SimOptions small_instance{.gpu_count = 1, .mig = {{.gpu = 0, .profiles = {"1g.10gb"}}}};
  auto layout = SimBackend::Create(small_instance);
  ASSERT_TRUE(layout.ok());
  const MigInstance& instance = (*layout)->gpus()[0].mig.instances.at(0);
  small_instance.workloads = {
      *ParseSimWorkload(fmt::format("0/{}:7:20000", instance.gpu_instance_id))};
  EXPECT_THAT(SimBackend::Create(small_instance).status().message(),
              ::testing::HasSubstr(fmt::format("20000 MiB is more than the {} MiB the GPU instance "
                                               "has",
                                               instance.memory_total_mib)));
}

// A GPU's framebuffer and utilisation hold its workloads: the model's values where they are
// larger (the same seed without workloads reads the same), the workloads' sums where they are not;
// what they add to the used memory is taken from the free memory.
TEST(SimBackendTest, AGpusMemoryAndUtilisationHoldItsWorkloads) {
  const std::vector<FieldId> fields = {fid::kFbUsed, fid::kFbFree, fid::kFbReserved, fid::kGpuUtil};
  auto twin = SimBackend::Create({.gpu_count = 2});
  ASSERT_TRUE(twin.ok());
  auto sim = SimBackend::Create({.gpu_count = 2,
                                 .workloads = {*ParseSimWorkload("1:4001:79000:60@10s-70s"),
                                               *ParseSimWorkload("1:4002:1000:50@10s-70s")}});
  ASSERT_TRUE(sim.ok());
  for (const absl::Duration since :
       {absl::ZeroDuration(), absl::Seconds(10), absl::Seconds(30), absl::Seconds(70)}) {
    const std::vector<FieldValue> model = ReadAll(**twin, 1, kStart + since, fields);
    const std::vector<FieldValue> read = ReadAll(**sim, 1, kStart + since, fields);
    const bool running = since >= absl::Seconds(10) && since < absl::Seconds(70);
    SCOPED_TRACE(absl::FormatDuration(since));
    ASSERT_TRUE(model[0].ok() && model[1].ok() && model[3].ok());
    EXPECT_EQ(read[0].as_int(),
              running ? std::max<int64_t>(80000, model[0].as_int()) : model[0].as_int());
    EXPECT_EQ(read[0].as_int() + read[1].as_int() + read[2].as_int(), 81559)
        << "used + free + reserved is the GPU's memory";
    EXPECT_EQ(read[3].as_int(), running ? 100 : model[3].as_int()) << "60 + 50, capped at 100";
    // GPU 0 runs none.
    EXPECT_EQ(ReadAll(**sim, 0, kStart + since, fields)[0].as_int(),
              ReadAll(**twin, 0, kStart + since, fields)[0].as_int());
  }
}

// On a MIG instance, the instance's framebuffer and the GPU's hold the instance's workloads.
TEST(SimBackendTest, AMigInstancesMemoryHoldsItsWorkloads) {
  const SimOptions options{.gpu_count = 1, .mig = {{.gpu = 0, .profiles = {"3g.40gb", "3g.40gb"}}}};
  auto twin = SimBackend::Create(options);
  ASSERT_TRUE(twin.ok());
  const std::vector<MigInstance> instances = (*twin)->gpus()[0].mig.instances;
  ASSERT_EQ(instances.size(), 2u);
  SimOptions with_workload = options;
  with_workload.workloads = {
      *ParseSimWorkload(fmt::format("0/{}:5001:39000", instances[1].gpu_instance_id))};
  auto sim = SimBackend::Create(with_workload);
  ASSERT_TRUE(sim.ok()) << sim.status();
  const std::vector<FieldId> fields = {fid::kFbUsed};
  const auto instance_used = [&](SimBackend& backend, const MigInstance& instance) {
    FieldValue out;
    EXPECT_TRUE(backend.ReadInstance(0, instance, fields, kStart, absl::MakeSpan(&out, 1)).ok());
    return out.as_int();
  };
  ReadAll(**twin, 0, kStart, fields);
  const int64_t gpu_used = ReadAll(**sim, 0, kStart, fields)[0].as_int();
  EXPECT_EQ(instance_used(**sim, instances[1]),
            std::max<int64_t>(39000, instance_used(**twin, instances[1])));
  EXPECT_EQ(instance_used(**sim, instances[0]), instance_used(**twin, instances[0]))
      << "the other instance runs none";
  EXPECT_GE(gpu_used, 39000) << "the GPU's memory holds its instances'";
}

class RecordingSink : public EventSink {
 public:
  void OnXid(const XidEvent& event) override { events.push_back(event); }
  std::vector<XidEvent> events;
};

TEST(SimBackendTest, XidsReachTheSinkOnlyWhileStarted) {
  auto sim = MakeSim(2, 1);
  RecordingSink sink;
  sim->RaiseXid(0, 79, kStart);
  sim->StartEvents(&sink);
  sim->RaiseXid(1, 48, kStart);
  sim->StopEvents();
  sim->RaiseXid(1, 13, kStart);
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].gpu, 1u);
  EXPECT_EQ(sink.events[0].xid, 48u);
  EXPECT_FALSE(sink.events[0].injected);
}

// The engine's OnXid takes its own locks and may read the backend: the sim delivers without its
// lock (it used to hold it, and this sink then waited for itself).
TEST(SimBackendTest, ASinkMayReadTheBackendFromOnXid) {
  auto sim = MakeSim(2, 1);
  class ReadingSink : public EventSink {
   public:
    explicit ReadingSink(SimBackend* sim) : sim_(sim) {}
    void OnXid(const XidEvent& event) override {
      sim_->SetGpuLost(event.gpu, true);
      resets_seen = sim_->resets();
    }
    int resets_seen = -1;

   private:
    SimBackend* sim_;
  };
  ReadingSink sink(sim.get());
  sim->StartEvents(&sink);
  sim->RaiseXid(1, 79, kStart);
  sim->StopEvents();
  EXPECT_EQ(sink.resets_seen, 0);
  std::vector<FieldValue> values(1);
  EXPECT_EQ(sim->Read(1, {fid::kGpuTemp}, kStart, absl::MakeSpan(values)).code(),
            absl::StatusCode::kUnavailable)
      << "the sink's SetGpuLost took effect";
}

}  // namespace
}  // namespace vigil
