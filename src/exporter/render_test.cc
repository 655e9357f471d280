// Golden tests of the exporter's text output and tests of the counters file parser.
#include "exporter/render.h"

#include <sstream>

#include "exporter/compat.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::FieldValue Int(uint32_t gpu, FieldId field, int64_t value) {
  v1::FieldValue out;
  out.set_gpu(gpu);
  out.set_field_id(field);
  out.set_status(v1::VALUE_STATUS_OK);
  out.set_int_value(value);
  return out;
}
v1::FieldValue Double(uint32_t gpu, FieldId field, double value) {
  v1::FieldValue out = Int(gpu, field, 0);
  out.set_double_value(value);
  return out;
}
v1::FieldValue String(uint32_t gpu, FieldId field, std::string value) {
  v1::FieldValue out = Int(gpu, field, 0);
  out.set_string_value(std::move(value));
  return out;
}
v1::FieldValue Unsupported(uint32_t gpu, FieldId field) {
  v1::FieldValue out;
  out.set_gpu(gpu);
  out.set_field_id(field);
  out.set_status(v1::VALUE_STATUS_NOT_SUPPORTED);
  return out;
}

Counters Parse(std::string_view csv) {
  auto counters = ParseCounters(csv, "test.csv");
  EXPECT_TRUE(counters.ok()) << counters.status();
  return *counters;
}

ExporterView TwoGpus() {
  ExporterView view;
  view.engine_up = true;
  view.info.set_node_name("n1");
  view.info.set_version("0.1.0");
  view.info.set_backend("sim");
  for (uint32_t i = 0; i < 2; ++i) {
    v1::Gpu& gpu = view.gpus.emplace_back();
    gpu.set_index(i);
    gpu.set_uuid(fmt::format("GPU-0000000{}-aaaa-bbbb-cccc-dddddddddddd", i));
    gpu.set_pci_bus_id(i == 0 ? "00000000:18:00.0" : "00000000:2A:00.0");
    gpu.set_device(fmt::format("nvidia{}", i));
    gpu.set_name("NVIDIA H100 80GB HBM3");
  }
  view.tick.set_instance_id("abc123");
  view.tick.set_seq(42);
  view.tick.mutable_counters()->set_gpu_read_failures(5);
  view.tick.mutable_counters()->set_gpu_read_timeouts(2);
  view.tick.mutable_counters()->set_xid_events(1);
  view.tick.mutable_counters()->set_persistence_pending(3);
  view.tick.mutable_counters()->set_persistence_lag_us(1'500'000);
  view.tick.mutable_counters()->set_persistence_failures(4);
  return view;
}

// The golden output of each dcgm-exporter release Vigil matches (--compat): 4.8.2's is what Vigil
// has always written; 4.8.3's differs from it in the node label's spelling alone (commit d5e5f51).
TEST(RenderTest, GoldenOutputInDcgmExportersShape) {
  for (const DcgmExporterRelease release :
       {DcgmExporterRelease::k4_8_2, DcgmExporterRelease::k4_8_3}) {
    const std::string label(HostnameLabelOf(release));
    SCOPED_TRACE(label);
    const Counters counters = Parse(R"(# comment
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_FAN_SPEED, gauge, Fan speed.
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
)");
    ExporterView view = TwoGpus();
    for (uint32_t gpu = 0; gpu < 2; ++gpu) {
      *view.tick.add_values() = Int(gpu, 150, 38 + gpu);
      *view.tick.add_values() = Double(gpu, 155, 75.5 + gpu);
      *view.tick.add_values() = Unsupported(gpu, 191);
      *view.tick.add_values() = String(gpu, 1, "580.82.07");
      *view.tick.add_values() = Int(gpu, 230, gpu == 1 ? 79 : 0);
    }
    RenderOptions options{.hostname_label = label, .hostname = "node-1"};
    const std::string text = RenderMetrics(counters, view, options);
    const std::string labels0 =
        "gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00."
        "0\","
        "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"," +
        label +
        "=\"node-1\","
        "DCGM_FI_DRIVER_VERSION=\"580.82.07\"";
    const std::string labels1 =
        "gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:2A:00."
        "0\","
        "device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\"," +
        label +
        "=\"node-1\","
        "DCGM_FI_DRIVER_VERSION=\"580.82.07\"";
    const std::string expected =
        // Ordered by field ID (150, 155, 191, 230), whatever the file's order; the unsupported fan
        // speed has no samples, so no HELP/TYPE either.
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        "DCGM_FI_DEV_GPU_TEMP{" +
        labels0 +
        "} 38\n"
        "DCGM_FI_DEV_GPU_TEMP{" +
        labels1 +
        "} 39\n"
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
        "DCGM_FI_DEV_POWER_USAGE{" +
        labels0 +
        "} 75.500000\n"
        "DCGM_FI_DEV_POWER_USAGE{" +
        labels1 +
        "} 76.500000\n"
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        "DCGM_FI_DEV_XID_ERRORS{" +
        labels0 +
        ",err_code=\"0\",err_msg=\"No Error\"} 0\n"
        "DCGM_FI_DEV_XID_ERRORS{" +
        labels1 +
        ",err_code=\"79\",err_msg=\"GPU has fallen off the bus\"} 79\n"
        "# HELP vigil_engine_up Whether the exporter holds fresh data from its engine (1) or not "
        "(0).\n"
        "# TYPE vigil_engine_up gauge\n"
        "vigil_engine_up 1\n"
        "# HELP vigil_engine_info The engine this exporter reads from.\n"
        "# TYPE vigil_engine_info gauge\n"
        "vigil_engine_info{node=\"n1\",instance_id=\"abc123\",version=\"0.1.0\",backend=\"sim\"} "
        "1\n"
        "# HELP vigil_engine_seq The engine tick these values come from (with instance_id, "
        "identifies the state).\n"
        "# TYPE vigil_engine_seq gauge\n"
        "vigil_engine_seq 42\n"
        "# HELP vigil_engine_gpu_read_failures_total Reads of a whole GPU that failed in the "
        "engine "
        "(lost, hung, ...).\n"
        "# TYPE vigil_engine_gpu_read_failures_total counter\n"
        "vigil_engine_gpu_read_failures_total 5\n"
        "# HELP vigil_engine_gpu_read_timeouts_total GPU reads in the engine that the driver did "
        "not "
        "answer in time.\n"
        "# TYPE vigil_engine_gpu_read_timeouts_total counter\n"
        "vigil_engine_gpu_read_timeouts_total 2\n"
        "# HELP vigil_engine_xid_events_total XIDs the engine received (injected ones included).\n"
        "# TYPE vigil_engine_xid_events_total counter\n"
        "vigil_engine_xid_events_total 1\n"
        "# HELP vigil_engine_xid_duplicates_total Real XIDs that both NVML's events and the kernel "
        "log reported, counted once.\n"
        "# TYPE vigil_engine_xid_duplicates_total counter\n"
        "vigil_engine_xid_duplicates_total 0\n"
        "# HELP vigil_engine_process_read_failures_total Compute process lists of a GPU that the "
        "engine could not read (per GPU and read).\n"
        "# TYPE vigil_engine_process_read_failures_total counter\n"
        "vigil_engine_process_read_failures_total 0\n"
        "# HELP vigil_engine_persistence_pending_records Health state records (FAIL incidents) not "
        "yet durable in the engine's state dir.\n"
        "# TYPE vigil_engine_persistence_pending_records gauge\n"
        "vigil_engine_persistence_pending_records 3\n"
        "# HELP vigil_engine_persistence_lag_seconds How long the oldest health state record not "
        "yet durable has waited.\n"
        "# TYPE vigil_engine_persistence_lag_seconds gauge\n"
        "vigil_engine_persistence_lag_seconds 1.500\n"
        "# HELP vigil_engine_persistence_failures_total Failed attempts to persist health state (a "
        "full or failing disk).\n"
        "# TYPE vigil_engine_persistence_failures_total counter\n"
        "vigil_engine_persistence_failures_total 4\n"
        "# HELP vigil_gpu_health_status The engine's health verdict per GPU and system: 0 pass, 10 "
        "warn, 20 fail, -1 unknown (no fresh data); injected=\"true\" while an injected fault (a "
        "drill) drives it.\n"
        "# TYPE vigil_gpu_health_status gauge\n";
    EXPECT_EQ(text, expected);
  }
}

