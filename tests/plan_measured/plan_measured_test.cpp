// The planner's exact mode (plan::rank_memory_exact) against kiri's allocator: for each
// layout of the layout-equivalence matrix (dp x tp x pp) and each ZeRO stage it allows,
// one training step on threads (or MPI ranks), then per rank the parameters, gradients and
// optimizer states to the byte and the peak within 10%; likewise with optimizer and parameter
// offload (RAM and NVMe per category to the byte), and for a Llama (llama-tiny's block: GQA,
// SwiGLU, RoPE, the head untied or tied) in fp32 and bf16. KIRI_PLAN_TINY=1 also runs the
// bench's tiny config (docs/planner.md's table; minutes).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "comm/harness.h"
#include "kiri/base/timer.h"
#include "kiri/parallel/pp/partition.h"
#include "kiri/plan/memory.h"
#include "kiri/plan/time.h"
#include "kiri/train/trainer.h"
#include "test_paths.h"

namespace kiri::train {
namespace {

using comm::Communicator;

// kGradients: the optimizer's and the gradients; kParameters: all three (offload.gradients'
// auto).
enum class Offload { kNone, kOptimizer, kGradients, kParameters };

struct Case {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  Offload offload = Offload::kNone;
  std::string path = {};  // offload.path (one folder per case, shared by its ranks)
  bool bf16 = false;      // bf16 compute with fp32 master weights (else fp32)
  bool sp = false;        // parallel.sequence_parallel (tp > 1)
};

struct Shape {
  int64_t n_layer = 8, n_head = 4, n_embd = 32, vocab = 0, block_size = 32;
  int64_t micro_batch = 2, seq = 32;
  int m = 4;  // micro-batches per step per dp rank
  // model.arch = llama (else GPT-2): key/value heads, the SwiGLU width, the head tied or not.
  bool llama = false;
  int64_t kv_heads = 0, ffn = 0;
  bool tied = true;
};

// configs/llama-tiny.json's block (4 query heads, 2 key/value heads, n_embd 64, SwiGLU 176)
// in 4 layers, so that ZeRO has several block units.
Shape llama_shape(bool tied) {
  Shape s;
  s.llama = true;
  s.n_layer = 4;
  s.n_embd = 64;
  s.kv_heads = 2;
  s.ffn = 176;
  s.tied = tied;
  return s;
}

RunConfig config_of(const Case& k, const Shape& s) {
  RunConfig c = default_run_config();
  c.model.n_layer = static_cast<int>(s.n_layer);
  c.model.n_head = static_cast<int>(s.n_head);
  c.model.n_embd = static_cast<int>(s.n_embd);
  c.model.block_size = static_cast<int>(s.block_size);
  if (s.vocab > 0) c.model.vocab_size = static_cast<int>(s.vocab);
  if (s.llama) {
    c.model.arch = kiri::Arch::kLlama;
    c.model.num_key_value_heads = static_cast<int>(s.kv_heads);
    c.model.intermediate_size = static_cast<int>(s.ffn);
    c.model.tie_word_embeddings = s.tied;
  }
  c.data.tokenizer = "byte";
  c.data.assets = KIRI_TEST_DATA_DIR;
  c.train.micro_batch = s.micro_batch;
  c.train.seq_len = s.seq;
  c.train.steps = 10;
  c.train.warmup = 2;
  c.parallel.dp = k.dp;
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.microbatches = s.m;
  c.parallel.zero_stage = k.zero;
  c.parallel.sequence_parallel = k.sp;
  c.parallel.timeout_s = 120;
  c.checkpoint.dir.clear();
  c.log.metrics.clear();
  if (k.bf16) c.train.dtype = kiri::Precision::kBf16;
  if (k.offload != Offload::kNone) {
    c.offload.optimizer = kiri::OffloadTier::kNvme;
    if (k.offload == Offload::kParameters) c.offload.parameters = kiri::OffloadTier::kNvme;
    if (k.offload == Offload::kGradients) c.offload.gradients = kiri::OffloadTier::kNvme;
    c.offload.path = k.path;
    c.offload.block_size = "4KiB";  // small units in several chunks, as in offload_train
    c.offload.buffer_mb = 0.0625;
    c.offload.buffer_count = 3;
  }
  return c;
}

// The planner's view of the run: the model, the layout and kiri's pipeline cut (from the
// real partitioner, which the plan library cannot depend on).
struct Planned {
  plan::ModelSpec model;
  plan::Layout layout;
  plan::KiriLayoutFacts facts;
};

Planned planned(const Case& k, const Shape& s, int64_t vocab) {
  Planned p;
  p.model = s.llama ? plan::llama_from_dims(s.n_layer, s.n_embd, s.n_head, s.kv_heads, s.ffn, vocab,
                                            s.tied, s.block_size)
                    : plan::model_from_dims(s.n_layer, s.n_embd, s.n_head, vocab, s.block_size);
  plan::Layout& l = p.layout;
  l.dp = k.dp;
  l.tp = k.tp;
  l.pp = k.pp;
  l.zero_stage = k.zero;
  l.sequence_parallel = k.sp;
  l.dtype = k.bf16 ? plan::Precision::kBf16 : plan::Precision::kFp32;
  l.schedule = plan::Schedule::k1F1B;
  l.micro_batch = s.micro_batch;
  l.global_batch = s.micro_batch * s.m * k.dp;
  l.seq_len = s.seq;
  l.wrap_blocks = 1;
  if (k.offload != Offload::kNone) {
    l.offload.optimizer = plan::OffloadTarget::kNvme;
    if (k.offload == Offload::kParameters) l.offload.parameters = plan::OffloadTarget::kNvme;
    if (k.offload == Offload::kParameters || k.offload == Offload::kGradients)
      l.offload.gradients = plan::OffloadTarget::kNvme;
    l.offload.block_size = 4096;
    l.offload.buffer_bytes = 65536;
    l.offload.buffer_count = 3;
  }
  if (k.pp > 1) {
    const int c = static_cast<int>(s.n_embd), a = static_cast<int>(s.n_head);
    const int v = static_cast<int>(vocab), t = static_cast<int>(s.seq);
    const auto costs = s.llama ? parallel::pp::llama_layer_costs(c, a, static_cast<int>(s.kv_heads),
                                                                 static_cast<int>(s.ffn), v, t)
                               : parallel::pp::gpt_layer_costs(c, a, v, t);
    for (const auto& st : parallel::pp::partition_layers(static_cast<int>(s.n_layer), k.pp, costs))
      p.facts.stages.push_back({st.first_block, st.end_block});
  }
  return p;
}

struct Measured {
  plan::MemoryBreakdown predicted;
  int64_t params = 0, grads = 0, optim = 0, peak = 0;
  int64_t nvme_params = 0, nvme_grads = 0, nvme_optim = 0;
  double step_s = 0;
};

Measured measure(Communicator& world, const Case& k, const Shape& s, int timed_steps) {
  Trainer t(config_of(k, s), world);
  const Planned p = planned(k, s, t.config().model.vocab_size);
  Measured r;
  t.train_step();
  std::vector<double> times;
  for (int i = 0; i < timed_steps; ++i) {
    world.barrier();
    Timer timer;
    t.train_step();
    world.barrier();
    times.push_back(timer.seconds());
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    r.step_s = times[times.size() / 2];
  }
  const MemoryStats st = t.allocator().stats();
  r.params = st.of(Category::kParameters);
  r.grads = st.of(Category::kGradients);
  r.optim = st.of(Category::kOptimizerStates);
  r.peak = st.peak_allocated;
  r.nvme_params = st.nvme_of(Category::kParameters);
  r.nvme_grads = st.nvme_of(Category::kGradients);
  r.nvme_optim = st.nvme_of(Category::kOptimizerStates);
  r.predicted = plan::rank_memory_exact(p.model, p.layout, t.dims().pp_index(), p.facts);
  return r;
}

std::string name_of(const Case& k, const Shape& s = Shape{}) {
  const char* off = k.offload == Offload::kNone        ? ""
                    : k.offload == Offload::kOptimizer ? " offload optimizer"
                    : k.offload == Offload::kGradients ? " offload gradients"
                                                       : " offload parameters";
  const char* arch = !s.llama ? "" : s.tied ? "llama tied " : "llama ";
  return arch + std::to_string(k.dp) + "x" + std::to_string(k.tp) + "x" + std::to_string(k.pp) +
         " zero " + std::to_string(k.zero) + off + (k.bf16 ? " bf16" : "") + (k.sp ? " sp" : "");
}

void check_case(const Case& k, const Shape& s = Shape{}) {
  KIRI_RUN_RANKS(k.dp * k.tp * k.pp, [k, s](Communicator& w) {
    omp_set_num_threads(1);  // ranks share the cores
    const Measured r = measure(w, k, s, 0);
    const plan::MemoryBreakdown& p = r.predicted;
    const std::string where = name_of(k, s) + " rank " + std::to_string(w.rank());
    EXPECT_EQ(static_cast<int64_t>(p.parameters), r.params) << where;
    EXPECT_EQ(static_cast<int64_t>(p.gradients), r.grads) << where;
    EXPECT_EQ(static_cast<int64_t>(p.optimizer_states), r.optim) << where;
    EXPECT_EQ(static_cast<int64_t>(p.nvme.parameters), r.nvme_params) << where;
    EXPECT_EQ(static_cast<int64_t>(p.nvme.gradients), r.nvme_grads) << where;
    EXPECT_EQ(static_cast<int64_t>(p.nvme.optimizer_states), r.nvme_optim) << where;
    const double peak = static_cast<double>(r.peak);
    EXPECT_NEAR(p.total(), peak, 0.1 * peak) << where;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::printf("%-16s rank %d: peak predicted %10.0f measured %10lld (%+.1f%%)\n",
                name_of(k, s).c_str(), w.rank(), p.total(), static_cast<long long>(r.peak),
                100.0 * (p.total() - peak) / peak);
  });
}

void check_layout(int dp, int tp, int pp, const Shape& s = Shape{}, bool bf16 = false,
                  bool sp = false) {
  for (int zero = 0; zero <= (pp > 1 ? 1 : 3); ++zero) {
    const Case k{dp, tp, pp, zero, Offload::kNone, "", bf16, sp};
    SCOPED_TRACE(name_of(k, s));
    check_case(k, s);
  }
}

// Every offload case of tests/offload_train: the RAM per category and on NVMe to the
// byte, the peak within 10% (the staging pool and the parameter staging in buffers).
void check_offload(int dp, int tp, int pp, Offload offload, bool bf16 = false) {
  const int lowest = offload == Offload::kParameters ? 3 : offload == Offload::kGradients ? 2 : 0;
  for (int zero = lowest; zero <= (pp > 1 ? 1 : 3); ++zero) {
    Case k{dp, tp, pp, zero, offload, "", bf16};
    k.path = (std::filesystem::temp_directory_path() /
              ("kiri_plan_offload_" + std::to_string(::getpid()) + "_" + std::to_string(dp) +
               std::to_string(tp) + std::to_string(pp) + std::to_string(zero)))
                 .string();
    SCOPED_TRACE(name_of(k));
    check_case(k);
    std::filesystem::remove_all(k.path);  // every rank's swap space has gone with its trainer
  }
}

TEST(PlanMeasuredOffload, Optimizer1x1x1) {
  check_offload(1, 1, 1, Offload::kOptimizer);
}
TEST(PlanMeasuredOffload, Optimizer2x1x1) {
  check_offload(2, 1, 1, Offload::kOptimizer);
}
TEST(PlanMeasuredOffload, Optimizer1x2x1) {
  check_offload(1, 2, 1, Offload::kOptimizer);
}
TEST(PlanMeasuredOffload, Optimizer1x1x2) {
  check_offload(1, 1, 2, Offload::kOptimizer);
}
TEST(PlanMeasuredOffload, OptimizerBf16On2x1x1) {
  check_offload(2, 1, 1, Offload::kOptimizer, true);
}
TEST(PlanMeasuredOffload, OptimizerBf16On1x1x2) {
  check_offload(1, 1, 2, Offload::kOptimizer, true);
}
TEST(PlanMeasuredOffload, OptimizerBf16On1x2x1) {
  check_offload(1, 2, 1, Offload::kOptimizer, true);
}
TEST(PlanMeasuredOffload, ParametersBf16On1x2x1) {
  check_offload(1, 2, 1, Offload::kParameters, true);
}
TEST(PlanMeasuredOffload, ParametersBf16On2x1x1) {
  check_offload(2, 1, 1, Offload::kParameters, true);
}
TEST(PlanMeasuredOffload, GradientsBf16On2x1x1) {
  check_offload(2, 1, 1, Offload::kGradients, true);
}
TEST(PlanMeasuredOffload, Gradients1x2x1) {
  check_offload(1, 2, 1, Offload::kGradients);
}
TEST(PlanMeasuredOffload, Parameters1x1x1) {
  check_offload(1, 1, 1, Offload::kParameters);
}
TEST(PlanMeasuredOffload, Parameters2x1x1) {
  check_offload(2, 1, 1, Offload::kParameters);
}
TEST(PlanMeasuredOffload, Parameters4x1x1) {
  check_offload(4, 1, 1, Offload::kParameters);
}
TEST(PlanMeasuredOffload, Parameters1x2x1) {
  check_offload(1, 2, 1, Offload::kParameters);
}

TEST(PlanMeasured, L1x1x1) {
  check_layout(1, 1, 1);
}
TEST(PlanMeasured, L2x1x1) {
  check_layout(2, 1, 1);
}
TEST(PlanMeasured, L1x2x1) {
  check_layout(1, 2, 1);
}
TEST(PlanMeasured, L1x1x2) {
  check_layout(1, 1, 2);
}
TEST(PlanMeasured, L4x1x1) {
  check_layout(4, 1, 1);
}
TEST(PlanMeasured, L1x4x1) {
  check_layout(1, 4, 1);
}
TEST(PlanMeasured, L1x1x4) {
  check_layout(1, 1, 4);
}
TEST(PlanMeasured, L2x2x1) {
  check_layout(2, 2, 1);
}
TEST(PlanMeasured, L2x1x2) {
  check_layout(2, 1, 2);
}
TEST(PlanMeasured, L1x2x2) {
  check_layout(1, 2, 2);
}

// Sequence parallelism (the residual stream split over tp, the regions' inputs kept whole):
// tp 2 and 4, with dp 2 and pp 2, fp32 and bf16.
TEST(PlanMeasuredSp, L1x2x1) {
  check_layout(1, 2, 1, Shape{}, false, true);
}
TEST(PlanMeasuredSp, Bf16On1x2x1) {
  check_layout(1, 2, 1, Shape{}, true, true);
}
TEST(PlanMeasuredSp, L1x4x1) {
  check_layout(1, 4, 1, Shape{}, false, true);
}
TEST(PlanMeasuredSp, L2x2x1) {
  check_layout(2, 2, 1, Shape{}, false, true);
}
TEST(PlanMeasuredSp, L1x2x2) {
  check_layout(1, 2, 2, Shape{}, false, true);
}
TEST(PlanMeasuredSp, LlamaOn1x2x1) {
  check_layout(1, 2, 1, llama_shape(false), false, true);
}

// A Llama (llama_shape): one rank, dp 2 (DDP and ZeRO 1-3), tp 2 (one key/value head per
// rank) and pp 2 (the untied head on the last stage only), fp32 and bf16; a tied head on
// dp 2 and pp 2 (the last stage's copy of the embedding).
TEST(PlanMeasuredLlama, L1x1x1) {
  check_layout(1, 1, 1, llama_shape(false));
}
TEST(PlanMeasuredLlama, L2x1x1) {
  check_layout(2, 1, 1, llama_shape(false));
}
TEST(PlanMeasuredLlama, L1x2x1) {
  check_layout(1, 2, 1, llama_shape(false));
}
TEST(PlanMeasuredLlama, L1x1x2) {
  check_layout(1, 1, 2, llama_shape(false));
}
TEST(PlanMeasuredLlama, Bf16On1x1x1) {
  check_layout(1, 1, 1, llama_shape(false), true);
}
TEST(PlanMeasuredLlama, Bf16On2x1x1) {
  check_layout(2, 1, 1, llama_shape(false), true);
}
TEST(PlanMeasuredLlama, Bf16On1x2x1) {
  check_layout(1, 2, 1, llama_shape(false), true);
}
TEST(PlanMeasuredLlama, Bf16On1x1x2) {
  check_layout(1, 1, 2, llama_shape(false), true);
}
TEST(PlanMeasuredLlama, Tied2x1x1) {
  check_layout(2, 1, 1, llama_shape(true));
}
TEST(PlanMeasuredLlama, Tied1x1x2) {
  check_layout(1, 1, 2, llama_shape(true));
}

// docs/planner.md's table: the bench's tiny config (4 x 256, V 50257, seq 128, batch 8 per
// step), predicted vs measured peak and step time (this-machine preset). Opt-in: minutes.
TEST(PlanMeasured, TinyTable) {
  if (!std::getenv("KIRI_PLAN_TINY")) GTEST_SKIP() << "set KIRI_PLAN_TINY=1";
  KIRI_LOCAL_ONLY();
  struct Row {
    Case k;
    int m;
  };
  // Global batch 8 x 128 tokens: dp 2 runs 4 sequences per rank, pp 2 m = 4 of 2.
  const std::vector<Row> rows = {{{1, 1, 1, 0}, 1}, {{2, 1, 1, 0}, 1}, {{2, 1, 1, 1}, 1},
                                 {{2, 1, 1, 2}, 1}, {{2, 1, 1, 3}, 1}, {{1, 2, 1, 0}, 1},
                                 {{1, 1, 2, 0}, 4}};
  const plan::ClusterSpec cluster = plan::cluster_preset("this-machine");
  for (const Row& row : rows) {
    const Case k = row.k;
    Shape s;
    s.n_layer = 4;
    s.n_head = 4;
    s.n_embd = 256;
    s.vocab = 50257;
    s.block_size = 1024;
    s.seq = 128;
    s.m = row.m;
    s.micro_batch = 8 / (k.dp * row.m);
    const int world = k.dp * k.tp * k.pp;
    auto body = [&](Communicator& w) {
      omp_set_num_threads(1);
      const Measured r = measure(w, k, s, 3);
      const Planned p = planned(k, s, 50257);
      const plan::TimeBreakdown tb = plan::estimate_time(p.model, p.layout, cluster, p.facts);
      static std::mutex mu;
      std::lock_guard<std::mutex> lock(mu);
      std::printf(
          "| %s | %d | %.1f | %.1f | %+.1f%% | %.3f | %.3f | %+.0f%% |\n", name_of(k).c_str(),
          w.rank(), r.predicted.total() / 1048576.0, static_cast<double>(r.peak) / 1048576.0,
          100.0 * (r.predicted.total() - static_cast<double>(r.peak)) / static_cast<double>(r.peak),
          tb.step_s, r.step_s, 100.0 * (tb.step_s - r.step_s) / r.step_s);
      EXPECT_EQ(static_cast<int64_t>(r.predicted.parameters), r.params);
      EXPECT_EQ(static_cast<int64_t>(r.predicted.optimizer_states), r.optim);
    };
    comm::testing::run_ranks(world, body);
  }
}

}  // namespace
}  // namespace kiri::train
