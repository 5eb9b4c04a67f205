#include "ddp/ddp_bodies.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "kiri/comm/self.h"
#include "kiri/train/trainer.h"
#include "train_test_util.h"

namespace kiri::train {

namespace {

RunConfig ddp_config(int dp, int64_t micro_batch, int grad_accum, double bucket_mb) {
  RunConfig c = equivalence_config(2, 2, 32, micro_batch);
  c.train.grad_accum = grad_accum;
  c.parallel.dp = dp;
  c.parallel.bucket_mb = bucket_mb;
  return c;
}

}  // namespace

void ddp_equivalence(comm::Communicator& world, DdpCase k) {
  omp_set_num_threads(1);  // ranks share the cores
  const int n = world.size();
  // The reference: one process, a micro-batch as large as the global batch.
  RunConfig ref_cfg = ddp_config(1, 2 * n * k.grad_accum, 1, 25);
  Trainer ref(ref_cfg);
  RunConfig cfg = ddp_config(n, 2, k.grad_accum, k.bucket_mb);
  Trainer ddp(cfg, world);
  if (k.bucket_mb < 1e-3) {
    EXPECT_EQ(ddp.parallel_model().ddp()->buckets().size(), ddp.store().parameters().size());
  } else if (k.bucket_mb > 1e3) {
    EXPECT_EQ(ddp.parallel_model().ddp()->buckets().size(), 1u);
  }
  for (int s = 0; s < 10; ++s) {
    const double a = ref.train_step().loss, b = ddp.train_step().loss;
    EXPECT_NEAR(a, b, 1e-5 * std::fabs(a)) << "step " << s + 1 << " rank " << world.rank();
  }
  const float* p = ref.store().values().data<float>();
  const float* q = ddp.store().values().data<float>();
  double max_diff = 0;
  for (int64_t i = 0; i < ref.store().numel(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(p[i] - q[i])));
  EXPECT_LT(max_diff, 1e-5) << "rank " << world.rank();
}

void ddp_bytes_match_formula(comm::Communicator& world) {
  omp_set_num_threads(1);
  const int n = world.size();
  RunConfig cfg = ddp_config(n, 2, 1, 0.05);
  Trainer t(cfg, world);
  StepMetrics m = t.train_step();
  const int64_t grad_bytes = t.store().numel() * 4;
  const int64_t loss_bytes = 8;  // the reported loss, one f64
  // Ring all-reduce: each rank sends and receives 2 (N-1)/N of the bytes.
  auto ring = [n](int64_t bytes) { return 2 * (n - 1) * bytes / n; };
  const int64_t buckets = static_cast<int64_t>(t.parallel_model().ddp()->buckets().size());
  bool found = false;
  for (const auto& [kind, s] : m.comm) {
    if (kind != "all_reduce") continue;
    found = true;
    EXPECT_EQ(s.calls, buckets + 1);
    EXPECT_NEAR(static_cast<double>(s.bytes_sent),
                static_cast<double>(ring(grad_bytes) + ring(loss_bytes)), 8.0 * buckets)
        << "rank " << world.rank();
  }
  EXPECT_TRUE(found);
}

}  // namespace kiri::train
