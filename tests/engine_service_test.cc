// End-to-end tests of the engine's gRPC API over real sockets: a real server on a temporary Unix
// socket and on 127.0.0.1 port 0, real clients through the client library.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "engine_fixture.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using testing::EngineFixture;
using ::testing::HasSubstr;

// Reads ticks until one with seq >= `seq` arrives (or the stream fails).
v1::TickUpdate ReadUntil(TickSubscription& subscription, uint64_t seq) {
  while (true) {
    auto event = subscription.Next();
    EXPECT_EQ(event.kind, TickSubscription::Event::kMessage) << event.error;
    if (event.kind != TickSubscription::Event::kMessage) return {};
    if (event.message->seq() >= seq) return *event.message;
  }
}

TEST(EngineServiceTest, InfoAndDiscoveryOverBothTransports) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  for (const std::string& address : {fixture.unix_address(), fixture.tcp_address()}) {
    auto client = fixture.Client(address);
    auto info = client->GetEngineInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->node_name(), "n1");
    EXPECT_EQ(info->instance_id(), fixture.engine().identity().instance_id);
    EXPECT_EQ(info->backend(), "sim");
    EXPECT_EQ(info->gpu_count(), 4u);
    auto gpus = client->ListGpus();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    ASSERT_EQ(gpus->gpus_size(), 4);
    std::set<std::string> uuids;
    for (const auto& gpu : gpus->gpus()) uuids.insert(gpu.uuid());
    EXPECT_EQ(uuids.size(), 4u);
    auto fields = client->ListFields();
    ASSERT_TRUE(fields.ok());
    EXPECT_GT(fields->fields_size(), 60);
  }
}

TEST(EngineServiceTest, LatestValuesAndHistory) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.unix_address());
  auto subscription = client->Subscribe({});
  ReadUntil(*subscription, 5);
  v1::GetLatestValuesRequest latest_request;
  latest_request.add_gpus(2);
  latest_request.add_field_ids(150);
  latest_request.add_field_ids(54);
  auto latest = client->GetLatestValues(latest_request);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(latest->values_size(), 2);
  EXPECT_EQ(latest->values(0).status(), v1::VALUE_STATUS_OK);
  EXPECT_GT(latest->values(0).int_value(), 20);
  EXPECT_EQ(latest->values(1).string_value(), fixture.engine().gpus()[2].uuid);
  EXPECT_GE(latest->seq(), 5u);

  v1::GetHistoryRequest history_request;
  history_request.add_gpus(2);
  history_request.add_field_ids(155);
  auto history = client->GetHistory(history_request);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->series_size(), 1);
  const auto& samples = history->series(0).samples();
  ASSERT_GE(samples.size(), 4);  // one per tick, give or take a tick skipped under load
  EXPECT_EQ(samples.rbegin()->seq(), history->seq());
  for (int i = 1; i < samples.size(); ++i) {
    EXPECT_GT(samples[i].seq(), samples[i - 1].seq());
    EXPECT_GT(samples[i].timestamp_us(), samples[i - 1].timestamp_us());
    EXPECT_GT(samples[i].double_value(), 0);
  }
}

// A GPU's compute processes come with its latest values and in every tick of a subscription,
// over the real gRPC channel; unknown memory and SM share are -1; a process that ends is gone
// from the next tick's list.
TEST(EngineServiceTest, ProcessesComeWithTheLatestValuesAndEachTick) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  fixture.sim().SetProcesses(1, {{.pid = 4242, .used_memory_bytes = 3ull << 30, .sm_util = 55},
                                 {.pid = 4343, .gpu_instance = 2}});
  auto client = fixture.Client(fixture.unix_address());
  auto subscription = client->Subscribe({});
  ReadUntil(*subscription, 3);
  v1::GetLatestValuesRequest request;
  request.add_gpus(1);
  request.add_field_ids(203);
  auto latest = client->GetLatestValues(request);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(latest->processes_size(), 1) << "the requested GPU's";
  const v1::GpuProcesses& gpu1 = latest->processes(0);
  EXPECT_EQ(gpu1.gpu(), 1u);
  EXPECT_TRUE(gpu1.known());
  ASSERT_EQ(gpu1.processes_size(), 2);
  EXPECT_EQ(gpu1.processes(0).pid(), 4242u);
  EXPECT_EQ(gpu1.processes(0).used_memory_bytes(), 3ll << 30);
  EXPECT_EQ(gpu1.processes(0).sm_util(), 55);
  EXPECT_EQ(gpu1.processes(0).gpu_instance(), -1);
  EXPECT_EQ(gpu1.processes(1).used_memory_bytes(), -1) << "not said";
  EXPECT_EQ(gpu1.processes(1).sm_util(), -1);
  EXPECT_EQ(gpu1.processes(1).gpu_instance(), 2);

  fixture.sim().SetProcesses(1, {});
  bool gone = false;
  for (int tick = 0; tick < 20 && !gone; ++tick) {
    auto event = subscription->Next();
    ASSERT_EQ(event.kind, TickSubscription::Event::kMessage) << event.error;
    ASSERT_EQ(event.message->processes_size(), 4) << "every GPU's, for a subscription to all";
    gone = event.message->processes(1).known() && event.message->processes(1).processes().empty();
  }
  EXPECT_TRUE(gone);
}

