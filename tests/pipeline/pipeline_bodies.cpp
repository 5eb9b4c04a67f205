#include "pipeline/pipeline_bodies.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "kiri/data/corpus.h"
#include "kiri/parallel/pp/schedule.h"
#include "kiri/train/trainer.h"
#include "lowp_tolerance.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {

namespace {

RunConfig layout_config(const LayoutCase& k, int dp, int tp, int pp, int64_t micro_batch, int m) {
  RunConfig c = equivalence_config(8, 4, 32, micro_batch);
  // Grouped-query attention on every layout: tp divides the key/value heads (tp 2: one
  // each; tp 4: one of 4, each serving 2 query heads).
  if (k.arch == kiri::Arch::kLlama) make_llama(c, 32, 8, std::max(2, k.tp), 88, k.tied);
  c.train.dtype = k.bf16 ? kiri::Precision::kBf16 : kiri::Precision::kFp32;
  c.parallel.dp = dp;
  c.parallel.pp = pp;
  c.parallel.tp = tp;
  c.parallel.microbatches = m;
  c.parallel.schedule = parallel::pp::parse_schedule(pp > 1 ? k.schedule : "1f1b");
  c.parallel.virtual_stages = pp > 1 ? k.virtual_stages : 1;
  c.parallel.zero_stage = k.zero_stage;
  if (k.recompute) c.parallel.activation_checkpointing = ActivationCheckpointing::kFull;
  if (!k.selective.empty()) {
    c.parallel.activation_checkpointing = ActivationCheckpointing::kSelective;
    c.parallel.recompute_modules = k.selective;
  }
  c.parallel.sequence_parallel = k.sequence_parallel && tp > 1;
  return c;
}

// The masked cases' data: 160 short chats (user asks a sum, assistant answers), made by
// rank 0 in a folder named by its pid, which it broadcasts so that every rank (thread or
// process) trains on the same path.
std::string chat_corpus(comm::Communicator& world, Allocator& a) {
  Tensor pid = Tensor::zeros({1}, DType::kF64, Category::kBuffers, a);
  std::string dir;
  if (world.rank() == 0) {
    dir = ::kiri::testing::fresh_temp_dir("kiri_layout", "chat");
    std::ofstream out(dir + "/chat.jsonl");
    for (int i = 0; i < 160; ++i)
      out << "{\"messages\": [{\"role\": \"user\", \"content\": \"What is " << i << " plus "
          << 7 * i % 13 << "?\"}, {\"role\": \"assistant\", \"content\": \"" << i + 7 * i % 13
          << ".\"}]}\n";
    out.close();
    data::ByteTokenizer byte;
    data::DocumentOptions opts;
    opts.format = data::InputFormat::kChat;
    data::build_corpus({dir + "/chat.jsonl"}, byte, dir + "/shards", 0.5, opts);
    pid.data<double>()[0] = static_cast<double>(::getpid());
  }
  world.broadcast(pid, 0);
  return (std::filesystem::temp_directory_path() /
          ("kiri_layout_chat_" + std::to_string(static_cast<long>(pid.data<double>()[0]))) /
          "shards")
      .string();
}

// The reference: one process, the whole global batch in one micro-batch.
RunConfig reference_config(const LayoutCase& k) {
  LayoutCase r = k;
  r.zero_stage = 0;
  r.recompute = false;
  r.selective.clear();
  return layout_config(r, 1, 1, 1, 2 * k.microbatches * k.dp, 1);
}

}  // namespace