TEST(RenderTest, LabelValuesAreEscapedAndHostnameSpellingSwitches) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  view.gpus.resize(1);
  view.gpus[0].set_name("Weird \"GPU\" \\ model\nname");
  *view.tick.add_values() = Int(0, 150, 40);
  const std::string text =
      RenderMetrics(counters, view, {.hostname_label = "hostname", .hostname = "n\"1"});
  EXPECT_THAT(text, HasSubstr("modelName=\"Weird \\\"GPU\\\" \\\\ model\\nname\""));
  EXPECT_THAT(text, HasSubstr(",hostname=\"n\\\"1\""));
  EXPECT_THAT(text, Not(HasSubstr("Hostname=")));
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(RenderTest, NvswitchErrorsAreCountedBySwitchAndCode) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, Not(HasSubstr("vigil_nvswitch_sxid_events_total"))) << "none seen: no series";
  view.sxid_counts[{
      .nvswitch = 1, .pci_bus_id = "00000000:06:00.0", .code = 20034, .fatal = true}] = 2;
  view.sxid_counts[{.nvswitch = 3, .pci_bus_id = "00000000:08:00.0", .code = 22013}] = 1;
  text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, HasSubstr("# TYPE vigil_nvswitch_sxid_events_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("vigil_nvswitch_sxid_events_total{nvswitch=\"1\",pci_bus_id=\"00000000:"
                        "06:00.0\",sxid=\"20034\",severity=\"fatal\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("vigil_nvswitch_sxid_events_total{nvswitch=\"3\",pci_bus_id=\"00000000:"
                        "08:00.0\",sxid=\"22013\",severity=\"non-fatal\"} 1\n"));
}

// The NIC ports, as node_exporter's infiniband collector names their series (device and port
// labels; the data counters in bytes, the rate in bytes per second), and which GPUs each serves.
TEST(RenderTest, NicPortsAreNodeExportersInfinibandSeries) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, Not(HasSubstr("node_infiniband"))) << "no ports: no series";
  v1::NicPort* port = view.tick.add_nic_ports();
  port->set_name("mlx5_3/1");
  port->set_link_layer("InfiniBand");
  port->set_pci_bus_id("0000:5e:00.0");
  port->add_gpus(3);
  port->set_attachment("pcie-switch");
  port->set_state_id(4);
  port->set_phys_state_id(5);
  port->set_rate_gbps(400);
  (*port->mutable_counters())["symbol_error"] = 7;
  (*port->mutable_counters())["port_xmit_data"] = 1000;
  v1::NicPort* unread = view.tick.add_nic_ports();
  unread->set_name("mlx5_8/1");
  unread->set_state_id(-1);
  unread->set_phys_state_id(-1);
  text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, HasSubstr("# TYPE node_infiniband_state_id gauge\n"
                              "node_infiniband_state_id{device=\"mlx5_3\",port=\"1\"} 4\n"
                              "# HELP node_infiniband_physical_state_id"));
  EXPECT_THAT(text,
              HasSubstr("node_infiniband_physical_state_id{device=\"mlx5_3\",port=\"1\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("node_infiniband_rate_bytes_per_second{device=\"mlx5_3\",port=\"1\"} "
                              "50000000000\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE node_infiniband_symbol_error_total counter\n"
                        "node_infiniband_symbol_error_total{device=\"mlx5_3\",port=\"1\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_3\","
                              "port=\"1\"} 4000\n"));
  EXPECT_THAT(text, Not(HasSubstr("node_infiniband_link_downed_total"))) << "not read: left out";
  EXPECT_THAT(text, Not(HasSubstr("device=\"mlx5_8\",port=\"1\"} -1"))) << "unread: no value";
  EXPECT_THAT(text, HasSubstr("vigil_nic_port_info{device=\"mlx5_3\",port=\"1\",link_layer="
                              "\"InfiniBand\",netdev=\"\",pci_bus_id=\"0000:5e:00.0\",gpus=\"3\","
                              "attachment=\"pcie-switch\"} 1\n"));
}

