// Tests of the informer against the fake API server, through the real HTTPS client and a real
// watch stream: LIST (paginated) then WATCH from its resourceVersion, objects entering and
// leaving the selector, bookmarks, a dropped connection (resumed from the last resourceVersion),
// 410 Gone as an answer and as an ERROR event (re-list), and backoff on errors (429 Retry-After).
// Backoff waits are on a FakeClock; the watch stream itself is real, so the tests wait for its
// effects with Eventually().
#include "kube/informer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_api.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing::Eventually;
using testing::FakeKubeApi;
using testing::KubeRequest;

const Json kTaint = {{"key", "vigil.dev/gpu-problem"}, {"effect", "NoSchedule"}};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    auto kube = InClusterKube::Create(api_->credentials().service_account_dir, "test", &clock_);
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = std::move(*kube);
    for (const char* name : {"gpu-1", "gpu-2", "gpu-3"}) {
      api_->AddNode(name, {{"nvidia.com/gpu.present", "true"}});
    }
    api_->AddNode("cpu-1", {{"kubernetes.io/os", "linux"}});
  }

  void TearDown() override {
    if (informer_ != nullptr) informer_->Stop();
  }

  Informer& StartInformer(InformerOptions options = {}) {
    options.path = "/api/v1/nodes";
    if (options.label_selector.empty()) options.label_selector = "nvidia.com/gpu.present=true";
    options.clock = &clock_;
    informer_ = std::make_unique<Informer>(kube_.get(), options);
    informer_->AddListener([this](const std::string& name) {
      absl::MutexLock lock(&mutex_);
      notified_.push_back(name);
    });
    informer_->Start();
    return *informer_;
  }

  bool Tainted(const std::string& name) {
    const std::optional<Json> node = informer_->Get(name);
    return node.has_value() && node->contains("spec") && (*node)["spec"].contains("taints") &&
           (*node)["spec"]["taints"].size() == 1;
  }
  std::vector<KubeRequest> Lists() {
    std::vector<KubeRequest> lists;
    for (const KubeRequest& request : api_->Requests()) {
      if (request.list()) {
        lists.push_back(request);
      }
    }
    return lists;
  }
  std::vector<KubeRequest> Watches() {
    std::vector<KubeRequest> watches;
    for (const KubeRequest& request : api_->Requests()) {
      if (request.watch()) watches.push_back(request);
    }
    return watches;
  }
  // Waits until the informer's watch is open on the server.
  bool Watching(int count = 1) {
    return Eventually([&] { return api_->open_watches() == count; });
  }
  void Taint(const std::string& name) {
    api_->ModifyNode(name, [](Json& node) { node["spec"]["taints"] = Json::array({kTaint}); });
  }

  vigil::testing::TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  FakeClock clock_;
  std::unique_ptr<InClusterKube> kube_;
  std::unique_ptr<Informer> informer_;
  absl::Mutex mutex_;
  std::vector<std::string> notified_ ABSL_GUARDED_BY(mutex_);
};

TEST_F(InformerTest, ListsThenWatchesFromTheListsResourceVersion) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Eventually([&] { return informer.synced(); }));
  EXPECT_EQ(informer.size(), 3u) << "the CPU node is not selected";
  ASSERT_TRUE(Watching());
  const std::vector<KubeRequest> lists = Lists();
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_EQ(lists[0].params.at("labelSelector"), "nvidia.com/gpu.present=true");
  EXPECT_EQ(lists[0].params.at("limit"), "500");
  EXPECT_EQ(lists[0].params.at("resourceVersion"), "0") << "the first list from the watch cache";
  EXPECT_THAT(lists[0].user_agent, HasSubstr("vigil/"));
  const std::vector<KubeRequest> watches = Watches();
  ASSERT_EQ(watches.size(), 1u);
  EXPECT_EQ(watches[0].params.at("resourceVersion"), informer.resource_version());
  EXPECT_EQ(watches[0].params.at("allowWatchBookmarks"), "true");
  EXPECT_EQ(watches[0].params.at("labelSelector"), "nvidia.com/gpu.present=true");
  const int timeout = std::stoi(watches[0].params.at("timeoutSeconds"));
  EXPECT_GE(timeout, 600);
  EXPECT_LT(timeout, 1200);

  // A change streams in; nothing is requested for it.
  api_->ClearRequests();
  Taint("gpu-2");
  ASSERT_TRUE(Eventually([&] { return Tainted("gpu-2"); }));
  EXPECT_EQ(informer.resource_version(), api_->resource_version());
  EXPECT_TRUE(api_->Requests().empty());
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mutex_);
    return notified_.size() == 4;  // listeners run just after the change is visible
  }));
  absl::MutexLock lock(&mutex_);
  EXPECT_THAT(notified_, ElementsAre("gpu-1", "gpu-2", "gpu-3", "gpu-2"));
}

TEST_F(InformerTest, ListsPageByPage) {
  for (int i = 4; i <= 7; ++i)
    api_->AddNode("gpu-" + std::to_string(i), {{"nvidia.com/gpu.present", "true"}});
  Informer& informer = StartInformer({.page_size = 3});
  ASSERT_TRUE(Eventually([&] { return informer.synced(); }));
  EXPECT_EQ(informer.size(), 7u);
  const std::vector<KubeRequest> lists = Lists();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_FALSE(lists[0].params.contains("continue"));
  EXPECT_TRUE(lists[1].params.contains("continue"));
  EXPECT_TRUE(lists[2].params.contains("continue"));
}

