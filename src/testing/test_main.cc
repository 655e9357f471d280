// main() for every Vigil test binary: GoogleTest plus the process set-up tests need.
// gRPC is initialised once and never shut down: releasing it after a client dropped mid-stream
// can block in gRPC's final cleanup (shared notes/build.md).
#include <grpc/grpc.h>

#include <csignal>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  grpc_init();
  std::signal(SIGPIPE, SIG_IGN);
  testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
