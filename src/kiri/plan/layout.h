#pragma once
// One way to cut a training step: dp × tp × pp, ZeRO stage, precision,
// recomputation, sequence parallelism, pipeline schedule and batch shape.
#include <cstdint>
#include <string>

#include "kiri/config/layout.h"
#include "kiri/plan/specs.h"

namespace kiri::plan {

// The layout's own enums (config/layout.h) under the planner's names.
using Precision = kiri::Precision;
using Recompute = kiri::ActivationCheckpointing;  // none | selective | full (every_k: full)
using Schedule = kiri::PipelineSchedule;
using OffloadTarget = kiri::OffloadTier;  // the CPU backend's tiers: none | nvme
using OffloadSpec = kiri::Offload;        // which states live on NVMe, the pool, the I/O shape
using RecomputeModules = kiri::RecomputeModules;  // selective: core_attn, layernorm, mlp_act
using kiri::name;
// Which activation model: Korthikanti et al. 2022 (16-bit activations, attention scores
// stored) or what kiri stores (fp32 activations, attention's log-sum-exp only).
enum class ActivationForm { kPaper, kKiri };
// The paper form's attention: Korthikanti's, which stores the s² softmax (and its dropout)
// for backward, or FlashAttention's (Dao et al. 2022), which stores the log-sum-exp per query
// row and recomputes QKᵀ and the softmax in backward. kiri's own attention is the second
// kind, so the kiri form always assumes it.
enum class Attention { kStandard, kFlash };

// What one element of the optimizer's pass streams (optim::StateStore): bytes per element
// (4 x 3 with a 16-bit dtype: master, m, v; 4 x 2 in fp32: m, v; + d for values under
// parameter offload, + d for gradients under gradient offload), and the granule a chunk is
// whole of, in elements (a block of the narrowest state).
struct StreamShape {
  int64_t bytes_per_element = 0;
  int64_t granule = 0;
};
StreamShape stream_shape(const OffloadSpec& offload, Precision dtype);

const char* name(ActivationForm f);
const char* name(Attention a);
// Parse the command-line spellings (fp32|bf16|fp16, none|selective|full,
// gpipe|1f1b|interleaved, paper|kiri); kConfig naming the option otherwise.
// parse_recompute is --activation-checkpointing's (kiri train's word).
Precision parse_precision(const std::string& s);
Recompute parse_recompute(const std::string& s);
Schedule parse_schedule(const std::string& s);
ActivationForm parse_form(const std::string& s);
Attention parse_attention(const std::string& s);  // standard | flash
// none | nvme; cpu is kConfig explaining that host memory is where the state already is.
OffloadTarget parse_offload(const std::string& s, const std::string& option);

// Bytes of a parameter / gradient value: 4 (fp32) or 2.
int value_bytes(Precision p);

// A layout as the planner sees it: kiri's layout (dp x tp x pp, ZeRO stage, shard group,
// activation_checkpointing, sequence parallelism, schedule, virtual stages, dtype, offload)
// and the batch's shape. The pipeline's micro-batches come from the batch: m = B / (b x dp)
// (pipeline micro-batches, or gradient accumulation with pp = 1), so the base's
// `microbatches` is set by validate from that.
struct Layout : kiri::Layout {
  Precision dtype = Precision::kBf16;  // the planner's default: bf16 mixed precision
  OffloadSpec offload;                 // which states live on NVMe (kiri's offload_spec)
  // selective: what it recomputes, parsed once from the names (the other modes ignore it);
  // Megatron's default core_attn.
  RecomputeModules modules{.core_attn = true};
  int64_t micro_batch = 1;   // b: sequences per micro-batch per rank
  int64_t global_batch = 1;  // B: sequences per optimizer step
  int64_t seq_len = 1024;    // s
  bool overlap_dp = true;    // dp communication overlaps backward
  ActivationForm form = ActivationForm::kKiri;
  Attention paper_attention = Attention::kStandard;  // the paper form's (kiri's: flash)
  // Megatron keeps fp32 gradient buffers (main_grad) under 16-bit training and reduces them in
  // fp32; kiri keeps gradients in the dtype.
  bool fp32_grads = false;

  // The attention the activation and FLOP models assume: flash in the kiri form.
  Attention attention() const {
    return form == ActivationForm::kKiri ? Attention::kFlash : paper_attention;
  }
  // Bytes of a gradient element: 4 with fp32 gradient buffers, else the dtype's.
  int grad_bytes() const { return fp32_grads ? 4 : value_bytes(dtype); }
  // m = B / (b · dp): micro-batches per step (gradient accumulation = pipeline micro-batches).
  int64_t step_microbatches() const { return global_batch / (micro_batch * dp); }
  // "dp 8 x tp 1 x pp 1, zero 0, bf16, recompute none, b 1, m 64[, offload optimizer]"
  std::string str() const;
};

// global batch = micro-batch × gradient accumulation × dp.
int64_t global_batch(int64_t micro_batch, int64_t grad_accum, int64_t dp);

// Raises kConfig naming the rule and the numbers: positive sizes, dp·tp·pp = world (when
// world > 0), tp divides heads (LLaMA: both the query and the key/value heads, named) and
// the MLP width, pp ≤ layers, ZeRO stage 0-3 and ≤ 1 with pp > 1 (kiri's rule), the shard
// group divides dp, B a multiple of b·dp, the schedule's rules (interleaved: v ≥ 2, m a
// multiple of pp, layers ≥ pp·v; otherwise v = 1), the sequence within the model's context
// (GPT-2's learned positions; LLaMA's RoPE has none). A parameter-count-only model takes dp
// and the ZeRO stage only. Offload: parameters on NVMe need ZeRO stage 3 and the optimizer
// states on NVMe (kiri's offload.parameters rule), gradients on NVMe ZeRO stage 2 or 3 and
// the optimizer states on NVMe (offload.gradients), the pool at least 2 buffers, a positive
// block (a multiple of 4096, O_DIRECT's alignment) and a buffer that holds one block of each
// offloaded state (optim::StateStore's rules).
void validate(const Layout& layout, const ModelSpec& model, int world = 0);

}  // namespace kiri::plan
