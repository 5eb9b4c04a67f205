#pragma once
// Runs a test body on every rank: as threads (local backend) under plain
// ctest, or on the MPI world under mpirun, where a test written for N ranks
// runs only when the world has N ranks (and is skipped otherwise).
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "kiri/comm/communicator.h"

namespace kiri::comm::testing {

// Short timeouts: a broken test fails in seconds instead of hanging.
Options test_options();
bool mpi_mode();
// Skips the calling test when it cannot run here; true if skipped.
bool skip_unless_ranks(int n);
// Local: run_local(n, body). MPI: body on a fresh duplicate of the world.
void run_ranks(int n, const std::function<void(Communicator&)>& body,
               const Options& options = test_options());
// The MPI world for the test main (null in local mode).
void set_mpi_world(std::unique_ptr<Communicator> world);

}  // namespace kiri::comm::testing

// In a TEST: runs body on n ranks, or skips when the MPI world has another size.
#define KIRI_RUN_RANKS(n, ...)                         \
  do {                                                 \
    if (::kiri::comm::testing::skip_unless_ranks(n))   \
      GTEST_SKIP() << "needs " << (n) << " MPI ranks"; \
    ::kiri::comm::testing::run_ranks(n, __VA_ARGS__);  \
  } while (0)

// In a TEST: skips unless running as threads.
#define KIRI_LOCAL_ONLY()                                                        \
  do {                                                                           \
    if (::kiri::comm::testing::mpi_mode()) GTEST_SKIP() << "local backend only"; \
  } while (0)