// A drill's status says injected="true" (alerts route it to a test receiver); a real incident at
// the same status takes the label away, so a drill never hides a real fault.
TEST(RenderTest, TheInjectedLabelMarksOnlyWhatADrillAloneDrives) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  v1::GpuHealth& gpu = *view.tick.mutable_health()->add_gpus();
  gpu.set_gpu(0);
  gpu.set_uuid("GPU-0");
  gpu.set_status(v1::HEALTH_STATUS_FAIL);
  v1::SystemHealth& driver = *gpu.add_systems();
  driver.set_system("driver");
  driver.set_status(v1::HEALTH_STATUS_FAIL);
  v1::HealthIncident& drill = *driver.add_incidents();
  drill.set_status(v1::HEALTH_STATUS_FAIL);
  drill.set_injected(true);
  std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, HasSubstr("vigil_gpu_health_status{gpu=\"0\",UUID=\"GPU-0\",system=\"driver\","
                              "injected=\"true\"} 20\n"));
  v1::HealthIncident& real = *driver.add_incidents();
  real.set_status(v1::HEALTH_STATUS_FAIL);
  text = RenderMetrics(counters, view, {});
  EXPECT_THAT(
      text, HasSubstr("vigil_gpu_health_status{gpu=\"0\",UUID=\"GPU-0\",system=\"driver\"} 20\n"));
}

TEST(RenderTest, EngineDownMeansNoGpuSeriesAtAll) {
  const Counters counters = Parse(DefaultCountersCsv());
  ExporterView view = TwoGpus();
  *view.tick.add_values() = Int(0, 150, 40);
  view.engine_up = false;
  const std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, Not(HasSubstr("DCGM_")));
  EXPECT_THAT(text, HasSubstr("vigil_engine_up 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("vigil_engine_info")));
}

TEST(RenderTest, ExporterMetricsXidClockEventsAndHealth) {
  const Counters counters = Parse(
      R"(DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID Errors within user-specified time window.
DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, Count of clock events within the time window.
DCGM_EXP_GPU_HEALTH_STATUS, gauge, DCGM reported health status
)");
  ExporterView view = TwoGpus();
  view.xid_counts[1] = {{79, 2}, {13, 1}};
  view.clock_event_counts[0] = {{"power_cap", 12}, {"gpu_idle", 3}};
  v1::HealthVerdict& health = *view.tick.mutable_health();
  for (uint32_t g = 0; g < 2; ++g) {
    v1::GpuHealth& gpu = *health.add_gpus();
    gpu.set_gpu(g);
    gpu.set_uuid(view.gpus[g].uuid());
    gpu.set_status(g == 1 ? v1::HEALTH_STATUS_FAIL : v1::HEALTH_STATUS_PASS);
    for (const char* name : {"pcie", "driver"}) {
      v1::SystemHealth& system = *gpu.add_systems();
      system.set_system(name);
      system.set_status(v1::HEALTH_STATUS_PASS);
      if (g == 1 && std::string(name) == "driver") {
        system.set_status(v1::HEALTH_STATUS_FAIL);
        v1::HealthIncident& incident = *system.add_incidents();
        incident.set_status(v1::HEALTH_STATUS_FAIL);
        incident.set_code("DCGM_FR_FALLEN_OFF_BUS");
      }
      if (g == 0 && std::string(name) == "pcie") system.set_status(v1::HEALTH_STATUS_UNKNOWN);
    }
  }
  const std::string text = RenderMetrics(counters, view, {});
  const std::string g0 =
      "gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00.0\","
      "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"";
  const std::string g1 =
      "gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:2A:00.0\","
      "device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\"";
  EXPECT_THAT(text,
              HasSubstr("DCGM_EXP_XID_ERRORS_COUNT{" + g0 + ",window_size_in_ms=\"300000\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_EXP_XID_ERRORS_COUNT{" + g1 +
                              ",window_size_in_ms=\"300000\",xid=\"13\"} 1\n"
                              "DCGM_EXP_XID_ERRORS_COUNT{" +
                              g1 + ",window_size_in_ms=\"300000\",xid=\"79\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("DCGM_EXP_CLOCK_EVENTS_COUNT{" + g0 +
                        ",clock_event=\"gpu_idle\",window_size_in_ms=\"300000\"} 3\n"
                        "DCGM_EXP_CLOCK_EVENTS_COUNT{" +
                        g0 + ",clock_event=\"power_cap\",window_size_in_ms=\"300000\"} 12\n"));
  EXPECT_THAT(text, Not(HasSubstr("DCGM_EXP_CLOCK_EVENTS_COUNT{gpu=\"1\"")));
  // UNKNOWN has no DCGM value: GPU 0's PCIE row is left out, never reported as 0.
  EXPECT_THAT(text, Not(HasSubstr("DCGM_EXP_GPU_HEALTH_STATUS{" + g0 +
                                  ",health_error_code=\"DCGM_FR_OK\",health_watch=\"PCIE\"}")));
  EXPECT_THAT(text, HasSubstr("DCGM_EXP_GPU_HEALTH_STATUS{" + g1 +
                              ",health_error_code=\"DCGM_FR_FALLEN_OFF_BUS\","
                              "health_watch=\"DRIVER\"} 20\n"));
  EXPECT_THAT(
      text, HasSubstr("DCGM_EXP_GPU_HEALTH_STATUS{" + g1 +
                      ",health_error_code=\"DCGM_FR_FALLEN_OFF_BUS\",health_watch=\"ALL\"} 20\n"));
  EXPECT_THAT(text, HasSubstr("vigil_gpu_health_status{gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-"
                              "cccc-dddddddddddd\",system=\"pcie\"} -1\n"));
  EXPECT_THAT(text, HasSubstr("system=\"driver\"} 20\n"));
}

TEST(RenderTest, PodLabelsAreAttributes) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  *view.tick.add_values() = Int(0, 150, 40);
  *view.tick.add_values() = Int(1, 150, 41);
  view.pods[view.gpus[1].uuid()] = {PodInfo{"train-0", "ml", "trainer"}};
  const std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, HasSubstr("modelName=\"NVIDIA H100 80GB HBM3\",container=\"trainer\","
                              "namespace=\"ml\",pod=\"train-0\"} 41\n"));
  EXPECT_THAT(text, HasSubstr("modelName=\"NVIDIA H100 80GB HBM3\"} 40\n"));
}

