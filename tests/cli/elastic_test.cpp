// Fewer ranks after a failure (kiri launch --exclude-failed --min-ranks): a checkpoint of
// dp 2 x tp 2 at ZeRO-1 continues on tp 2 alone, --global-batch's grad_accum keeping the
// global batch. The sample stream goes on where the checkpoint left it: over the steps kept
// (before the checkpoint, then after the restart) every position of the epoch is read once,
// none twice or skipped; the steps lost read the same samples as their replacements, whose
// losses equal the 4-rank run's.
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <mutex>
#include <set>

#include "kiri/cli/train_planning.h"
#include "kiri/comm/local/local.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

using Reads = std::map<int64_t, std::multiset<uint64_t>>;  // step -> sample positions read

// Records the positions a trainer's ranks of tp index 0 read (tp ranks read the same rows).
void observe(Trainer& t, Reads& reads, std::mutex& m) {
  if (t.dims().tp_index() != 0) return;
  t.set_sample_observer([&t, &reads, &m](uint64_t first, int64_t n) {
    std::lock_guard<std::mutex> lock(m);
    for (int64_t i = 0; i < n; ++i) reads[t.step() + 1].insert(first + static_cast<uint64_t>(i));
  });
}

TEST(Elastic, FewerRanksContinueTheSampleStreamAndTheLosses) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("shrink");
  RunConfig four = equivalence_config(1, 4, 32, 2);
  four.parallel.dp = 2;
  four.parallel.tp = 2;
  four.parallel.zero_stage = 1;
  four.checkpoint.dir = root;
  four.checkpoint.async = true;
  ASSERT_EQ(global_batch(four), 4);
  Reads before, after;
  std::mutex m;
  std::vector<double> lost;  // the 4-rank run's steps 4 and 5
  comm::run_local(4, [&](comm::Communicator& world) {
    Trainer t(four, world);
    observe(t, before, m);
    for (int s = 0; s < 3; ++s) t.train_step();
    t.save_checkpoint();
    for (int s = 0; s < 2; ++s) {
      const double loss = t.train_step().loss;
      if (world.rank() == 0) lost.push_back(loss);
    }
  });
  RunConfig two = four;
  two.parallel.dp = 0;  // inferred: 1
  const std::string note = cli::fit_global_batch(two, 4, 2);
  EXPECT_EQ(two.train.grad_accum, 2);
  EXPECT_EQ(two.train.micro_batch, 2);
  EXPECT_NE(note.find("train.grad_accum = 2 on dp 1"), std::string::npos) << note;
  std::vector<double> again;
  comm::run_local(2, [&](comm::Communicator& world) {
    Trainer t(two, world);
    t.load_checkpoint(root);
    EXPECT_EQ(t.step(), 3);
    observe(t, after, m);
    for (int s = 0; s < 3; ++s) {
      const double loss = t.train_step().loss;
      if (world.rank() == 0) again.push_back(loss);
    }
  });
  // Steps 1-3 before the checkpoint, 4-6 after the restart: positions 0..23, each once.
  std::multiset<uint64_t> kept;
  for (int64_t s = 1; s <= 3; ++s) kept.insert(before[s].begin(), before[s].end());
  for (int64_t s = 4; s <= 6; ++s) {
    EXPECT_EQ(after[s].size(), 4u) << "step " << s;
    kept.insert(after[s].begin(), after[s].end());
  }
  std::multiset<uint64_t> all;
  for (uint64_t p = 0; p < 24; ++p) all.insert(p);
  EXPECT_EQ(kept, all);
  // The lost steps read what their replacements read, and lost the same losses.
  for (int64_t s = 4; s <= 5; ++s) EXPECT_EQ(before[s], after[s]) << "step " << s;
  ASSERT_EQ(lost.size(), 2u);
  ASSERT_EQ(again.size(), 3u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(again[i], lost[i], 1e-5 * lost[i]) << i;
}

// --global-batch when the world does not divide it: a smaller micro_batch makes it exact,
// else the nearest grad_accum, and the note says so.
TEST(Elastic, GlobalBatchIsKeptExactlyWhenTheWorldAllows) {
  RunConfig c = byte_test_config(1, 4, 32, 4);  // micro_batch 4: 4 x 3 = 12 already
  EXPECT_EQ(cli::fit_global_batch(c, 12, 3), "");
  EXPECT_EQ(c.train.grad_accum, 1);
  RunConfig a = byte_test_config(1, 4, 32, 4);
  std::string note = cli::fit_global_batch(a, 24, 3);  // 4 x 3 x 2
  EXPECT_EQ(a.train.grad_accum, 2);
  EXPECT_EQ(a.train.micro_batch, 4);
  RunConfig b = byte_test_config(1, 4, 32, 4);
  note = cli::fit_global_batch(b, 18, 3);  // 4 x 3 does not divide 18; 3 x 3 x 2 does
  EXPECT_EQ(b.train.micro_batch, 3);
  EXPECT_EQ(b.train.grad_accum, 2);
  EXPECT_NE(note.find("train.micro_batch = 3 (was 4)"), std::string::npos) << note;
  RunConfig d = byte_test_config(1, 4, 32, 2);
  note = cli::fit_global_batch(d, 16, 3);  // no micro_batch <= 2 times 3 divides 16
  EXPECT_EQ(d.train.grad_accum, 3);        // 2 x 3 x 3 = 18, the nearest to 16
  EXPECT_NE(note.find("--global-batch 16 cannot be kept on dp 3"), std::string::npos) << note;
  EXPECT_NE(note.find("so the global batch is 18 sequences"), std::string::npos) << note;
}

}  // namespace
}  // namespace kiri::train