TEST(EngineServiceTest, BadRequestsGetInvalidArgumentWithAClearMessage) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.tcp_address());
  v1::GetLatestValuesRequest bad_gpu;
  bad_gpu.add_gpus(7);
  auto latest = client->GetLatestValues(bad_gpu);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(latest.status().message()), HasSubstr("GPU 7 does not exist"));

  v1::GetHistoryRequest bad_field;
  bad_field.add_field_ids(4242);
  EXPECT_THAT(std::string(client->GetHistory(bad_field).status().message()),
              HasSubstr("unknown field ID 4242"));
  v1::GetHistoryRequest bad_range;
  bad_range.set_start_time_us(2'000'000'000'000'000);
  bad_range.set_end_time_us(1'000'000'000'000'000);
  EXPECT_EQ(client->GetHistory(bad_range).status().code(), absl::StatusCode::kInvalidArgument);
  v1::GetHistoryRequest negative;
  negative.set_start_time_us(-5);
  EXPECT_EQ(client->GetHistory(negative).status().code(), absl::StatusCode::kInvalidArgument);
  v1::GetHistoryRequest huge;
  huge.set_max_samples(10'000'000);
  EXPECT_EQ(client->GetHistory(huge).status().code(), absl::StatusCode::kInvalidArgument);
  v1::SubscribeRequest oversized;
  for (int i = 0; i < 5000; ++i) oversized.add_field_ids(150);
  auto subscription = client->Subscribe(oversized);
  auto event = subscription->Next();
  EXPECT_EQ(event.kind, TickSubscription::Event::kRejected);
  EXPECT_THAT(std::string(event.error.message()), HasSubstr("at most"));
}

TEST(EngineServiceTest, ClientsOnBothTransportsSeeIdenticalTicks) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto unix_client = fixture.Client(fixture.unix_address());
  auto tcp_client = fixture.Client(fixture.tcp_address());
  v1::SubscribeRequest request;
  request.add_field_ids(150);
  request.add_field_ids(155);
  auto over_unix = unix_client->Subscribe(request);
  auto over_tcp = tcp_client->Subscribe(request);
  std::map<uint64_t, std::string> unix_ticks, tcp_ticks;
  for (int i = 0; i < 10; ++i) {
    auto a = over_unix->Next();
    auto b = over_tcp->Next();
    ASSERT_EQ(a.kind, TickSubscription::Event::kMessage);
    ASSERT_EQ(b.kind, TickSubscription::Event::kMessage);
    EXPECT_EQ(a.message->values_size(), 8);
    unix_ticks[a.message->seq()] = a.message->SerializeAsString();
    tcp_ticks[b.message->seq()] = b.message->SerializeAsString();
  }
  int common = 0;
  for (const auto& [seq, bytes] : unix_ticks) {
    auto it = tcp_ticks.find(seq);
    if (it == tcp_ticks.end()) continue;
    ++common;
    v1::TickUpdate a, b;
    a.ParseFromString(bytes);
    b.ParseFromString(it->second);
    a.clear_dropped_ticks();
    b.clear_dropped_ticks();
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << "seq " << seq;
    EXPECT_EQ(a.instance_id(), fixture.engine().identity().instance_id);
  }
  EXPECT_GE(common, 5);
}

TEST(EngineServiceTest, SeqIncreasesStrictlyOnAStream) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.unix_address());
  auto subscription = client->Subscribe({});
  uint64_t previous = 0;
  for (int i = 0; i < 10; ++i) {
    auto event = subscription->Next();
    ASSERT_EQ(event.kind, TickSubscription::Event::kMessage);
    EXPECT_GT(event.message->seq(), previous);
    previous = event.message->seq();
  }
}