TEST_F(InformerTest, NodesEnteringAndLeavingTheSelectorAreAddedAndRemoved) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Watching());
  api_->ModifyNode(
      "cpu-1", [](Json& node) { node["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"; });
  ASSERT_TRUE(Eventually([&] { return informer.Get("cpu-1").has_value(); }));
  api_->ModifyNode("gpu-1",
                   [](Json& node) { node["metadata"]["labels"].erase("nvidia.com/gpu.present"); });
  ASSERT_TRUE(Eventually([&] { return !informer.Get("gpu-1").has_value(); }));
  api_->DeleteNode("gpu-3");
  ASSERT_TRUE(Eventually([&] { return !informer.Get("gpu-3").has_value(); }));
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_EQ(informer.stats().events, 3u);
  EXPECT_EQ(Lists().size(), 1u);
}

TEST_F(InformerTest, TheTransformKeepsOnlyWhatReadersUse) {
  Informer& informer = StartInformer({.transform = [](const Json& node) {
    return Json{{"name", node["metadata"]["name"]},
                {"taints", node["spec"].value("taints", Json::array()).size()}};
  }});
  ASSERT_TRUE(Watching());
  Taint("gpu-1");
  ASSERT_TRUE(Eventually([&] { return informer.Get("gpu-1").value_or(Json())["taints"] == 1; }));
  EXPECT_EQ(*informer.Get("gpu-2"), (Json{{"name", "gpu-2"}, {"taints", 0}}));
}

TEST_F(InformerTest, BookmarksKeepTheResourceVersionRecent) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Watching());
  // Writes elsewhere (Events, other nodes) move the resourceVersion without an event here.
  api_->AddNode("cpu-2", {});
  api_->AddNode("cpu-3", {});
  const std::string now = api_->resource_version();
  EXPECT_NE(informer.resource_version(), now);
  api_->Bookmark();
  ASSERT_TRUE(Eventually([&] { return informer.resource_version() == now; }));
  EXPECT_EQ(informer.stats().bookmarks, 1u);
  EXPECT_EQ(informer.stats().events, 0u);
}

TEST_F(InformerTest, ADroppedWatchResumesFromTheLastResourceVersionWithoutMissingATaint) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Watching());
  const std::string before = informer.resource_version();
  api_->DropWatches();
  // The informer notices, and backs off on the fake clock.
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_EQ(informer.stats().errors, 1u);
  EXPECT_GE(clock_.EarliestDeadline() - clock_.Now(), absl::Milliseconds(800));
  // The taint changes while no watch is open.
  Taint("gpu-3");
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Eventually([&] { return Tainted("gpu-3"); }));
  const std::vector<KubeRequest> watches = Watches();
  ASSERT_EQ(watches.size(), 2u);
  EXPECT_EQ(watches[1].params.at("resourceVersion"), before) << "resumed, not re-listed";
  EXPECT_EQ(Lists().size(), 1u);
  EXPECT_EQ(informer.stats().relists, 0u);
}

TEST_F(InformerTest, A410GoneReListsWithoutMissingATaint) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Watching());
  api_->DropWatches();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  Taint("gpu-1");
  api_->Compact();  // the informer's resourceVersion is gone from the history
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Eventually([&] { return Tainted("gpu-1"); }));
  EXPECT_EQ(informer.stats().relists, 1u);
  ASSERT_EQ(Lists().size(), 2u);
  EXPECT_FALSE(Lists()[1].params.contains("resourceVersion"))
      << "a re-list is a consistent read: the cache must not go back in time";
  ASSERT_TRUE(Watching());
  EXPECT_EQ(Watches().back().params.at("resourceVersion"), informer.resource_version());
}

TEST_F(InformerTest, AnExpiredWatchErrorEventReLists) {
  Informer& informer = StartInformer();
  ASSERT_TRUE(Watching());
  api_->ExpireWatches();
  ASSERT_TRUE(Eventually([&] { return informer.stats().relists == 1 && Lists().size() == 2; }));
  ASSERT_TRUE(Watching());
  Taint("gpu-2");
  ASSERT_TRUE(Eventually([&] { return Tainted("gpu-2"); }));
  EXPECT_EQ(informer.stats().errors, 0u) << "a 410 is not an error: it is answered by a re-list";
}

TEST_F(InformerTest, ErrorsBackOffAndA429WaitsItsRetryAfter) {
  api_->FailNext(429, 1, "/api/v1/nodes", /*retry_after=*/7);
  Informer& informer = StartInformer();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_FALSE(informer.synced());
  EXPECT_GE(clock_.EarliestDeadline() - clock_.Now(), absl::Seconds(7));
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(Lists().size(), 1u);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Eventually([&] { return informer.synced(); }));
  EXPECT_EQ(Lists().size(), 2u);

  // A watch answered with a 500: backoff, then the watch resumes.
  ASSERT_TRUE(Watching());
  api_->FailNext(500, 1, "/api/v1/nodes");
  api_->DropWatches();
  auto backing_off_after = [&](uint64_t errors) {
    return Eventually([&] { return informer.stats().errors == errors; }) && clock_.AwaitWaiters(1);
  };
  ASSERT_TRUE(backing_off_after(2));  // the drop
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(backing_off_after(3));  // the 500
  EXPECT_GE(clock_.EarliestDeadline() - clock_.Now(), absl::Milliseconds(1600)) << "doubled";
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(Watching());
  EXPECT_EQ(Lists().size(), 2u);
}

TEST_F(InformerTest, StopEndsAnOpenWatch) {
  StartInformer();
  ASSERT_TRUE(Watching());
  informer_->Stop();
  // The server notices a closed watch when it next writes to it (as the real one does).
  EXPECT_TRUE(Eventually([&] {
    api_->Bookmark();
    return api_->open_watches() == 0;
  }));
}

}  // namespace
}  // namespace vigil::kube
