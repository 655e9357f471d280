// Tests DeadlineBackend with an inner backend whose reads block until the test lets them go.
#include "backend/deadline_backend.h"

#include <memory>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

// Three GPUs; reading GPU g gives each field the value g * 1000 + field. A GPU can be made to
// hang: its reads block until released.
class HangingBackend : public Backend {
 public:
  explicit HangingBackend(std::shared_ptr<absl::Notification> destroyed)
      : destroyed_(std::move(destroyed)) {
    for (uint32_t i = 0; i < 3; ++i)
      gpus_.push_back({.index = i, .uuid = "GPU-" + std::to_string(i)});
  }
  ~HangingBackend() override { destroyed_->Notify(); }

  std::string_view name() const override { return "hanging"; }
  const std::vector<GpuIdentity>& gpus() const override { return gpus_; }
  absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time,
                    absl::Span<FieldValue> out) override {
    absl::MutexLock lock(&mutex_);
    while (hung_[gpu]) changed_.Wait(&mutex_);
    for (size_t i = 0; i < fields.size(); ++i) out[i] = FieldValue::Int(gpu * 1000 + fields[i]);
    return absl::OkStatus();
  }
  // MIG calls hang with the GPU, as a driver stuck on it would.
  absl::StatusOr<MigState> ReadMig(uint32_t gpu) override {
    absl::MutexLock lock(&mutex_);
    Meet();
    while (hung_[gpu]) changed_.Wait(&mutex_);
    return MigState{.mode = true, .instances = {MigInstance{.gpu_instance_id = gpu + 1}}};
  }
  absl::Status ReadInstance(uint32_t gpu, const MigInstance& instance,
                            absl::Span<const FieldId> fields, absl::Time,
                            absl::Span<FieldValue> out) override {
    absl::MutexLock lock(&mutex_);
    Meet();
    while (hung_[gpu]) changed_.Wait(&mutex_);
    for (size_t i = 0; i < fields.size(); ++i) {
      out[i] = FieldValue::Int(instance.gpu_instance_id * 100 + fields[i]);
    }
    return absl::OkStatus();
  }
  void StartEvents(EventSink*) override {}
  void StopEvents() override {}
  absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) override {
    absl::MutexLock lock(&mutex_);
    while (hung_[gpu]) changed_.Wait(&mutex_);
    return std::vector<GpuProcess>{{.pid = gpu + 100}};
  }
  absl::StatusOr<std::string> ResetGpu(uint32_t gpu) override {
    return "reset " + std::to_string(gpu);
  }

  // From now on, each of the next `count` MIG calls waits until all of them have begun: calls made
  // one after another would never all begin (the first would miss its deadline).
  void MeetBeforeAnswering(int count) {
    absl::MutexLock lock(&mutex_);
    meeting_ = count;
  }

  void SetHung(uint32_t gpu, bool hung) {
    absl::MutexLock lock(&mutex_);
    hung_[gpu] = hung;
    changed_.SignalAll();
  }

 private:
  std::shared_ptr<absl::Notification> destroyed_;
  std::vector<GpuIdentity> gpus_;
  absl::Mutex mutex_;
  absl::CondVar changed_;
  bool hung_[3] ABSL_GUARDED_BY(mutex_) = {false, false, false};
  int meeting_ ABSL_GUARDED_BY(mutex_) = 0;  // calls still to arrive at the meeting

  void Meet() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (meeting_ == 0) return;
    --meeting_;
    changed_.SignalAll();
    while (meeting_ > 0) changed_.Wait(&mutex_);
  }
};

class DeadlineBackendTest : public ::testing::Test {
 protected:
  DeadlineBackendTest() {
    auto inner = std::make_unique<HangingBackend>(destroyed_);
    inner_ = inner.get();
    backend_ = std::make_unique<DeadlineBackend>(std::move(inner), absl::Seconds(1));
  }

  // Reads fields 7 and 9 of every GPU.
  void ReadAll() {
    values_.assign(6, FieldValue{});
    statuses_.assign(3, absl::OkStatus());
    backend_->ReadAll(kFields, absl::Now(), absl::MakeSpan(values_), absl::MakeSpan(statuses_));
  }

