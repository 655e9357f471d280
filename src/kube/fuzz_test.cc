// Fuzz targets of what the API server sends (testing/fuzz.h): watch lines (ParseWatchEvent) and
// list answers (ListAll, over an in-memory KubeApi that answers with the input), with the pod
// helpers run on every object that comes out. For any input: an event or an error that says
// what is wrong, a list or an error, never a crash (ASan in `make fuzz`) or an exception out of
// nlohmann's JSON.
#include "testing/fuzz.h"

#include "gtest/gtest.h"
#include "kube/informer.h"
#include "kube/list.h"
#include "kube/pods.h"

namespace vigil::kube {
namespace {

constexpr std::string_view kJsonAlphabet =
    "{}[]\":,0123456789.- truefalsnul\\typeobjectmetadatanamespacekindcodeADDEDMODIFIEDERROR";

const char kPod[] =
    R"({"kind":"Pod","metadata":{"name":"train-0","namespace":"ml","resourceVersion":"42",)"
    R"("ownerReferences":[{"kind":"DaemonSet","name":"x","controller":true}],)"
    R"("annotations":{"kubernetes.io/config.mirror":"abc"}},"spec":{"nodeName":"n1",)"
    R"("containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2"}}}]},)"
    R"("status":{"phase":"Running"}})";
const char kNode[] =
    R"({"kind":"Node","metadata":{"name":"n1","resourceVersion":"43","labels":{"a":"b"}},)"
    R"("spec":{"taints":[{"key":"vigil.dev/gpu-problem","effect":"NoSchedule"}]}})";

// What every object read from the API server goes through.
void UsePodHelpers(const nlohmann::json& object) {
  for (const std::string& resource : GpuResourcesOf(object)) EXPECT_FALSE(resource.empty());
  OwnedByDaemonSet(object);
  IsMirrorPod(object);
  Informer::KeyOf(object);
}

TEST(KubeFuzzTest, WatchLinesParseOrSayWhatIsWrong) {
  const std::vector<std::string> seeds = {
      std::string(R"({"type":"ADDED","object":)") + kPod + "}",
      std::string(R"({"type":"MODIFIED","object":)") + kNode + "}",
      std::string(R"({"type":"DELETED","object":)") + kPod + "}",
      R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}})",
      R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",)"
      R"j("message":"too old resource version: 1 (50)"}})j"};
  const testing::FuzzRun run = testing::Fuzz(
      "watch line", seeds, std::string(kJsonAlphabet), 100'000, [](const std::string& input) {
        const absl::StatusOr<WatchEvent> event = ParseWatchEvent(input);
        if (!event.ok()) {
          EXPECT_FALSE(event.status().message().empty());
          return false;
        }
        EXPECT_TRUE(event->object.is_object());
        const bool change = event->type == WatchEvent::Type::kAdded ||
                            event->type == WatchEvent::Type::kModified ||
                            event->type == WatchEvent::Type::kDeleted;
        EXPECT_EQ(!event->key.empty(), change) << input;
        UsePodHelpers(event->object);
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 20);
}

// Answers the first GET with the input and any later one with an empty last page.
class OneAnswerKube : public KubeApi {
 public:
  explicit OneAnswerKube(std::string body) : body_(std::move(body)) {}
  absl::StatusOr<KubeResponse> Call(std::string_view, const std::string&, std::string_view,
                                    const std::string&) override {
    if (calls_++ == 0) return KubeResponse{.status = 200, .body = body_};
    return KubeResponse{.status = 200,
                        .body = R"({"metadata":{"resourceVersion":"7"},"items":[]})"};
  }
  absl::StatusOr<KubeResponse> Stream(const std::string&, const LineHandler&,
                                      StreamCanceller*) override {
    return absl::UnimplementedError("no watch here");
  }

 private:
  const std::string body_;
  int calls_ = 0;
};

TEST(KubeFuzzTest, ListAnswersAreReadOrSayWhatIsWrong) {
  const std::vector<std::string> seeds = {
      std::string(R"({"kind":"PodList","metadata":{"resourceVersion":"40","continue":""},)") +
          R"("items":[)" + kPod + "," + kPod + "]}",
      std::string(R"({"kind":"NodeList","metadata":{"resourceVersion":"41","continue":"t"},)") +
          R"("items":[)" + kNode + "]}"};
  const testing::FuzzRun run = testing::Fuzz(
      "list answer", seeds, std::string(kJsonAlphabet), 50'000, [](const std::string& input) {
        OneAnswerKube api(input);
        size_t items = 0;
        const ListResult result = ListAll(api, {.path = "/api/v1/pods", .description = "the pods"},
                                          [&](const nlohmann::json& item, std::string*) {
                                            UsePodHelpers(item);
                                            ++items;
                                            return true;
                                          });
        if (result.outcome != ListResult::Outcome::kDone) {
          EXPECT_FALSE(result.error.empty()) << input;
          return false;
        }
        EXPECT_FALSE(result.resource_version.empty()) << input;
        EXPECT_LE(result.pages, 2) << input;
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 50);
}

}  // namespace
}  // namespace vigil::kube
