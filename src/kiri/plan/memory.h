#pragma once
// The memory model: what one rank holds, per category (the allocator's categories:
// parameters, gradients, optimizer states, activations, buffers), in bytes.
#include <cstdint>
#include <vector>

#include "kiri/plan/layout.h"
#include "kiri/plan/specs.h"

namespace kiri::plan {

// The categories in memory (the device tier; on kiri's CPU backend that is RAM), and what
// offload moved to the NVMe tier beside them (swap files, not counted in total()).
struct MemoryBreakdown {
  double parameters = 0, gradients = 0, optimizer_states = 0, activations = 0, buffers = 0;
  struct Nvme {
    double parameters = 0, gradients = 0, optimizer_states = 0;
    double total() const { return parameters + gradients + optimizer_states; }
  } nvme;
  double model_states() const { return parameters + gradients + optimizer_states; }
  double total() const { return model_states() + activations + buffers; }
  // Model states wherever they are (the NVMe tier's too).
  double all_model_states() const { return model_states() + nvme.total(); }
};

// Adam(W) with mixed precision: 2-byte values and gradients, fp32 master weights, m and v
// (2 + 2 + 4 + 8 = 16 bytes, K = 12); fp32: 4 + 4 + 0 + 8.
struct StateBytesPerParam {
  double parameters, gradients, master_weights, moments;
  double optimizer_states() const { return master_weights + moments; }
  double total() const { return parameters + gradients + optimizer_states(); }
};
StateBytesPerParam state_bytes_per_param(Precision dtype);

// Parameters, gradients and optimizer states per rank for psi parameters sharded over n
// ranks at ZeRO stage 0-3 (docs/zero.md, "What each stage keeps and moves"; padding omitted).
MemoryBreakdown model_state_bytes(double psi, Precision dtype, int zero_stage, int n);

// ---- offload: the tiers ----
//
// The staging pool of optimizer offload (optim::StateStore): buffer_count buffers, each one
// chunk of every offloaded state: E bytes per element, 4 x 3 with a 16-bit dtype (master, m,
// v), 4 x 2 in fp32 (m, v), + d under parameter offload (the values stream with the states),
// + d under gradient offload (the gradients too; stream_shape in layout.h).
// A chunk is buffer_bytes / E elements rounded down to whole granules (block_size / 4
// elements; with values or gradients block_size / min(4, d)), but no more than the state of
// `state_numel` elements rounded up to a granule: count x chunk x E bytes.
double offload_pool_bytes(const OffloadSpec& offload, Precision dtype, double state_numel);

// Moves what layout.offload offloads to m.nvme: the optimizer states (+ their staging pool in
// buffers) and, under parameter offload, the parameter shard (+ two unit shards staged in
// buffers, the one being gathered and the one read ahead, of `unit_shard_elems` values each,
// whole 4 KiB pages), and under gradient offload the gradient shard (+ the unit shards in
// flight, in buffers: kMaxInflightGradWrites, and with accumulation
// kMaxInflightReductions + 1 more). `state_numel`: the rank's optimizer state elements.
void apply_offload(MemoryBreakdown& m, const Layout& layout, double state_numel,
                   double unit_shard_elems);

// Korthikanti et al. 2022, bytes of one transformer layer's stored activations for one
// micro-batch of b sequences of s tokens in 16-bit (Section 4): sbh(34 + 5as/h); tensor
// parallel t: sbh(10 + 24/t + 5as/(ht)); + sequence parallel: sbh/t(34 + 5as/h); selective
// recomputation drops the 5as/h term; full recomputation keeps the layer's input, 2sbh
// (2sbh/t with sequence parallelism). `flash`: FlashAttention keeps an fp32 log-sum-exp per
// query row and head, 4asb, in place of the 5as²b of the softmax and its dropout (5as/h -> 4a/h).
double korthikanti_layer_bytes(double s, double b, double h, double a, int t, bool sp,
                               Recompute recompute, bool flash = false);

// What a kiri GPT-2 block keeps for backward, one micro-batch of n = b·s tokens, by tensor, in
// bytes as kiri's allocator counts them (docs/parallelism.md, "Activations per layer", derives
// each row). t = tp; q = t under sequence parallelism, else 1 (the residual stream's rows on
// this rank: n/q). fp32 = 4 bytes; under mixed precision (bf16, fp16) the linear layers keep
// 16-bit copies of their inputs (2 bytes) and everything else stays fp32. Storage shared by two
// layers counts once (fp32: c_proj's input is the attention output, the MLP c_proj's is GELU's
// output). Full recomputation keeps `input` only.
// Selective recomputation drops what `modules` recompute (model/layers.h): core_attn `lse` and,
// under mixed precision, `attention_out` (in fp32 it is c_proj's input, kept anyway; `qkv`
// stays, the core's input); layernorm `region_inputs`; mlp_act GELU's output from
// `mlp_hidden` (c_proj's input; h stays). The other modes ignore `modules`.
struct KiriLayerActivations {
  double input = 0;          // the block's input x, kept by ln_1: [n/q, C] fp32
  double x1 = 0;             // x + attn(ln_1(x)), kept by ln_2: [n/q, C] fp32
  double norm_stats = 0;     // ln_1's and ln_2's mean and rstd: 4 × [n/q] fp32
  double region_inputs = 0;  // the attention's and the MLP's X_region (ColumnParallelInput,
                             // ln_1's / ln_2's output gathered): 2 × [n, C], whole even under
                             // sequence parallelism; 16-bit under mixed precision
  double qkv = 0;            // c_attn's output, kept by the attention core: [n, 3C/t] fp32
  double attention_out = 0;  // the core's output att [n, C/t] fp32 (c_proj's input in fp32)
  double attention_proj_copy = 0;  // mixed precision: c_proj's 16-bit input [n, C/t]
  double lse = 0;                  // the core's log-sum-exp [b, a/t, s] fp32 (no s×s scores)
  double mlp_hidden = 0;           // GELU's input h [n, 4C/t] fp32 + c_proj's input, GELU's output
                                   // [n, 4C/t] (fp32, or its 16-bit copy under mixed precision)
  double total() const {
    return input + x1 + norm_stats + region_inputs + qkv + attention_out + attention_proj_copy +
           lse + mlp_hidden;
  }
};
KiriLayerActivations kiri_layer_activations(double s, double b, double h, double a, int t, bool sp,
                                            Recompute recompute, Precision dtype = Precision::kFp32,
                                            RecomputeModules modules = {.core_attn = true});

// kiri_layer_activations(...).total(): fp32 4(2nh/q + 2nh + 12nh/t + 4n/q + bas/t), mixed
// precision 8nh/q + 4nh + 42nh/t + 4(4n/q + bas/t); full 4nh/q; selective less its modules'
// tensors (core_attn fp32 4bas/t, mixed 4bas/t + 4nh/t; layernorm 8nh, mixed 4nh; mlp_act
// 16nh/t, mixed 8nh/t).
double kiri_layer_bytes(double s, double b, double h, double a, int t, bool sp, Recompute recompute,
                        Precision dtype = Precision::kFp32,
                        RecomputeModules modules = {.core_attn = true});

// The same accounting for a LLaMA block (docs/planner.md, "LLaMA's activations"), kv = k's
// and v's width (kv heads × head_dim), f = the SwiGLU width, no dropout: sb(12h + 4kv + 6f)
// + 2as²b; tensor parallel t: sb(8h + (4h + 4kv + 6f)/t) + 2as²b/t; + sequence parallel:
// sb(12h + 4kv + 6f)/t + 2as²b/t; selective drops the scores; full keeps 2sbh (/t with sp);
// `flash`: the log-sum-exp 4asb/t in place of the scores' 2as²b/t.
double korthikanti_llama_layer_bytes(double s, double b, double h, double a, double kv, double f,
                                     int t, bool sp, Recompute recompute, bool flash = false);

// kiri's storage pattern at LLaMA's shapes (fp32): the input, the two RMSNorms' outputs and
// x1 (4·N·C, whole) + q, k, v, the attention output (2·N·C + 2·N·kv) and gate, up and their
// product (3·N·f), cut by t + the RMSNorms' 1/rms 2·N + the log-sum-exp B·H·T/t; sequence
// parallelism cuts the input, x1 and 1/rms by t, not the norms' outputs (the regions' inputs,
// kept gathered: [N, C]); `selective` drops its modules' (core_attn the log-sum-exp, layernorm
// the norms' outputs, mlp_act silu(gate)·up); `full` keeps the input.
double kiri_llama_layer_bytes(double s, double b, double h, double a, double kv, double f, int t,
                              bool sp, Recompute recompute,
                              RecomputeModules modules = {.core_attn = true});

// One layer of `model` for one micro-batch of the layout (its tp, sequence parallelism and
// form; the paper form doubled in fp32; the kiri form of GPT-2 in the layout's dtype, Llama's
// in fp32) under `recompute`.
double layer_activation_bytes(const ModelSpec& model, const Layout& layout, Recompute recompute);

// Blocks on pipeline stage `stage` of pp (the remainder of L/pp to the first stages).
int64_t layers_on_stage(int64_t n_layer, int pp, int stage);
// Parameters held by a rank of pipeline stage `stage` with tensor parallelism tp: its
// blocks (matrices and their column-parallel biases cut by tp, norms and row biases whole),
// on stage 0 the embeddings (wte vocab-parallel over V padded to a multiple of tp; GPT-2's
// wpe whole), on the last stage the final norm and the LM head (tied, as GPT-2's: a copy of
// wte when pp > 1; untied, as most LLaMAs': its own, vocab-parallel).
double stage_params(const ModelSpec& model, int tp, int pp, int stage);

// Layer-micro-batches of activations a rank of `stage` holds at its peak: pp = 1: one
// micro-batch (accumulation runs them one after the other); GPipe: m; 1F1B: min(pp − stage,
// m); interleaved 1F1B (Megatron's warm-up): min(2(pp − stage − 1) + (v − 1)·pp + 1, m·v)
// chunks of layers/v layers, i.e. L/pp·(1 + (pp − 1)/(pp·v)) on the first stage.
double layers_in_flight(const Layout& layout, int64_t stage_layers, int stage);

// The stage's activations: layers in flight × the per-layer bytes of layout.form (the paper
// form scaled by 2 for fp32), + with full recomputation one layer's working set (less its input), +
// on the last stage the logits of the micro-batches whose backward has not run (pp = 1 or 1F1B: 1,
// GPipe: m): kiri [N, V/t] (fp32; on one rank the loss's gradient, which the forward computes,
// in the compute dtype: 16-bit under mixed precision) and the int32 targets, paper 4·s·b·V/t
// (fp32 for the loss).
double activation_bytes(const ModelSpec& model, const Layout& layout, int stage);

// Transient communication buffers (kiri's, docs/zero.md): DDP reduces its buckets in place
// (0); stage 1 the reduce-scatter output of the largest unit; stage 2 a unit's full gradient
// and that output; stage 3 the gathered embeddings unit (held through backward for the tied
// head), the current and the prefetched unit, and one unit's full gradient; pp > 1 the send
// and receive buffers of one micro-batch's [b·s, h] activations.
double buffer_bytes(const ModelSpec& model, const Layout& layout, int stage);

// All of one rank of `stage`.
MemoryBreakdown rank_memory(const ModelSpec& model, const Layout& layout, int stage);

struct RankMemory {
  int stage = 0;  // the pipeline stage of the rank with the largest total
  MemoryBreakdown memory;
  std::vector<MemoryBreakdown> stages;  // one per pipeline stage
};
RankMemory worst_rank_memory(const ModelSpec& model, const Layout& layout);

// ---- kiri's exact layout: the allocator's bytes, not the paper forms ----
//
// What one rank of a kiri run allocates, to the byte for the model states (the allocator's
// parameters, gradients and optimizer_states after a step) and within about 10% for its
// peak (docs/planner.md, "kiri's own runs: exact mode"). GPT-2's structure or Llama's (a model
// of known dimensions; kConfig for a parameter count only).

// Blocks [first, end) of one pipeline stage (parallel::pp::partition_layers' cut).
struct StageBlocks {
  int64_t first = 0, end = 0;
};

struct KiriLayoutFacts {
  // One entry per pipeline stage; empty: layers_on_stage's split (the remainder first).
  // kiri cuts by FLOPs (parallel/pp/partition.h), which this library cannot see: pass its
  // cut for exact bytes under pp > 1.
  std::vector<StageBlocks> stages;
  int64_t threads = 1;  // OpenMP threads per rank (attention's scratch is per thread)
};

// Elements of a stage's parameter groups on one tensor-parallel rank, in the order of
// GPT::parameter_groups: [0] the embeddings (wte's padded(V)/t rows, + GPT-2's wpe; 0 off
// stage 0), one per block (GPT-2 (12h² + 7h)/t + 6h; Llama h(2h + 2kv + 3f)/t + 2h, kConfig
// naming the width when tp does not divide h, kv or f), and last the final norm (2h, Llama h)
// with the LM head: untied (Llama) its own padded(V)/t rows, tied the last stage's own copy
// of wte when pp > 1 (0 off the last stage).
std::vector<int64_t> kiri_parameter_groups(const ModelSpec& model, int tp, int pp, int stage,
                                           StageBlocks blocks);

// kiri's ZeRO units (elements, before padding): pp = 1 parallel::wrap_policy (the
// embeddings, every wrap_blocks blocks, the final group); pp > 1 one unit per group.
std::vector<int64_t> kiri_units(const std::vector<int64_t>& groups, int pp, int wrap_blocks);

// The allocator's model-state bytes: stage 0 the sum of the groups (a ParameterStore);
// stages 1-3 P = the units each padded to a multiple of n (docs/zero.md's table with P).
MemoryBreakdown kiri_model_state_bytes(const std::vector<int64_t>& units, Precision dtype,
                                       int zero_stage, int n);

// One rank of `stage`: exact model states; `activations` and `buffers` the bytes live at the
// step's peak (allocator.stats().peak_allocated ≈ total()), kiri form only. Under ZeRO the
// largest moment of backward, with the engine's cap of reductions in flight reached.
MemoryBreakdown rank_memory_exact(const ModelSpec& model, const Layout& layout, int stage,
                                  const KiriLayoutFacts& facts = {});

}  // namespace kiri::plan