  static constexpr FieldId kFields[] = {7, 9};
  std::shared_ptr<absl::Notification> destroyed_ = std::make_shared<absl::Notification>();
  HangingBackend* inner_;
  std::unique_ptr<DeadlineBackend> backend_;
  std::vector<FieldValue> values_;
  std::vector<absl::Status> statuses_;
};

TEST_F(DeadlineBackendTest, ReadsEveryGpuInPlace) {
  ReadAll();
  for (uint32_t gpu = 0; gpu < 3; ++gpu) {
    ASSERT_TRUE(statuses_[gpu].ok()) << statuses_[gpu];
    EXPECT_EQ(values_[gpu * 2].as_int(), gpu * 1000 + 7);
    EXPECT_EQ(values_[gpu * 2 + 1].as_int(), gpu * 1000 + 9);
  }
  FieldValue one;
  ASSERT_TRUE(backend_->Read(2, {9}, absl::Now(), absl::MakeSpan(&one, 1)).ok());
  EXPECT_EQ(one.as_int(), 2009);
  EXPECT_EQ(backend_->timeouts(), 0u);
  EXPECT_EQ(backend_->name(), "hanging");
}

TEST_F(DeadlineBackendTest, ResetsAndProcessListsGoToTheInnerBackend) {
  EXPECT_THAT(*backend_->ReadProcesses(2), ::testing::ElementsAre(GpuProcess{.pid = 102}));
  EXPECT_EQ(*backend_->ResetGpu(1), "reset 1");
}

// Process lists are read on the workers under the deadline, as reads: a GPU whose listing hangs
// costs one deadline and reads as stuck, the others' lists come.
TEST_F(DeadlineBackendTest, ProcessListsOfAHungGpuTimeOutAndTheOthersCome) {
  inner_->SetHung(1, true);
  std::vector<absl::StatusOr<std::vector<GpuProcess>>> out(3, absl::UnknownError("unread"));
  backend_->ReadProcessesAll({true, true, false}, absl::MakeSpan(out));
  EXPECT_THAT(*out[0], ::testing::ElementsAre(GpuProcess{.pid = 100}));
  EXPECT_EQ(out[1].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out[2].status().code(), absl::StatusCode::kUnknown) << "not asked: untouched";
  EXPECT_EQ(backend_->timeouts(), 1u);
  ReadAll();
  EXPECT_EQ(statuses_[1].code(), absl::StatusCode::kDeadlineExceeded) << "stuck, for reads too";
  inner_->SetHung(1, false);
  ASSERT_TRUE(backend_->AwaitIdle(1, absl::InfiniteFuture()));
  EXPECT_THAT(*backend_->ReadProcesses(1), ::testing::ElementsAre(GpuProcess{.pid = 101}));
}

