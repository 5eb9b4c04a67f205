// The comm tests' main: under mpirun it initialises MPI and hands the world
// to the harness (tests for another world size skip themselves); otherwise
// the ranks run as threads. Defining main here keeps gtest_main's out.
#include <gtest/gtest.h>

#include <cstdio>

#include "harness.h"
#include "kiri/base/log.h"
#include "kiri/comm/mpi/mpi_runtime.h"

namespace {

// Ranks other than 0 print only their failures.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!kiri::comm::launched_by_mpi()) return RUN_ALL_TESTS();
  kiri::comm::MpiRuntime runtime;
  kiri::log::set_rank(runtime.world_rank());
  if (runtime.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(runtime.world_rank()));
  }
  kiri::comm::testing::set_mpi_world(kiri::comm::mpi_world());
  const int rc = RUN_ALL_TESTS();
  kiri::comm::testing::set_mpi_world(nullptr);
  return rc;
}