TEST(EngineServiceTest, RestartIsSeenAsReconnectWithANewInstance) {
  auto first = std::make_unique<EngineFixture>();
  ASSERT_TRUE(first->started());
  const std::string socket = first->socket_path();
  const std::string first_id = first->engine().identity().instance_id;
  auto client = first->Client(first->unix_address());
  auto subscription = client->Subscribe({});
  auto event = subscription->Next();
  ASSERT_EQ(event.kind, TickSubscription::Event::kMessage);
  EXPECT_FALSE(event.new_instance);
  EXPECT_EQ(event.message->instance_id(), first_id);

  // The temp dir goes with the fixture; keep the socket's directory alive by restarting into a
  // fresh fixture's directory is not possible, so restart on the same path before the old
  // fixture's directory is removed.
  first->Stop();
  bool saw_disconnect = false;
  while (true) {
    event = subscription->Next();
    if (event.kind == TickSubscription::Event::kDisconnected) {
      saw_disconnect = true;
      EXPECT_THAT(std::string(event.error.message()),
                  ::testing::AnyOf(HasSubstr("unreachable"), HasSubstr("shutting down")));
      break;
    }
    ASSERT_EQ(event.kind, TickSubscription::Event::kMessage);
  }
  EXPECT_TRUE(saw_disconnect);
  EngineFixture second({}, socket);
  ASSERT_TRUE(second.started());
  ASSERT_NE(second.engine().identity().instance_id, first_id);
  while (true) {
    event = subscription->Next();
    if (event.kind == TickSubscription::Event::kMessage) break;
    ASSERT_EQ(event.kind, TickSubscription::Event::kDisconnected) << event.error;
  }
  EXPECT_TRUE(event.new_instance);
  EXPECT_EQ(event.message->instance_id(), second.engine().identity().instance_id);
  EXPECT_GE(subscription->reconnects(), 1u);
  second.Stop();
}

TEST(EngineServiceTest, AStalledSubscriberDoesNotStallAnother) {
  // Ticks driven by the test on a fake clock: the count below is exact, whatever the machine's
  // load, and no real tick loop is timed.
  EngineFixture fixture({.queue_depth = 4, .manual_ticks = true});
  ASSERT_TRUE(fixture.started());
  fixture.Tick();  // streams start with the latest tick: there must be one
  // The stalled client opens a stream of every value and never reads it. A small flow-control
  // window makes the stall reach the engine within a few ticks instead of after megabytes.
  grpc::ChannelArguments small_window;
  small_window.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  small_window.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stalled_channel = grpc::CreateCustomChannel(
      "unix:" + fixture.socket_path(), grpc::InsecureChannelCredentials(), small_window);
  auto stalled_stub = v1::Engine::NewStub(stalled_channel);
  grpc::ClientContext stalled_context;
  auto stalled = stalled_stub->Subscribe(&stalled_context, v1::SubscribeRequest());
  stalled->WaitForInitialMetadata();

  auto client = fixture.Client(fixture.unix_address());
  auto live = client->Subscribe({});
  auto joined = live->Next();  // a stream starts with the latest snapshot
  ASSERT_EQ(joined.kind, TickSubscription::Event::kMessage);
  uint64_t previous = joined.message->seq();
  for (int i = 0; i < 60; ++i) {
    fixture.Tick();
    auto event = live->Next();
    ASSERT_EQ(event.kind, TickSubscription::Event::kMessage);
    // The live subscriber gets every tick, in order, none dropped, while the other is stalled.
    EXPECT_EQ(event.message->seq(), previous + 1);
    EXPECT_EQ(event.message->dropped_ticks(), 0u);
    previous = event.message->seq();
  }
  // The stalled stream really was stalled: once it reads again, the engine reports the ticks its
  // bounded queue dropped meanwhile.
  v1::TickUpdate update;
  uint64_t dropped = 0;
  while (dropped == 0 && stalled->Read(&update)) dropped = update.dropped_ticks();
  EXPECT_GT(dropped, 0u);
  stalled_context.TryCancel();
}

TEST(EngineServiceTest, ShutdownEndsStreamsWithUnavailableAndRemovesTheSocket) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto channel =
      grpc::CreateChannel("unix:" + fixture.socket_path(), grpc::InsecureChannelCredentials());
  auto stub = v1::Engine::NewStub(channel);
  grpc::ClientContext context;
  auto reader = stub->Subscribe(&context, v1::SubscribeRequest());
  v1::TickUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  fixture.Stop();
  while (reader->Read(&update)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
  EXPECT_NE(access(fixture.socket_path().c_str(), F_OK), 0);
}

TEST(EngineServiceTest, ServesGrpcHealth) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto channel = grpc::CreateChannel(fixture.tcp_address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "vigil.v1.Engine"}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, request, &response);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

