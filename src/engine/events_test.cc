// Tests of the event log's ordering: every listener sees events in id order with no gap or
// duplicate, whichever threads record and watch, and no listener is called under the log's lock
// (a listener may read the log or record an event from OnMessage).
#include "engine/events.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

EngineEvent Scenario(std::string message) {
  return {.kind = EventKind::kScenarioStep, .message = std::move(message)};
}

// Keeps the ids it is given; thread-safe, as a stream's listener is.
class IdRecorder : public EventListener {
 public:
  void OnMessage(const EventPtr& event) override {
    absl::MutexLock lock(&mutex_);
    ids_.push_back(event->id);
  }
  void OnStop(const absl::Status&) override {}
  std::vector<uint64_t> ids() const {
    absl::MutexLock lock(&mutex_);
    return ids_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(mutex_);
};

// The tests that record thousands of events keep them out of the test's log.
class QuietEventLogTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::warn); }
  void TearDown() override { spdlog::set_level(level_); }

 private:
  spdlog::level::level_enum level_ = spdlog::get_level();
};

// Where `ids` is not one run of consecutive ids, the first place it breaks.
std::string FirstBreak(const std::vector<uint64_t>& ids) {
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] != ids[i - 1] + 1) {
      return "id " + std::to_string(ids[i]) + " follows " + std::to_string(ids[i - 1]);
    }
  }
  return "";
}

TEST(EventLogTest, AListenerCanRecordAnEventFromOnMessageAndSeesBothInOrder) {
  EventLog log(4);
  // Under a log that called listeners under its lock, the nested Record would wait for itself.
  class Echo : public IdRecorder {
   public:
    explicit Echo(EventLog* log) : log_(log) {}
    void OnMessage(const EventPtr& event) override {
      IdRecorder::OnMessage(event);
      if (event->message == "first") log_->Record(Scenario("echo"));
    }

   private:
    EventLog* log_;
  };
  auto echo = std::make_shared<Echo>(&log);
  ASSERT_TRUE(log.Watch(echo, 0).ok());

  const EventPtr first = log.Record(Scenario("first"));

  EXPECT_EQ(first->id, 1u);
  EXPECT_EQ(echo->ids(), (std::vector<uint64_t>{1, 2}));
  ASSERT_EQ(log.Recent(10).size(), 2u);
  EXPECT_EQ(log.Recent(10)[1]->message, "echo");
}

TEST(EventLogTest, AListenerCanReadTheRecentEventsFromOnMessage) {
  EventLog log(4);
  class Reader : public EventListener {
   public:
    explicit Reader(EventLog* log) : log_(log) {}
    void OnMessage(const EventPtr&) override { seen.push_back(log_->Recent(100).size()); }
    void OnStop(const absl::Status&) override {}
    std::vector<size_t> seen;

   private:
    EventLog* log_;
  };
  auto reader = std::make_shared<Reader>(&log);
  ASSERT_TRUE(log.Watch(reader, 0).ok());

  log.Record(Scenario("a"));
  log.Record(Scenario("b"));

  EXPECT_EQ(reader->seen, (std::vector<size_t>{1, 2}));
}

TEST_F(QuietEventLogTest, EventsRecordedFromManyThreadsReachEveryListenerInIdOrderWithNoGap) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  EventLog log(8);
  auto first = std::make_shared<IdRecorder>();
  auto second = std::make_shared<IdRecorder>();
  ASSERT_TRUE(log.Watch(first, 0).ok());
  ASSERT_TRUE(log.Watch(second, 0).ok());

  std::vector<std::thread> recorders;
  for (int t = 0; t < kThreads; ++t) {
    recorders.emplace_back([&log] {
      for (int i = 0; i < kPerThread; ++i) log.Record(Scenario("step"));
    });
  }
  for (auto& recorder : recorders) recorder.join();

  for (const auto& listener : {first, second}) {
    const std::vector<uint64_t> ids = listener->ids();
    ASSERT_EQ(ids.size(), size_t{kThreads * kPerThread});
    EXPECT_EQ(ids.front(), 1u);
    EXPECT_EQ(FirstBreak(ids), "");
  }
}

TEST_F(QuietEventLogTest,
       AWatcherAddedWhileEventsAreRecordedGetsItsReplayThenTheLiveOnesWithNoGap) {
  constexpr int kEvents = 6000;
  EventLog log(16);
  std::thread recorder([&log] {
    for (int i = 0; i < kEvents; ++i) log.Record(Scenario("step"));
  });
  std::vector<std::shared_ptr<IdRecorder>> watchers;
  for (int i = 0; i < 12; ++i) {
    watchers.push_back(std::make_shared<IdRecorder>());
    ASSERT_TRUE(log.Watch(watchers.back(), 50).ok());
  }
  recorder.join();

  for (const auto& watcher : watchers) {
    const std::vector<uint64_t> ids = watcher->ids();
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), uint64_t{kEvents});
    EXPECT_EQ(FirstBreak(ids), "");
  }
}

TEST(EventLogTest, AWatcherRefusedByTheFanOutIsGivenNothingAndLaterEventsStillFlow) {
  EventLog log(1);
  auto accepted = std::make_shared<IdRecorder>();
  auto refused = std::make_shared<IdRecorder>();
  ASSERT_TRUE(log.Watch(accepted, 0).ok());
  log.Record(Scenario("a"));

  EXPECT_EQ(log.Watch(refused, 10).code(), absl::StatusCode::kResourceExhausted);
  log.Record(Scenario("b"));

  EXPECT_TRUE(refused->ids().empty());
  EXPECT_EQ(accepted->ids(), (std::vector<uint64_t>{1, 2}));
}

TEST(EventLogDeathTest, AListenerThatWatchesFromOnMessageCrashesRatherThanWaitForItself) {
  EventLog log(4);
  class Watcher : public EventListener {
   public:
    explicit Watcher(EventLog* log) : log_(log) {}
    void OnMessage(const EventPtr&) override {
      (void)log_->Watch(std::make_shared<IdRecorder>(), 0);
    }
    void OnStop(const absl::Status&) override {}

   private:
    EventLog* log_;
  };
  ASSERT_TRUE(log.Watch(std::make_shared<Watcher>(&log), 0).ok());
  EXPECT_DEATH(log.Record(Scenario("a")), "invariant violated");
}

}  // namespace
}  // namespace vigil
