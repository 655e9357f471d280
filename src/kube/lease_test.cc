// Tests of leader election over a Lease on the fake API server: one holder, renewals, a takeover
// only after a holder stops renewing for the Lease's duration (judged on the taker's own clock),
// a race lost to a conflict, a release that hands over at once, and no leader without the API.
#include "kube/lease.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::kube {
namespace {

using testing::FakeKubeApi;

class LeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    for (auto* kube : {&kube_a_, &kube_b_}) {
      auto made =
          InClusterKube::Create(api_->credentials().service_account_dir, "remediator", &clock_);
      ASSERT_TRUE(made.ok()) << made.status();
      *kube = std::move(*made);
    }
    a_ = std::make_unique<LeaseLock>(kube_a_.get(), &clock_, Options("replica-a"));
    b_ = std::make_unique<LeaseLock>(kube_b_.get(), &clock_, Options("replica-b"));
  }
  static LeaseOptions Options(const std::string& identity) {
    return {.ns = "vigil", .name = "vigil-remediator", .identity = identity};
  }
  bool Holds(LeaseLock& lock) {
    auto held = lock.TryAcquireOrRenew();
    EXPECT_TRUE(held.ok()) << held.status();
    return held.ok() && *held;
  }

  ::vigil::testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<FakeKubeApi> api_;
  std::unique_ptr<InClusterKube> kube_a_, kube_b_;
  std::unique_ptr<LeaseLock> a_, b_;
};

TEST_F(LeaseTest, OneHoldsAndTheOtherTakesOverOnlyAfterTheHolderStops) {
  EXPECT_TRUE(Holds(*a_)) << "no Lease yet: created";
  EXPECT_FALSE(Holds(*b_));
  EXPECT_EQ(b_->holder(), "replica-a");
  const nlohmann::json lease = api_->Lease("vigil", "vigil-remediator");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 15);
  // A keeps renewing: B never takes over, however long.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(5));
    EXPECT_TRUE(Holds(*a_));
    EXPECT_FALSE(Holds(*b_));
  }
  // A stops (crashed): B takes over once it has seen no renewal for the duration.
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(Holds(*b_)) << "10 s without a renewal is not 15";
  clock_.Advance(absl::Seconds(6));
  EXPECT_TRUE(Holds(*b_));
  EXPECT_EQ(b_->transitions(), 1);
  EXPECT_FALSE(Holds(*a_)) << "A, back, finds B holding it";
  EXPECT_FALSE(a_->held());
}

TEST_F(LeaseTest, ATakerThatJustArrivedWaitsAFullDurationWhateverTheRenewTimeSays) {
  EXPECT_TRUE(Holds(*a_));
  // A's clock runs a minute behind: its renewTime is long past by C's clock. That does not make
  // the Lease expired for C, which has only just seen it: C waits a full duration of its own.
  FakeClock behind(clock_.Now() - absl::Minutes(1));
  LeaseLock late_a(kube_a_.get(), &behind, Options("replica-a"));
  EXPECT_TRUE(Holds(late_a));
  LeaseLock c(kube_b_.get(), &clock_, Options("replica-c"));
  EXPECT_FALSE(Holds(c));
  clock_.Advance(absl::Seconds(14));
  EXPECT_FALSE(Holds(c));
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(Holds(c)) << "15 s of its own without a renewal";
}

TEST_F(LeaseTest, ARaceForAnExpiredLeaseHasOneWinner) {
  EXPECT_TRUE(Holds(*a_));
  EXPECT_FALSE(Holds(*b_));
  clock_.Advance(absl::Seconds(20));
  // B's write loses to another replica's: the server answers its PUT with a conflict.
  api_->FailNext(409, 1, "/apis/coordination.k8s.io/v1/namespaces/vigil/leases/vigil-remediator", 0,
                 "PUT");
  auto lost = b_->TryAcquireOrRenew();
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_FALSE(*lost);
  EXPECT_FALSE(b_->held());
  EXPECT_EQ(api_->Lease("vigil", "vigil-remediator")["spec"]["holderIdentity"], "replica-a");
  // A stale write (an old resourceVersion) is refused by the server itself.
  nlohmann::json stale = api_->Lease("vigil", "vigil-remediator");
  stale["metadata"]["resourceVersion"] = "1";
  auto refused =
      kube_b_->Call("PUT", "/apis/coordination.k8s.io/v1/namespaces/vigil/leases/vigil-remediator",
                    "application/json", stale.dump());
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 409);
  EXPECT_TRUE(Holds(*b_)) << "the next round, with what it reads now, wins";
}

TEST_F(LeaseTest, AReleaseHandsOverAtOnceAndNoApiMeansNoLeader) {
  EXPECT_TRUE(Holds(*a_));
  EXPECT_FALSE(Holds(*b_));
  const absl::Status released = a_->Release();
  ASSERT_TRUE(released.ok()) << released;
  EXPECT_FALSE(a_->held());
  EXPECT_TRUE(Holds(*b_)) << "a released Lease is free at once";
  api_->FailNext(503, 1, "/apis/coordination.k8s.io/");
  auto unreachable = b_->TryAcquireOrRenew();
  EXPECT_FALSE(unreachable.ok());
  EXPECT_FALSE(b_->held()) << "a leader that cannot renew stops acting";
}

}  // namespace
}  // namespace vigil::kube