TEST(EngineServiceTest, HealthStreamShowsAnInjectedFailureAtTheTickThatCarriesIt) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.unix_address());
  auto stream = client->WatchHealth({});
  auto first = stream->Next();
  ASSERT_EQ(first.kind, HealthSubscription::Event::kMessage) << first.error;
  EXPECT_EQ(first.message->verdict().instance_id(), fixture.engine().identity().instance_id);
  Principal root{.transport = "unix", .uid = 0, .description = "test"};
  ASSERT_TRUE(fixture.engine().InjectXid({.gpu = 3, .xid = 79}, root).ok());
  // The XID's tick: field 230 shows 79 and the verdict is FAIL, at the same seq.
  while (true) {
    auto event = stream->Next();
    ASSERT_EQ(event.kind, HealthSubscription::Event::kMessage) << event.error;
    const v1::HealthUpdate& update = *event.message;
    if (update.transitions_size() == 0) continue;
    ASSERT_EQ(update.transitions_size(), 1);
    EXPECT_EQ(update.transitions(0).gpu(), 3u);
    EXPECT_EQ(update.transitions(0).system(), "driver");
    EXPECT_EQ(update.transitions(0).to(), v1::HEALTH_STATUS_FAIL);
    EXPECT_TRUE(update.transitions(0).injected());
    EXPECT_EQ(update.verdict().overall(), v1::HEALTH_STATUS_FAIL);
    v1::GetLatestValuesRequest request;
    request.add_gpus(3);
    request.add_field_ids(230);
    auto latest = client->GetLatestValues(request);
    ASSERT_TRUE(latest.ok());
    if (latest->seq() == update.verdict().seq()) {
      EXPECT_EQ(latest->values(0).int_value(), 79);
      EXPECT_EQ(latest->values(0).sample_seq(), update.verdict().seq());
    }
    break;
  }
}

TEST(EngineServiceTest, SubscribersCanGetTheVerdictWithEachTick) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.unix_address());
  v1::SubscribeRequest request;
  request.add_field_ids(150);
  request.set_include_health(true);
  auto subscription = client->Subscribe(request);
  for (int i = 0; i < 3; ++i) {
    auto event = subscription->Next();
    ASSERT_EQ(event.kind, TickSubscription::Event::kMessage);
    EXPECT_EQ(event.message->health().seq(), event.message->seq());
    EXPECT_EQ(event.message->health().gpus_size(), 4);
  }
}

TEST(EngineServiceTest, LostGpuIsUnknownNeverPass) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  auto client = fixture.Client(fixture.unix_address());
  fixture.sim().SetGpuLost(1, true);
  v1::GetHealthRequest request;
  request.add_gpus(1);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<v1::HealthVerdict> verdict;
  // Until a verdict has seen the loss (before the first evaluation every system is UNKNOWN "not
  // evaluated yet").
  const auto saw_loss = [](const v1::HealthVerdict& verdict) {
    for (const auto& system : verdict.gpus(0).systems()) {
      if (system.system() == "driver") return system.status() == v1::HEALTH_STATUS_FAIL;
    }
    return false;
  };
  do {
    verdict = client->GetHealth(request);
    ASSERT_TRUE(verdict.ok());
  } while (!saw_loss(*verdict) && absl::Now() < deadline);
  for (const auto& system : verdict->gpus(0).systems()) {
    if (system.system() == "driver") {
      EXPECT_EQ(system.status(), v1::HEALTH_STATUS_FAIL);  // a lost GPU is itself a fault
    } else {
      EXPECT_EQ(system.status(), v1::HEALTH_STATUS_UNKNOWN) << system.system();
      EXPECT_THAT(system.unknown_reason(), HasSubstr("lost"));
    }
  }
  v1::GetHealthRequest other;
  other.add_gpus(0);
  EXPECT_EQ(client->GetHealth(other)->overall(), v1::HEALTH_STATUS_PASS);
}

TEST(EngineServerTest, RefusesAPortInUseAndALiveSocket) {
  EngineFixture fixture;
  ASSERT_TRUE(fixture.started());
  EXPECT_THAT(std::string(CheckTcpAddress(fixture.tcp_address()).message()),
              HasSubstr("already in use"));
  EXPECT_THAT(std::string(PrepareUnixSocketPath(fixture.socket_path()).message()),
              HasSubstr("another engine is already listening"));
}

TEST(EngineServerTest, ReplacesAStaleSocketAndRefusesNonSockets) {
  testing::TempDir dir;
  const std::string stale = dir.File("stale.sock");
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, stale.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    close(fd);  // bound, never listening: what a crashed engine leaves
  }
  EXPECT_TRUE(PrepareUnixSocketPath(stale).ok());
  EXPECT_NE(access(stale.c_str(), F_OK), 0);
  const std::string regular = dir.File("file");
  fclose(fopen(regular.c_str(), "w"));
  EXPECT_THAT(std::string(PrepareUnixSocketPath(regular).message()), HasSubstr("is not a socket"));
  EXPECT_THAT(std::string(PrepareUnixSocketPath(std::string(200, 'x')).message()),
              HasSubstr("1 to 107 bytes"));
  EXPECT_THAT(std::string(CheckTcpAddress("nonsense").message()), HasSubstr("not HOST:PORT"));
  EXPECT_THAT(std::string(CheckTcpAddress("127.0.0.1:70000").message()), HasSubstr("0 to 65535"));
}

}  // namespace
}  // namespace vigil
