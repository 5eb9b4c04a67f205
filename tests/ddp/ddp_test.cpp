// DDP equivalence: N ranks hold, after 10 steps, the parameters of one
// process trained on the same global batch. The same bodies run on ranks as
// threads (plain ctest) and on MPI ranks (kiri_ddp_tests_mpi2/4).
#include <gtest/gtest.h>

#include "comm/harness.h"
#include "ddp/ddp_bodies.h"

namespace kiri::train {
namespace {

using comm::Communicator;

TEST(Ddp, TwoRanksEqualOneProcess) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { ddp_equivalence(w, {}); });
}
TEST(Ddp, FourRanksEqualOneProcess) {
  KIRI_RUN_RANKS(4, [](Communicator& w) { ddp_equivalence(w, {}); });
}
TEST(Ddp, OneParameterPerBucket) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { ddp_equivalence(w, {.bucket_mb = 1e-6}); });
}
TEST(Ddp, OneBucketForAll) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { ddp_equivalence(w, {.bucket_mb = 1e4}); });
}
TEST(Ddp, AccumulationEqualsALargerMicroBatch) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { ddp_equivalence(w, {.grad_accum = 4}); });
}
TEST(Ddp, AccumulationOnFourRanks) {
  KIRI_RUN_RANKS(4, [](Communicator& w) { ddp_equivalence(w, {.grad_accum = 4}); });
}
TEST(Ddp, CountedBytesMatchTheGradientBytes) {
  KIRI_RUN_RANKS(2, ddp_bytes_match_formula);
}
TEST(Ddp, CountedBytesMatchOnFourRanks) {
  KIRI_RUN_RANKS(4, ddp_bytes_match_formula);
}

}  // namespace
}  // namespace kiri::train
