#include "kiri/bench/ddp_bench.h"

#include <algorithm>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/base/stats.h"
#include "kiri/base/timer.h"
#include "kiri/model/parallelize.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/step.h"

namespace kiri::bench {

namespace {

// A 1-layer, 8-wide model with the same vocabulary: a Replica that only
// provides the batch needs no full model.
kiri::GPTConfig tiny_stand_in(kiri::GPTConfig c) {
  c.n_layer = 1;
  c.n_head = 1;
  c.n_embd = 8;
  c.num_key_value_heads = 0;  // a Llama's: its one head's
  c.intermediate_size = 0;
  return c;
}

// One replica: model, flat store, optimizer, a batch of this rank's random tokens.
struct Replica {
  Allocator alloc;
  model::GPT<float> model;
  nn::ParameterStore store;
  optim::AdamW opt;
  Tensor x, y;
  Replica(const BenchSpec& s, int rank, bool with_model = true)
      : model(with_model ? s.model : tiny_stand_in(s.model)),
        store(model.parameters(), DType::kF32, alloc),
        opt(store, kiri::AdamWConfig{}, alloc) {
    store.initialize(s.init_seed);
    x = Tensor::empty({s.batch, s.seq}, DType::kI32, Category::kBuffers, alloc);
    y = Tensor::empty({s.batch, s.seq}, DType::kI32, Category::kBuffers, alloc);
    Rng rng(s.data_seed + static_cast<uint64_t>(rank));
    fill_random_tokens(rng, s.model.vocab_size, x, y);
  }
};

// Naive data parallelism: after backward, each gradient goes to rank 0,
// which sums and broadcasts it back, one parameter at a time, blocking.
void naive_sync(comm::Communicator& world, nn::ParameterStore& store, Allocator& alloc) {
  for (nn::Parameter* p : store.parameters()) {
    Tensor g = p->grad.view({p->numel()});
    if (world.rank() == 0) {
      Tensor buf = Tensor::empty({p->numel()}, DType::kF32, Category::kBuffers, alloc);
      for (int r = 1; r < world.size(); ++r) {
        world.recv(buf, r, 7);
        float* a = g.data<float>();
        const float* b = buf.data<float>();
        for (int64_t i = 0; i < p->numel(); ++i) a[i] += b[i];
      }
    } else {
      world.send(g, 0, 7);
    }
    world.broadcast(g, 0);
  }
}

}  // namespace

ParallelStepTimes time_parallel_steps(comm::Communicator& world, const BenchSpec& spec,
                                      const model::ParallelOptions& options) {
  ParallelStepTimes out;
  parallel::ParallelDims dims(world, {world.size(), 1, 1});
  const double weight = 1.0 / double(spec.batch * spec.seq * world.size());
  Allocator alloc;
  model::GPT<float> model(spec.model);
  model::ParallelGPT pm(model, dims, options, alloc);
  optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), kiri::AdamWConfig{}, alloc,
                   pm.norm_groups());
  opt.initialize(spec.init_seed);
  pm.synchronize_parameters();
  Replica data(spec, world.rank(), /*with_model=*/false);
  nn::Context ctx{alloc};
  ctx.poll = pm.poller();
  train::TrainingStep step(pm, opt, {.time_backward = true});
  train::StepSettings settings;
  settings.lr = spec.lr;
  settings.loss_weight = weight;
  const int total = spec.warmup_steps + spec.steps;
  for (int s = 0; s < total; ++s) {
    world.barrier();
    if (s == total - 1) dims.dp().reset_stats();
    Timer t;
    const double bs = step.run(ctx, data.x, data.y, settings).backward_s;
    const double st = t.seconds();
    if (s >= spec.warmup_steps) {
      out.backward_s.push_back(bs);
      out.step_s.push_back(st);
    }
  }
  out.peak = alloc.stats();
  for (int k = 0; k < comm::kNumOpKinds; ++k)
    out.last_step_sent[k] = dims.dp().stats(static_cast<comm::OpKind>(k)).bytes_sent;
  return out;
}

DdpBenchResult run_ddp_bench(comm::Communicator& world, const BenchSpec& spec) {
  DdpBenchResult r;
  r.ranks = world.size();
  const double weight = 1.0 / double(spec.batch * spec.seq * world.size());
  parallel::ParallelDims dims(world, {world.size(), 1, 1});
  std::vector<double> step, bwd, bwd_sync, ar, naive;
  {
    // Backward alone and naive DP on a replica without hooks.
    Replica plain(spec, world.rank());
    nn::Context ctx{plain.alloc};
    // The same reductions DDP does, with nothing to hide them behind.
    parallel::DistributedDataParallel ddp(plain.store, dims.dp(), {}, plain.alloc);
    for (int s = 0; s < spec.warmup_steps + spec.steps; ++s) {
      plain.store.zero_grad();
      plain.model.forward(ctx, plain.x, plain.y, weight);
      world.barrier();
      Timer t;
      plain.model.backward(ctx);
      const double b = t.seconds();
      world.barrier();
      Timer a;
      ddp.finalize_grads();
      const double ar_s = a.seconds();
      world.barrier();
      Timer n;
      plain.store.zero_grad();
      plain.model.forward(ctx, plain.x, plain.y, weight);
      plain.model.backward(ctx);
      naive_sync(world, plain.store, plain.alloc);
      plain.opt.clip_and_step(spec.lr);
      const double n_s = n.seconds();
      if (s >= spec.warmup_steps) {
        bwd.push_back(b);
        ar.push_back(ar_s);
        naive.push_back(n_s);
      }
    }
  }
  const ParallelStepTimes timed = time_parallel_steps(world, spec, {});
  step = timed.step_s;
  bwd_sync = timed.backward_s;
  r.step_s = median(step);
  r.tokens_per_s = double(spec.batch * spec.seq * world.size()) / r.step_s;
  r.backward_s = median(bwd);
  r.backward_sync_s = median(bwd_sync);
  r.allreduce_s = median(ar);
  r.hidden_fraction =
      r.allreduce_s > 0 ? 1.0 - (r.backward_sync_s - r.backward_s) / r.allreduce_s : 1.0;
  r.naive_step_s = median(naive);
  r.naive_tokens_per_s = double(spec.batch * spec.seq * world.size()) / r.naive_step_s;
  return r;
}

}  // namespace kiri::bench