TEST_F(DeadlineBackendTest, AHungGpuTimesOutOnceAndTheOthersKeepAnswering) {
  inner_->SetHung(1, true);
  ReadAll();
  EXPECT_EQ(statuses_[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(statuses_[1].message(), HasSubstr("did not answer within 1s"));
  EXPECT_TRUE(statuses_[0].ok());
  EXPECT_TRUE(statuses_[2].ok());
  EXPECT_EQ(values_[5].as_int(), 2009);
  EXPECT_EQ(backend_->timeouts(), 1u);

  // Still stuck: reported at once, without waiting out another deadline.
  const absl::Time before = absl::Now();
  ReadAll();
  EXPECT_LT(absl::Now() - before, absl::Milliseconds(900));
  EXPECT_EQ(statuses_[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(statuses_[1].message(), HasSubstr("stuck for"));
  EXPECT_TRUE(statuses_[0].ok());
  EXPECT_EQ(backend_->timeouts(), 1u);

  // The call returns: the GPU is read normally again.
  inner_->SetHung(1, false);
  ASSERT_TRUE(backend_->AwaitIdle(1, absl::InfiniteFuture()));
  ReadAll();
  ASSERT_TRUE(statuses_[1].ok()) << statuses_[1];
  EXPECT_EQ(values_[2].as_int(), 1007);
}

TEST_F(DeadlineBackendTest, MigCallsRunOnTheWorkerBoundedByTheDeadline) {
  auto mig = backend_->ReadMig(1);
  ASSERT_TRUE(mig.ok()) << mig.status();
  ASSERT_EQ(mig->instances.size(), 1u);
  FieldValue value;
  ASSERT_TRUE(
      backend_->ReadInstance(1, mig->instances[0], {7}, absl::Now(), absl::MakeSpan(&value, 1))
          .ok());
  EXPECT_EQ(value.as_int(), 207);

  // A MIG call that hangs in the driver costs one deadline, not the sampling thread.
  inner_->SetHung(1, true);
  EXPECT_EQ(backend_->ReadMig(1).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(backend_->timeouts(), 1u);
  // Then the GPU reads as stuck at once, MIG calls and reads alike; the others answer.
  EXPECT_THAT(
      std::string(
          backend_->ReadInstance(1, mig->instances[0], {7}, absl::Now(), absl::MakeSpan(&value, 1))
              .message()),
      HasSubstr("stuck for"));
  ReadAll();
  EXPECT_EQ(statuses_[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(statuses_[0].ok());
  EXPECT_TRUE(backend_->ReadMig(0).ok());
  inner_->SetHung(1, false);
  ASSERT_TRUE(backend_->AwaitIdle(1, absl::InfiniteFuture()));
  EXPECT_TRUE(backend_->ReadMig(1).ok());
}

// Every GPU's MIG state and instances are read at once, each GPU on its worker: the three calls
// all begin before any answers, and a GPU that hangs costs the others nothing.
TEST_F(DeadlineBackendTest, MigCallsOfEveryGpuRunAtOnce) {
  inner_->MeetBeforeAnswering(3);
  std::vector<absl::StatusOr<MigState>> mig(3, absl::UnknownError("not read"));
  backend_->ReadMigAll({true, true, true}, absl::MakeSpan(mig));
  for (uint32_t gpu = 0; gpu < 3; ++gpu) {
    ASSERT_TRUE(mig[gpu].ok()) << gpu << ": " << mig[gpu].status();
    EXPECT_EQ(mig[gpu]->instances.at(0).gpu_instance_id, gpu + 1);
  }
  std::vector<MigState> states = {*mig[0], *mig[1], *mig[2]};
  states[2].instances.push_back(MigInstance{.gpu_instance_id = 9});  // two instances on GPU 2
  std::vector<FieldValue> values(4 * 2);
  std::vector<absl::Status> statuses(4);
  inner_->MeetBeforeAnswering(3);  // GPU 2's first instance, with GPU 0's and GPU 1's
  backend_->ReadInstancesAll(states, {true, true, true}, {7, 8}, absl::Now(),
                             absl::MakeSpan(values), absl::MakeSpan(statuses));
  for (const absl::Status& status : statuses) EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(values[0].as_int(), 107);  // GPU 0's instance 1
  EXPECT_EQ(values[3].as_int(), 208);  // GPU 1's instance 2
  EXPECT_EQ(values[7].as_int(), 908);  // GPU 2's second instance, 9

  // GPU 1 hangs: its rows time out, the others answer, and a GPU not asked is left alone.
  inner_->SetHung(1, true);
  statuses.assign(4, absl::OkStatus());
  values.assign(8, FieldValue{});
  backend_->ReadInstancesAll(states, {false, true, true}, {7, 8}, absl::Now(),
                             absl::MakeSpan(values), absl::MakeSpan(statuses));
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(values[0].status, FieldValue{}.status) << "GPU 0 was not asked";
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(values[5].as_int(), 308);
  EXPECT_EQ(backend_->timeouts(), 1u);
  inner_->SetHung(1, false);
  ASSERT_TRUE(backend_->AwaitIdle(1, absl::InfiniteFuture()));
}

TEST_F(DeadlineBackendTest, DestructionDoesNotWaitForAStuckCall) {
  inner_->SetHung(0, true);
  ReadAll();
  ASSERT_EQ(statuses_[0].code(), absl::StatusCode::kDeadlineExceeded);
  HangingBackend* inner = inner_;
  backend_.reset();                             // returns although GPU 0's worker is blocked
  EXPECT_FALSE(destroyed_->HasBeenNotified());  // the stuck worker still owns the backend
  inner->SetHung(0, false);
  destroyed_->WaitForNotification();  // the worker finished and let the backend go
}

}  // namespace
}  // namespace vigil