// dcgm-exporter's --kubernetes-enable-pod-uid: its attributes sorted, so pod_uid comes last, after
// err_code/err_msg and the pod's names; without the flag there is no pod_uid, and with it a pod
// whose UID is not known has pod_uid="" (as dcgm-exporter's).
TEST(RenderTest, PodUidIsTheLastAttributeWhenAsked) {
  const Counters counters = Parse("DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error.\n");
  ExporterView view = TwoGpus();
  *view.tick.add_values() = Int(0, 230, 79);
  *view.tick.add_values() = Int(1, 230, 0);
  view.pods[view.gpus[0].uuid()] = {
      PodInfo{"train-0", "ml", "trainer", "6f1e0c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6"}};
  view.pods[view.gpus[1].uuid()] = {PodInfo{"web", "default", "web", ""}};
  const std::string text = RenderMetrics(counters, view, {.hostname = "node-1", .pod_uid = true});
  EXPECT_THAT(text,
              HasSubstr("Hostname=\"node-1\",container=\"trainer\",err_code=\"79\","
                        "err_msg=\"GPU has fallen off the bus\",namespace=\"ml\","
                        "pod=\"train-0\",pod_uid=\"6f1e0c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6\"} 79\n"));
  EXPECT_THAT(text, HasSubstr(",namespace=\"default\",pod=\"web\",pod_uid=\"\"} 0\n"));
  EXPECT_THAT(RenderMetrics(counters, view, {.old_namespace = true, .pod_uid = true}),
              HasSubstr(",pod_name=\"train-0\",pod_namespace=\"ml\","
                        "pod_uid=\"6f1e0c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6\"} 79\n"));
  EXPECT_THAT(RenderMetrics(counters, view, {}), Not(HasSubstr("pod_uid")));
}

TEST(CountersTest, DefaultListIsDcgmExportersDefault) {
  const Counters counters = Parse(DefaultCountersCsv());
  std::vector<FieldId> ids;
  for (const Counter& counter : counters.counters) ids.push_back(counter.field->id);
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 100, 101, 140, 150, 155, 156, 202, 203, 204, 206, 207,
                                          230, 251, 252, 253, 393, 394, 395, 449, 526, 1001, 1004,
                                          1005, 1009, 1010));
  EXPECT_TRUE(counters.counters[0].is_label());
}

TEST(CountersTest, AcceptsCommentsSpacesAliasesAndExporterMetrics) {
  const Counters counters = Parse(R"(
  # an indented comment
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS , gauge , Legacy name, with a comma in the help
DCGM_EXP_P2P_STATUS, counter, P2P NvLink status
DCGM_EXP_GPU_HEALTH_STATUS, counter, "DCGM reported health status"
)");
  ASSERT_EQ(counters.counters.size(), 2u);
  EXPECT_EQ(counters.counters[0].field->id, 112u);
  EXPECT_EQ(counters.counters[0].name, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS");
  EXPECT_EQ(counters.counters[0].help, "Legacy name, with a comma in the help");
  EXPECT_EQ(counters.counters[1].help, "DCGM reported health status");
  ASSERT_EQ(counters.warnings.size(), 1u);
  EXPECT_THAT(counters.warnings[0], HasSubstr("test.csv:4: DCGM_EXP_P2P_STATUS"));
}

TEST(CountersTest, EachKindOfBadLineNamesTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"DCGM_FI_DEV_GPU_TEMP, gauge\n", "test.csv:1: "},
      {"\nDCGM_FI_DEV_GPU_TMP, gauge, x\n", "test.csv:2: unknown field 'DCGM_FI_DEV_GPU_TMP'"},
      {"DCGM_FI_DEV_GPU_TEMP, gage, x\n", "unknown Prometheus type 'gage'"},
      {"DCGM_FI_DEV_NAME, gauge, x\n", "string field: its type must be label"},
      {"DCGM_EXP_XID_ERRORS_COUNT, label, x\n", "a metric, not a label"},
      {"150, gauge, x\n", "unknown field '150'"},
  };
  for (const auto& [csv, message] : cases) {
    auto counters = ParseCounters(csv, "test.csv");
    ASSERT_FALSE(counters.ok()) << csv;
    EXPECT_THAT(std::string(counters.status().message()), HasSubstr(message)) << csv;
  }
}

// err_msg is dcgm-exporter 4.8.2's text for the code (internal/pkg/collector/xid_errors.go,
// xidErrCodeToText), whatever the engine's policy calls it: the series keeps its identity across
// a migration.
TEST(RenderTest, XidMessagesAreDcgmExportersTexts) {
  const Counters counters = Parse("DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error.\n");
  const std::pair<int64_t, std::string_view> expected[] = {
      {13, "Graphics Engine Exception"},
      {31, "GPU memory page fault"},
      {43, "GPU stopped processing"},
      {48, "Double Bit ECC Error"},
      {63, "ECC page retirement or row remapping recording event"},
      {79, "GPU has fallen off the bus"},
      {94, "Contained ECC error"},
      {95, "Uncontained ECC error"},
      {119, "GSP RPC Timeout"},
      {173, "Unknown Error"},  // past the end of its table
      {999, "Unknown Error"},
  };
  for (const auto& [xid, message] : expected) {
    ExporterView view = TwoGpus();
    *view.tick.add_values() = Int(0, 230, xid);
    EXPECT_THAT(RenderMetrics(counters, view, {}),
                HasSubstr(fmt::format("err_code=\"{}\",err_msg=\"{}\"}} {}\n", xid, message, xid)));
  }
}