void layout_equivalence(comm::Communicator& world, LayoutCase k) {
  omp_set_num_threads(1);  // ranks share the cores
  ASSERT_EQ(world.size(), k.dp * k.tp * k.pp);
  RunConfig rc = reference_config(k), lc = layout_config(k, k.dp, k.tp, k.pp, 2, k.microbatches);
  if (k.masked) {
    Allocator a;
    rc.data.dir = lc.data.dir = chat_corpus(world, a);
    rc.data.corpus.clear();
    lc.data.corpus.clear();
  }
  Trainer ref(rc);
  Trainer t(lc, world);
  if (!k.bf16) {
    for (int s = 0; s < 5; ++s) {
      const double a = ref.train_step().loss, b = t.train_step().loss;
      EXPECT_NEAR(a, b, 1e-5 * std::fabs(a)) << "step " << s + 1 << " rank " << world.rank();
    }
    const auto pa = params_of(ref), pb = params_of(t);
    if (world.rank() == 0) {
      // Adam turns the layouts' fp32 reassociation of a near-zero gradient into up to
      // lr/100 on single weights (measured 1.1e-5 to 2.3e-5, the same few elements of
      // c_attn, c_fc and c_proj in Dp4, Tp2 and Tp4, once the byte vocabulary grew to 257
      // and shifted the init); a wrong sample or a lost gradient moves weights by ~lr.
      EXPECT_LT(max_abs_diff(pa, pb), 3e-5);
    }
    // Evaluation through the pipeline equals the reference's on the same
    // samples (the reference's one batch is the layout's m x dp batches).
    const double va = ref.evaluate(1), vb = t.evaluate(k.microbatches * k.dp);
    EXPECT_NEAR(va, vb, 1e-5 * va) << "rank " << world.rank();
    return;
  }
  // bf16: the layout accumulates each weight gradient over m micro-batches,
  // rounding each time, and (dp > 1) rounds its all-reduce; the reference
  // rounds once: r = m + 1 (+ 1) roundings may differ. The fp32 version's
  // tolerance is 1e-5.
  LowpDrift drift(ref.config(), k.microbatches + 1 + (k.dp > 1 ? 1 : 0), false, 1e-5);
  expect_losses_within(world, ref, t, drift, 5);
  const auto pa = params_of(ref), pb = params_of(t);
  if (world.rank() == 0) expect_params_within(pa, pb, drift);
  // The evaluation is a loss at the parameters after the last step.
  const double va = ref.evaluate(1), vb = t.evaluate(k.microbatches * k.dp);
  EXPECT_NEAR(va, vb, drift.loss_tolerance(drift.last_grad_norm(), va) * va)
      << "rank " << world.rank();
}

void selective_equivalence(comm::Communicator& world, LayoutCase k) {
  ASSERT_FALSE(k.selective.empty());
  layout_equivalence(world, k);
  // The same layout without recomputation, then with it, one after the other.
  const auto run = [&](const LayoutCase& c, std::vector<double>* out) {
    Trainer t(layout_config(c, c.dp, c.tp, c.pp, 2, c.microbatches), world);
    for (int s = 0; s < 5; ++s) {
      const StepMetrics m = t.train_step();
      out->push_back(m.loss);
      out->push_back(m.grad_norm);
    }
    return params_of(t);
  };
  LayoutCase plain = k;
  plain.selective.clear();
  std::vector<double> a, b;
  const auto pa = run(plain, &a), pb = run(k, &b);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i], b[i]) << (i % 2 ? "grad norm" : "loss") << " of step " << i / 2 + 1 << ", rank "
                          << world.rank();
  if (world.rank() == 0) {
    ASSERT_EQ(pa.size(), pb.size());
    for (const auto& [name, va] : pa) {
      const auto& vb = pb.at(name);
      ASSERT_EQ(va.size(), vb.size()) << name;
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), 4 * va.size())) << name;
    }
  }
}

