// validate_offload (train/offload_config.h): every rule between the offload I/O keys is a
// kConfig error naming the keys and the numbers, all problems in one message; the tiers'
// rules are the layout's (check_layout, the same way); io_options maps the keys onto the I/O
// engine's options.
#include <gtest/gtest.h>

#include <string>

#include "kiri/base/error.h"
#include "kiri/train/offload_io.h"

namespace kiri::train {
namespace {

RunConfig on(kiri::OffloadTier optimizer = kiri::OffloadTier::kNvme,
             kiri::OffloadTier parameters = kiri::OffloadTier::kNone) {
  RunConfig c = default_run_config();
  c.offload.optimizer = optimizer;
  c.offload.parameters = parameters;
  return c;
}

// The message validate_offload or the layout's rules raise ("" when none).
std::string problem(const RunConfig& c) {
  try {
    validate_offload(c);
    check_layout(c);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.message();
  }
  return "";
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(ValidateOffload, DefaultsAndOptimizerOffloadAtAnyStagePass) {
  EXPECT_EQ(problem(default_run_config()), "");
  for (int stage : {0, 1, 2, 3}) {
    RunConfig c = on();
    c.parallel.zero_stage = stage;
    EXPECT_EQ(problem(c), "") << stage;
  }
  RunConfig both = on(kiri::OffloadTier::kNvme, kiri::OffloadTier::kNvme);
  both.parallel.zero_stage = 3;
  EXPECT_EQ(problem(both), "");
  both.parallel.zero_stage = 0;
  both.parallel.sharding_strategy =
      kiri::ShardingStrategy::kFullShard;  // the strategy decides: stage 3
  EXPECT_EQ(problem(both), "");
}

TEST(ValidateOffload, CpuExplainsThatHostMemoryIsAlreadyWhereTheStateIs) {
  const std::string e = problem(on(kiri::OffloadTier::kCpu));
  EXPECT_TRUE(has(e,
                  "offload.optimizer = cpu: on the CPU backend host memory is already where the "
                  "optimizer states are (the device kiri computes on is the host's RAM)"))
      << e;
  EXPECT_TRUE(has(e, "use offload.optimizer = nvme, or none")) << e;
  RunConfig p = on(kiri::OffloadTier::kNone, kiri::OffloadTier::kCpu);
  p.parallel.zero_stage = 3;
  const std::string pe = problem(p);
  EXPECT_TRUE(has(pe,
                  "offload.parameters = cpu: on the CPU backend host memory is already where "
                  "the parameters are"))
      << pe;
  const std::string both = problem(on(kiri::OffloadTier::kCpu, kiri::OffloadTier::kCpu));
  EXPECT_TRUE(has(both,
                  "2 problems with the offload.* keys (docs/offload.md):\n  - "
                  "offload.optimizer = cpu"))
      << both;
  EXPECT_TRUE(has(both, "\n  - offload.parameters = cpu")) << both;
}

TEST(ValidateOffload, ParameterOffloadNeedsStage3AndOptimizerOffload) {
  RunConfig c = on(kiri::OffloadTier::kNvme, kiri::OffloadTier::kNvme);
  c.parallel.zero_stage = 2;
  std::string e = problem(c);
  EXPECT_TRUE(has(e,
                  "offload.parameters = nvme needs ZeRO stage 3 (ZeRO-Infinity: what goes to "
                  "NVMe is each rank's parameter shard), but parallel.zero_stage = 2"))
      << e;
  c.parallel.zero_stage = 0;
  c.parallel.sharding_strategy = kiri::ShardingStrategy::kShardGradOp;
  e = problem(c);
  EXPECT_TRUE(has(e, "but parallel.sharding_strategy = SHARD_GRAD_OP (ZeRO stage 2)")) << e;
  RunConfig alone = on(kiri::OffloadTier::kNone, kiri::OffloadTier::kNvme);
  alone.parallel.zero_stage = 3;
  e = problem(alone);
  EXPECT_TRUE(has(e,
                  "offload.parameters = nvme needs offload.optimizer = nvme too, got "
                  "offload.optimizer = none"))
      << e;
  alone.parallel.zero_stage = 1;  // both rules at once, in one message
  e = problem(alone);
  EXPECT_TRUE(has(e, "2 problems")) << e;
}

TEST(ValidateOffload, BlockSizeMustBeAMultipleOf4KiBUpTo1GiB) {
  for (const char* ok : {"4KiB", "4096", "256KiB", "1MiB", "1GiB"}) {
    RunConfig c = on();
    c.offload.block_size = ok;
    c.offload.buffer_mb = 4096;  // room for 3 blocks of 1 GiB
    EXPECT_EQ(problem(c), "") << ok;
  }
  RunConfig c = on();
  c.offload.block_size = "3000";
  std::string e = problem(c);
  EXPECT_TRUE(has(e,
                  "offload.block_size = '3000' is 3000 bytes: it must be a multiple of 4 KiB "
                  "(4096 bytes, O_DIRECT's alignment) up to 1 GiB"))
      << e;
  c.offload.block_size = "2GiB";
  EXPECT_TRUE(has(problem(c), "is 2147483648 bytes")) << problem(c);
  c.offload.block_size = "lots";
  e = problem(c);
  EXPECT_TRUE(has(e, "offload.block_size = 'lots' is not a byte size (e.g. 1MiB, 262144)")) << e;
}

TEST(ValidateOffload, BuffersMustHoldOneBlockOfEachOfTheThreeStates) {
  RunConfig c = on();
  c.offload.buffer_mb = 3;  // exactly 3 x 1 MiB
  EXPECT_EQ(problem(c), "");
  c.offload.buffer_mb = 2.5;
  std::string e = problem(c);
  EXPECT_TRUE(has(e,
                  "offload.buffer_mb = 2.5 (2.50 MiB) cannot hold one block of each of the 3 "
                  "optimizer states: it needs 3 x offload.block_size = 3 x 1.00 MiB = 3.00 MiB "
                  "(3 MiB) or more"))
      << e;
  c.offload.block_size = "256KiB";  // the same buffer holds 3 smaller blocks
  EXPECT_EQ(problem(c), "");
  c.offload.buffer_mb = 0;
  EXPECT_TRUE(has(problem(c), "offload.buffer_mb = 0 (0 B) cannot hold")) << problem(c);
  // Offload off: the buffer and block keys are unused, so they are not checked.
  RunConfig off = default_run_config();
  off.offload.buffer_mb = 1;
  EXPECT_EQ(problem(off), "");
}

TEST(ValidateOffload, PathBuffersAndQueueDepthWithOffloadOn) {
  RunConfig c = on();
  c.offload.path = "";
  EXPECT_TRUE(has(problem(c), "offload.path is empty: the swap files need a folder")) << problem(c);
  c = on();
  c.offload.buffer_count = 1;
  c.offload.queue_depth = 0;
  const std::string e = problem(c);
  EXPECT_TRUE(has(e, "2 problems")) << e;
  EXPECT_TRUE(has(e, "offload.buffer_count = 1: at least 2")) << e;
  EXPECT_TRUE(has(e, "offload.queue_depth = 0: at least 1")) << e;
}

TEST(IoOptions, MapsEngineQueueDepthAndBlockSize) {
  OffloadConfig o;
  offload::IoOptions io = io_options(o);  // the defaults: DeepSpeed's 8 and 1 MiB
  EXPECT_EQ(io.engine, kiri::IoEngine::kAuto);
  EXPECT_EQ(io.queue_depth, 8);
  EXPECT_EQ(io.block_size, int64_t{1} << 20);
  o.engine = IoEngine::kThreads;
  o.queue_depth = 32;
  o.block_size = "256KiB";
  io = io_options(o);
  EXPECT_EQ(io.engine, kiri::IoEngine::kThreads);
  EXPECT_EQ(io.queue_depth, 32);
  EXPECT_EQ(io.block_size, 262144);
  o.engine = IoEngine::kIoUring;
  EXPECT_EQ(io_options(o).engine, kiri::IoEngine::kIoUring);
  o.block_size = "1000";
  try {
    io_options(o);
    ADD_FAILURE() << "accepted a block of 1000 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_TRUE(has(e.message(), "offload.block_size = '1000' is 1000 bytes")) << e.message();
  }
  o.buffer_mb = 1.5;
  EXPECT_EQ(offload_buffer_bytes(o), 1572864);
}

}  // namespace
}  // namespace kiri::train