// MIG, as dcgm-exporter 4.8.2 (tag 4.5.3-4.8.2) renders it in its default flex mode:
// internal/pkg/devicemonitoring/device_monitoring.go (monitorAllGPUInstances: a GPU holding
// instances is monitored as its GPU instances only), internal/pkg/collector/gpu_collector.go
// (toMetric: gpu, UUID, pci_bus_id, device and modelName are the parent GPU's; GPU_I_PROFILE the
// profile name, GPU_I_ID the GPU instance id), internal/pkg/rendermetrics/render_metrics.go (the
// template: GPU_I_PROFILE and GPU_I_ID after modelName and before Hostname, only on instance
// series), and DCGM 4.5.3's DcgmCacheManager (a GPU-level field of a GPU instance answers with
// its GPU's value). Pods: internal/pkg/transformation/kubernetes.go keys MIG devices by GPU and
// instance whatever --kubernetes-gpu-id-type says.
ExporterView MigGpus() {
  ExporterView view = TwoGpus();
  v1::Gpu& gpu0 = view.gpus[0];
  gpu0.set_mig_mode(true);
  const struct {
    uint32_t id;
    const char* profile;
  } instances[] = {{1, "2g.20gb"}, {2, "1g.10gb"}};
  for (const auto& [id, profile] : instances) {
    v1::MigInstance* instance = gpu0.add_mig_instances();
    instance->set_gpu_instance_id(id);
    instance->set_profile(profile);
    instance->set_uuid(fmt::format("MIG-0000000{}-1111-2222-3333-444444444444", id));
  }
  for (uint32_t gpu = 0; gpu < 2; ++gpu) {
    *view.tick.add_values() = Int(gpu, 150, 40 + gpu);
    *view.tick.add_values() = Int(gpu, 252, 30000 + gpu);
    *view.tick.add_values() = Double(gpu, 1001, 0.5);
    if (gpu == 0) {  // the instances' own values follow their GPU's, as the engine sends them
      for (uint32_t gi = 1; gi <= 2; ++gi) {
        v1::FieldValue fb = Int(0, 252, 1000 * gi);
        fb.set_gpu_instance(gi);
        *view.tick.add_values() = fb;
        v1::FieldValue gr = Double(0, 1001, 0.25 * gi);
        gr.set_gpu_instance(gi);
        *view.tick.add_values() = gr;
      }
    }
  }
  return view;
}

// A GPU held through a DRA ResourceClaim (the kubelet's dynamic_resources, attributed to the GPU
// the driver's slices say the device is): the pod labels and dcgm-exporter 4.8.3's dra_* labels,
// all sorted by name as its attributes are (container < dra_* < err_* < namespace < pod); a MIG
// instance held through a claim adds dra_mig_device_uuid and dra_mig_profile.
TEST(RenderTest, DraClaimLabelsInDcgmExportersShape) {
  const Counters counters = Parse("DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error.\n");
  ExporterView view = TwoGpus();
  *view.tick.add_values() = Int(0, 230, 0);
  *view.tick.add_values() = Int(1, 230, 48);
  view.pods[view.gpus[1].uuid()] = {PodInfo{.pod = "train-0",
                                            .namespace_name = "ml",
                                            .container = "trainer",
                                            .dra = DraAllocation{.claim_name = "train-0-gpu-x7k2p",
                                                                 .claim_namespace = "ml",
                                                                 .driver = "gpu.nvidia.com",
                                                                 .pool = "node-1",
                                                                 .device = "gpu-5"}}};
  const std::string text = RenderMetrics(counters, view, {.hostname = "node-1"});
  EXPECT_THAT(
      text,
      HasSubstr("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\",UUID=\"" + view.gpus[1].uuid() +
                "\",pci_bus_id=\"" + view.gpus[1].pci_bus_id() +
                "\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-1\","
                "container=\"trainer\",dra_claim_name=\"train-0-gpu-x7k2p\","
                "dra_claim_namespace=\"ml\",dra_device_name=\"gpu-5\","
                "dra_driver_name=\"gpu.nvidia.com\",dra_pool_name=\"node-1\",err_code=\"48\","
                "err_msg=\"Double Bit ECC Error\",namespace=\"ml\",pod=\"train-0\"} 48\n"));
  EXPECT_THAT(text, Not(HasSubstr("dra_mig")));

  ExporterView mig = MigGpus();
  const v1::MigInstance& instance = mig.gpus[0].mig_instances(1);
  mig.pods[instance.uuid()] = {PodInfo{.pod = "infer-0",
                                       .namespace_name = "serve",
                                       .container = "triton",
                                       .dra = DraAllocation{.claim_name = "infer-0-mig",
                                                            .claim_namespace = "serve",
                                                            .driver = "gpu.nvidia.com",
                                                            .pool = "node-1",
                                                            .device = "gpu-0-mig-1g10gb-19-6"}}};
  const Counters fb = Parse("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n");
  EXPECT_THAT(
      RenderMetrics(fb, mig, {.hostname = "node-1"}),
      HasSubstr("GPU_I_PROFILE=\"" + instance.profile() + "\",GPU_I_ID=\"" +
                std::to_string(instance.gpu_instance_id()) +
                "\",Hostname=\"node-1\",container=\"triton\",dra_claim_name=\"infer-0-mig\","
                "dra_claim_namespace=\"serve\",dra_device_name=\"gpu-0-mig-1g10gb-19-6\","
                "dra_driver_name=\"gpu.nvidia.com\",dra_mig_device_uuid=\"" +
                instance.uuid() + "\",dra_mig_profile=\"" + instance.profile() +
                "\",dra_pool_name=\"node-1\",namespace=\"serve\",pod=\"infer-0\"} 2000\n"));
}

