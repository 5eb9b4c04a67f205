// DDP equivalence: N ranks hold, after 10 steps, the parameters of one
// process trained on the same global batch. The bodies run on ranks as
// threads (local backend) here, and under mpirun in kiri_train_mpi_tests.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>

#include "ddp_bodies.h"
#include "kiri/comm/local/local.h"

namespace kiri::train {
namespace {

void run_ranks(int n, const std::function<void(comm::Communicator&)>& body) {
  comm::run_local(n, [&](comm::Communicator& world) {
    omp_set_num_threads(1);
    body(world);
  });
}

TEST(Ddp, TwoRanksEqualOneProcess) {
  run_ranks(2, [](comm::Communicator& w) { ddp_equivalence(w, {}); });
}
TEST(Ddp, FourRanksEqualOneProcess) {
  run_ranks(4, [](comm::Communicator& w) { ddp_equivalence(w, {}); });
}
TEST(Ddp, OneParameterPerBucket) {
  run_ranks(2, [](comm::Communicator& w) { ddp_equivalence(w, {.bucket_mb = 1e-6}); });
}
TEST(Ddp, OneBucketForAll) {
  run_ranks(2, [](comm::Communicator& w) { ddp_equivalence(w, {.bucket_mb = 1e4}); });
}
TEST(Ddp, AccumulationEqualsALargerMicroBatch) {
  run_ranks(2, [](comm::Communicator& w) { ddp_equivalence(w, {.grad_accum = 4}); });
}
TEST(Ddp, CountedBytesMatchTheGradientBytes) {
  run_ranks(2, ddp_bytes_match_formula);
}

}  // namespace
}  // namespace kiri::train