void sequence_parallel_bytes(comm::Communicator& world, LayoutCase k) {
  omp_set_num_threads(1);
  ASSERT_EQ(world.size(), k.tp);
  // The bytes this rank's tp communicator sent in one step, and per kind its calls.
  const auto step = [&](bool sp, std::vector<int64_t>* calls) {
    LayoutCase c = k;
    c.sequence_parallel = sp;
    Trainer t(layout_config(c, 1, k.tp, 1, 2, k.microbatches), world);
    comm::Communicator& tp = t.dims().tp();
    tp.reset_stats();
    const StepMetrics m = t.train_step();
    int64_t bytes = 0;
    for (int i = 0; i < comm::kNumOpKinds; ++i) {
      const comm::OpStats s = tp.stats(static_cast<comm::OpKind>(i));
      bytes += s.bytes_sent;
      calls->push_back(s.calls);
    }
    // The step's metrics (metrics.jsonl's `comm`) count the tp group too: only it gathers
    // and reduce-scatters here, so those kinds agree with it call for call and byte for byte.
    for (comm::OpKind o : {comm::OpKind::kAllGather, comm::OpKind::kReduceScatter}) {
      const comm::OpStats s = tp.stats(o);
      comm::OpStats in_metrics;
      for (const auto& [name, st] : m.comm)
        if (name == comm::op_kind_name(o)) in_metrics = st;
      EXPECT_EQ(in_metrics.calls, s.calls) << comm::op_kind_name(o);
      EXPECT_EQ(in_metrics.bytes_sent, s.bytes_sent) << comm::op_kind_name(o);
    }
    return bytes;
  };
  std::vector<int64_t> tp_calls, sp_calls;
  const int64_t tp_bytes = step(false, &tp_calls), sp_bytes = step(true, &sp_calls);
  // The norms' gradients: per micro-batch one F32 all-reduce per block (its two norms)
  // and one for the final norm, each 2 (P-1) B / P bytes sent (docs/comm.md).
  const RunConfig cfg = layout_config(k, 1, k.tp, 1, 2, k.microbatches);
  const int64_t c = cfg.model.n_embd, per_norm = cfg.model.llama() ? c : 2 * c;
  const auto all_reduce = [&](int64_t numel) { return 2 * (k.tp - 1) * numel * 4 / k.tp; };
  const int64_t norms =
      k.microbatches * (cfg.model.n_layer * all_reduce(2 * per_norm) + all_reduce(per_norm));
  // Selective `layernorm`: each region's input X_r [N/P, C] (F32) all-gathered again in
  // backward, (P-1) N/P C 4 bytes sent per rank; tp keeps X_region and recomputes it whole.
  bool layernorm = false;
  for (const std::string& m : k.selective) layernorm = layernorm || m == "layernorm";
  const int64_t rows = cfg.train.micro_batch * cfg.train.seq_len;
  const int64_t regathers =
      layernorm ? k.microbatches * cfg.model.n_layer * 2 * (k.tp - 1) * rows / k.tp * c * 4 : 0;
  EXPECT_EQ(sp_bytes, tp_bytes + norms + regathers)
      << "tp " << tp_bytes << ", norms " << norms << ", re-gathers " << regathers;
  const auto kind = [](comm::OpKind o) { return static_cast<size_t>(o); };
  // Plain tp: no all-gather, no reduce-scatter; sp: per micro-batch and block, 2 regions
  // x (all-gather + reduce-scatter) forward and backward, + the embedding's and the head's.
  EXPECT_EQ(tp_calls[kind(comm::OpKind::kAllGather)], 0);
  const int64_t per_direction = k.microbatches * (2 * cfg.model.n_layer + 1) * 2;
  const int64_t regather_calls = layernorm ? k.microbatches * 2 * cfg.model.n_layer : 0;
  EXPECT_EQ(sp_calls[kind(comm::OpKind::kAllGather)], per_direction + regather_calls);
  EXPECT_EQ(sp_calls[kind(comm::OpKind::kReduceScatter)], per_direction);
}

void layout_checkpoint_round_trip(comm::Communicator& world, LayoutCase k) {
  omp_set_num_threads(1);
  checkpoint_round_trip(world, layout_config(k, k.dp, k.tp, k.pp, 2, k.microbatches),
                        reference_config(k), shared_temp_dir(world, "layout_ckpt"), 2, 2, 1);
}

}  // namespace kiri::train