int CountOf(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The GPU series alone: the text before Vigil's own metrics.
std::string GpuSeries(const std::string& text) {
  return text.substr(0, text.find("# HELP vigil_"));
}

v1::GpuProcess* AddProcess(v1::GpuProcesses* list, uint32_t pid, int64_t memory, int32_t sm_util,
                           int32_t gpu_instance = -1) {
  v1::GpuProcess* process = list->add_processes();
  process->set_pid(pid);
  process->set_used_memory_bytes(memory);
  process->set_sm_util(sm_util);
  process->set_gpu_instance(gpu_instance);
  return process;
}

constexpr int64_t kMiB = 1024 * 1024;

// --kubernetes-virtual-gpus on a GPU two pods share by time-slicing, as dcgm-exporter's #594
// writes it (internal/pkg/transformation/kubernetes.go: Process, createPerProcessMetrics,
// buildPodValueMap, buildIdlePodValues; process_metrics.go, at fb5e3dc): every series once per
// container with vgpu, the replica; DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_GPU_UTIL keep the GPU's own
// series and add one per container with its pod's sum (MiB floored per process; SM percent) and
// pod_uid; a GPU no pod holds keeps its series as they are.
TEST(RenderTest, GoldenSharedGpuPerPodSeriesInDcgmExportersShape) {
  const Counters counters = Parse(R"(DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
)");
  ExporterView view = TwoGpus();
  for (uint32_t gpu = 0; gpu < 2; ++gpu) {
    *view.tick.add_values() = Int(gpu, 150, 40 + gpu);
    *view.tick.add_values() = Int(gpu, 203, gpu == 0 ? 5 : 85);
    *view.tick.add_values() = Int(gpu, 252, gpu == 0 ? 0 : 2848);
    v1::GpuProcesses* list = view.tick.add_processes();
    list->set_gpu(gpu);
    list->set_known(true);
  }
  v1::GpuProcesses* gpu1 = view.tick.mutable_processes(1);
  AddProcess(gpu1, 100, 500 * kMiB + 900 * 1024, 30);  // pod a: 500 MiB floored
  AddProcess(gpu1, 101, 300 * kMiB, 45);               // pod a
  AddProcess(gpu1, 200, 1024 * kMiB, 10);              // pod b
  AddProcess(gpu1, 7, 1024 * kMiB, 0);                 // a host process: in the GPU's own only
  view.process_pods.uid_of = {{100, "uid-a"}, {101, "uid-a"}, {200, "uid-b"}};
  view.pods[view.gpus[1].uuid()] = {PodInfo{.pod = "train-a",
                                            .namespace_name = "ml",
                                            .container = "trainer",
                                            .uid = "uid-a",
                                            .vgpu = "0"},
                                    PodInfo{.pod = "serve-b",
                                            .namespace_name = "web",
                                            .container = "server",
                                            .uid = "uid-b",
                                            .vgpu = "1"}};
  const std::string l0 =
      "gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00.0\","
      "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-1\"";
  const std::string l1 =
      "gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:2A:00.0\","
      "device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-1\"";
  const std::string a = ",container=\"trainer\",namespace=\"ml\",pod=\"train-a\"";
  const std::string b = ",container=\"server\",namespace=\"web\",pod=\"serve-b\"";
  const std::string expected =
      "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
      "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      l0 +
      "} 40\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      l1 + a +
      ",vgpu=\"0\"} 41\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      l1 + b +
      ",vgpu=\"1\"} 41\n"
      "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
      "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
      "DCGM_FI_DEV_GPU_UTIL{" +
      l0 +
      "} 5\n"
      "DCGM_FI_DEV_GPU_UTIL{" +
      l1 +
      "} 85\n"
      "DCGM_FI_DEV_GPU_UTIL{" +
      l1 + a +
      ",pod_uid=\"uid-a\",vgpu=\"0\"} 75\n"
      "DCGM_FI_DEV_GPU_UTIL{" +
      l1 + b +
      ",pod_uid=\"uid-b\",vgpu=\"1\"} 10\n"
      "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
      "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
      "DCGM_FI_DEV_FB_USED{" +
      l0 +
      "} 0\n"
      "DCGM_FI_DEV_FB_USED{" +
      l1 +
      "} 2848\n"
      "DCGM_FI_DEV_FB_USED{" +
      l1 + a +
      ",pod_uid=\"uid-a\",vgpu=\"0\"} 800\n"
      "DCGM_FI_DEV_FB_USED{" +
      l1 + b + ",pod_uid=\"uid-b\",vgpu=\"1\"} 1024\n";
  const RenderOptions options{.hostname = "node-1", .virtual_gpus = true};
  EXPECT_EQ(GpuSeries(RenderMetrics(counters, view, options)), expected);

  // Pod b's process ends: pod b still holds its replica and uses nothing (dcgm-exporter's idle
  // value, buildIdlePodValues).
  gpu1->mutable_processes()->DeleteSubrange(2, 1);
  std::string text = RenderMetrics(counters, view, options);
  EXPECT_THAT(text,
              HasSubstr("DCGM_FI_DEV_FB_USED{" + l1 + b + ",pod_uid=\"uid-b\",vgpu=\"1\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("DCGM_FI_DEV_GPU_UTIL{" + l1 + b + ",pod_uid=\"uid-b\",vgpu=\"1\"} 0\n"));
  // Pod b ends: the kubelet lists it no more, and its series go.
  view.pods[view.gpus[1].uuid()].pop_back();
  text = RenderMetrics(counters, view, options);
  EXPECT_THAT(text, Not(HasSubstr("serve-b")));
  EXPECT_THAT(text,
              HasSubstr("DCGM_FI_DEV_FB_USED{" + l1 + a + ",pod_uid=\"uid-a\",vgpu=\"0\"} 800\n"));

  // Without --kubernetes-virtual-gpus: the last container's labels on the GPU's series, as
  // dcgm-exporter's default; no per-pod usage.
  view.pods[view.gpus[1].uuid()].push_back(
      PodInfo{.pod = "serve-b", .namespace_name = "web", .container = "server", .vgpu = "1"});
  text = GpuSeries(RenderMetrics(counters, view, {.hostname = "node-1"}));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED{" + l1 + b + "} 2848\n"));
  EXPECT_THAT(text, Not(HasSubstr("train-a")));
  EXPECT_THAT(text, Not(HasSubstr("vgpu")));
}

// What is not known is not served per pod — the GPU's own series stay, the pods' copies of the
// other fields stay — never a made-up value: a list the engine could not read (a dcgm-exporter
// would write 0 for every pod), a process whose pod cannot be told (any pod could be its), a
// driver that samples no per-process utilisation, a pod whose UID is not known yet.
TEST(RenderTest, SharedGpuUsageThatIsNotKnownIsNotServedPerPod) {
  const Counters counters = Parse(R"(DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
)");
  ExporterView base = TwoGpus();
  *base.tick.add_values() = Int(1, 150, 41);
  *base.tick.add_values() = Int(1, 203, 85);
  *base.tick.add_values() = Int(1, 252, 2848);
  v1::GpuProcesses* list = base.tick.add_processes();
  list->set_gpu(1);
  list->set_known(true);
  AddProcess(list, 100, 800 * kMiB, 75);
  AddProcess(list, 200, 1024 * kMiB, 10);
  base.process_pods.uid_of = {{100, "uid-a"}, {200, "uid-b"}};
  base.pods[base.gpus[1].uuid()] = {
      PodInfo{.pod = "train-a", .namespace_name = "ml", .container = "trainer", .uid = "uid-a"},
      PodInfo{.pod = "serve-b", .namespace_name = "web", .container = "server", .uid = "uid-b"}};
  const RenderOptions options{.hostname = "node-1", .virtual_gpus = true};
  const auto per_pod = [&](const ExporterView& view) {
    std::vector<std::string> lines;
    std::istringstream text(GpuSeries(RenderMetrics(counters, view, options)));
    for (std::string line; std::getline(text, line);) {
      if (line.find("pod_uid=") != std::string::npos)
        lines.push_back(line.substr(0, line.find('{')) + " " + line.substr(line.find("pod=")));
    }
    return lines;
  };
  ASSERT_EQ(per_pod(base).size(), 4u);

  ExporterView unread = base;
  unread.tick.mutable_processes(0)->set_known(false);
  EXPECT_THAT(per_pod(unread), ::testing::IsEmpty());
  const std::string text = RenderMetrics(counters, unread, options);
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED{gpu=\"1\","));
  EXPECT_THAT(text, HasSubstr("pod=\"train-a\"} 41\n"));  // the temperature's copies stay

  ExporterView untold = base;
  untold.process_pods.uid_of.erase(200);
  untold.process_pods.untold.insert(200);
  EXPECT_THAT(per_pod(untold), ::testing::IsEmpty());

  ExporterView gone = base;  // pid 200 ended before it was looked up: nobody's
  gone.process_pods.uid_of.erase(200);
  EXPECT_THAT(per_pod(gone),
              ::testing::ElementsAre("DCGM_FI_DEV_GPU_UTIL pod=\"train-a\",pod_uid=\"uid-a\"} 75",
                                     "DCGM_FI_DEV_GPU_UTIL pod=\"serve-b\",pod_uid=\"uid-b\"} 0",
                                     "DCGM_FI_DEV_FB_USED pod=\"train-a\",pod_uid=\"uid-a\"} 800",
                                     "DCGM_FI_DEV_FB_USED pod=\"serve-b\",pod_uid=\"uid-b\"} 0"));

  ExporterView no_sampling = base;  // a driver without nvmlDeviceGetProcessUtilization
  for (v1::GpuProcess& process : *no_sampling.tick.mutable_processes(0)->mutable_processes()) {
    process.set_sm_util(-1);
  }
  EXPECT_THAT(
      per_pod(no_sampling),
      ::testing::ElementsAre("DCGM_FI_DEV_FB_USED pod=\"train-a\",pod_uid=\"uid-a\"} 800",
                             "DCGM_FI_DEV_FB_USED pod=\"serve-b\",pod_uid=\"uid-b\"} 1024"));

  ExporterView no_uid = base;  // the API server has not told serve-b's UID yet
  no_uid.pods[no_uid.gpus[1].uuid()][1].uid.clear();
  EXPECT_THAT(per_pod(no_uid),
              ::testing::ElementsAre("DCGM_FI_DEV_GPU_UTIL pod=\"train-a\",pod_uid=\"uid-a\"} 75",
                                     "DCGM_FI_DEV_FB_USED pod=\"train-a\",pod_uid=\"uid-a\"} 800"));
}

// A MIG instance two pods share: the instance's framebuffer per pod from the processes on that
// instance; no per-pod utilisation (NVML samples whole GPUs only; dcgm-exporter writes 0 there).
TEST(RenderTest, SharedMigInstancePerPodFramebuffer) {
  const Counters counters =
      Parse("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n");
  ExporterView view = MigGpus();
  v1::GpuProcesses* list = view.tick.add_processes();
  list->set_gpu(0);
  list->set_known(true);
  AddProcess(list, 100, 1200 * kMiB, -1, 2);
  AddProcess(list, 200, 700 * kMiB, -1, 2);
  AddProcess(list, 300, 900 * kMiB, -1, 1);  // instance 1's
  view.process_pods.uid_of = {{100, "uid-a"}, {200, "uid-b"}, {300, "uid-b"}};
  const v1::MigInstance& instance = view.gpus[0].mig_instances(1);  // GPU instance 2
  view.pods[instance.uuid()] = {
      PodInfo{.pod = "infer-a", .namespace_name = "ml", .container = "triton", .uid = "uid-a"},
      PodInfo{.pod = "infer-b", .namespace_name = "ml", .container = "triton", .uid = "uid-b"}};
  const std::string text =
      GpuSeries(RenderMetrics(counters, view, {.hostname = "node-1", .virtual_gpus = true}));
  const std::string head = "GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"2\",Hostname=\"node-1\"";
  EXPECT_THAT(text, HasSubstr(head + "} 2000\n"));
  EXPECT_THAT(text, HasSubstr(head + ",container=\"triton\",namespace=\"ml\",pod=\"infer-a\","
                                     "pod_uid=\"uid-a\"} 1200\n"));
  EXPECT_THAT(text, HasSubstr(head + ",container=\"triton\",namespace=\"ml\",pod=\"infer-b\","
                                     "pod_uid=\"uid-b\"} 700\n"));
  EXPECT_EQ(CountOf(text, "pod_uid="), 2);
}

TEST(RenderTest, MigGpuInstancesHaveSeriesOfTheirOwnInDcgmExportersShape) {
  const Counters counters = Parse(R"(
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
)");
  const ExporterView view = MigGpus();
  const std::string gpu0 =
      "gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00.0\","
      "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",";
  const std::string gi1 = gpu0 + "GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"1\",Hostname=\"node-1\"";
  const std::string gi2 = gpu0 + "GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"2\",Hostname=\"node-1\"";
  const std::string gpu1 =
      "gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:2A:00.0\","
      "device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-1\"";
  const std::string expected =
      // GPU 0 has no series of its own: its instances replace it; its temperature is theirs.
      "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
      "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      gi1 +
      "} 40\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      gi2 +
      "} 40\n"
      "DCGM_FI_DEV_GPU_TEMP{" +
      gpu1 +
      "} 41\n"
      // The framebuffer and the activity are each instance's own.
      "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
      "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
      "DCGM_FI_DEV_FB_USED{" +
      gi1 +
      "} 1000\n"
      "DCGM_FI_DEV_FB_USED{" +
      gi2 +
      "} 2000\n"
      "DCGM_FI_DEV_FB_USED{" +
      gpu1 +
      "} 30001\n"
      "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n"
      "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" +
      gi1 +
      "} 0.250000\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" +
      gi2 +
      "} 0.500000\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" +
      gpu1 + "} 0.500000\n";
  const std::string text = RenderMetrics(counters, view, {.hostname = "node-1"});
  EXPECT_EQ(text.substr(0, text.find("# HELP vigil_engine_up")), expected);
}

TEST(RenderTest, MigPodsAreMatchedByTheirMigDeviceIdsWhateverTheGpuIdType) {
  const Counters counters =
      Parse("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n");
  for (const GpuIdType id_type : {GpuIdType::kUid, GpuIdType::kDeviceName}) {
    ExporterView view = MigGpus();
    // The mixed strategy's nvidia.com/mig-1g.10gb device: the MIG UUID of GPU instance 2.
    view.pods["MIG-00000002-1111-2222-3333-444444444444"] = {PodInfo{"infer-0", "ml", "triton"}};
    // GPU 1, whole: by UUID, or by device name as GKE's plugin names it.
    view.pods[id_type == GpuIdType::kUid ? "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd" : "nvidia1"] =
        {PodInfo{"train-0", "ml", "trainer"}};
    const std::string text =
        RenderMetrics(counters, view, {.hostname = "node-1", .gpu_id_type = id_type});
    EXPECT_THAT(text, HasSubstr("GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"2\",Hostname=\"node-1\","
                                "container=\"triton\",namespace=\"ml\",pod=\"infer-0\"} 2000\n"));
    EXPECT_THAT(text, HasSubstr("GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"1\",Hostname=\"node-1\"} "
                                "1000\n"))
        << "the other instance of the same GPU holds no pod";
    EXPECT_THAT(text, HasSubstr("Hostname=\"node-1\",container=\"trainer\",namespace=\"ml\","
                                "pod=\"train-0\"} 30001\n"));
  }
  // The old MIG-GPU-<uuid>/<gi>/<ci> ids and GKE's nvidia0/gi1 name the same instance.
  for (const std::string id : {"MIG-GPU-00000000-aaaa-bbbb-cccc-dddddddddddd/1/0", "nvidia0/gi1"}) {
    ExporterView view = MigGpus();
    view.pods[id] = {PodInfo{"p", "ns", "c"}};
    EXPECT_THAT(RenderMetrics(counters, view, {.hostname = "node-1"}),
                HasSubstr("GPU_I_ID=\"1\",Hostname=\"node-1\",container=\"c\",namespace=\"ns\","
                          "pod=\"p\"} 1000\n"))
        << id;
  }
}

TEST(RenderTest, AGpuInMigModeWithoutInstancesKeepsItsOwnSeries) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = MigGpus();
  view.gpus[0].clear_mig_instances();
  const std::string text = RenderMetrics(counters, view, {});
  EXPECT_THAT(text, HasSubstr("modelName=\"NVIDIA H100 80GB HBM3\"} 40\n"));
  EXPECT_THAT(text, Not(HasSubstr("GPU_I_ID")));
}

// dcgm-exporter's --use-old-namespace (its 1.x label names) and --no-hostname.
TEST(RenderTest, OldNamespaceLabelsAndNoHostname) {
  const Counters counters = Parse("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterView view = TwoGpus();
  *view.tick.add_values() = Int(1, 150, 41);
  view.pods[view.gpus[1].uuid()] = {PodInfo{"train-0", "ml", "trainer"}};
  EXPECT_THAT(
      RenderMetrics(counters, view, {.old_namespace = true}),
      HasSubstr("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",uuid=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\","
                "pci_bus_id=\"00000000:2A:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 "
                "80GB HBM3\",container_name=\"trainer\",pod_name=\"train-0\","
                "pod_namespace=\"ml\"} 41\n"));
  // No hostname: no Hostname label at all.
  EXPECT_THAT(RenderMetrics(counters, view, {.hostname = ""}), Not(HasSubstr("Hostname=")));
}

}  // namespace
}  // namespace vigil
