#pragma once
// One way to cut a training step: dp × tp × pp, ZeRO stage, precision,
// recomputation, sequence parallelism, pipeline schedule and batch shape.
#include <cstdint>
#include <string>

#include "kiri/plan/specs.h"

namespace kiri::plan {

enum class Precision { kFp32, kBf16, kFp16 };
enum class Recompute { kNone, kSelective, kFull };
enum class Schedule { kGpipe, k1F1B, kInterleaved };
// Which activation model: Korthikanti et al. 2022 (16-bit activations, attention scores
// stored) or what kiri stores (fp32 activations, attention's log-sum-exp only).
enum class ActivationForm { kPaper, kKiri };

// Where a category of the training state lives when it is moved off the device (ZeRO-Offload,
// ZeRO-Infinity). kiri's CPU backend has only NVMe to move to (device and host memory are
// the same RAM); a GPU backend would add host memory here.
enum class OffloadTarget { kNone, kNvme };

// kiri's offload.* settings (train::OffloadConfig) as numbers: which states live on NVMe and
// the staging pool and I/O shape the swap files are streamed with.
struct OffloadSpec {
  OffloadTarget optimizer = OffloadTarget::kNone;   // fp32 master (16-bit runs), Adam m and v
  OffloadTarget parameters = OffloadTarget::kNone;  // ZeRO stage 3: the parameter shard
  OffloadTarget gradients = OffloadTarget::kNone;   // ZeRO stage 2-3: the gradient shard
  int buffer_count = 4;                             // staging buffers per rank
  int64_t buffer_bytes = int64_t{64} << 20;         // each
  int64_t block_size = int64_t{1} << 20;            // bytes per request
  int queue_depth = 8;                              // requests in flight
  bool any() const {
    return optimizer != OffloadTarget::kNone || parameters != OffloadTarget::kNone ||
           gradients != OffloadTarget::kNone;
  }
};

// What one element of the optimizer's pass streams (optim::StateStore): bytes per element
// (4 x 3 with a 16-bit dtype: master, m, v; 4 x 2 in fp32: m, v; + d for values under
// parameter offload, + d for gradients under gradient offload), and the granule a chunk is
// whole of, in elements (a block of the narrowest state).
struct StreamShape {
  int64_t bytes_per_element = 0;
  int64_t granule = 0;
};
StreamShape stream_shape(const OffloadSpec& offload, Precision dtype);

const char* name(Precision p);
const char* name(Recompute r);
const char* name(Schedule s);
const char* name(ActivationForm f);
const char* name(OffloadTarget t);
// Parse the command-line spellings (fp32|bf16|fp16, none|selective|full,
// gpipe|1f1b|interleaved, paper|kiri); kConfig naming the option otherwise.
Precision parse_precision(const std::string& s);
Recompute parse_recompute(const std::string& s);
Schedule parse_schedule(const std::string& s);
ActivationForm parse_form(const std::string& s);
// none | nvme; cpu is kConfig explaining that host memory is where the state already is.
OffloadTarget parse_offload(const std::string& s, const std::string& option);

// Bytes of a parameter / gradient value: 4 (fp32) or 2.
int value_bytes(Precision p);

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero_stage = 0;   // 0 = DDP, 1 = P_os, 2 = P_os+g, 3 = P_os+g+p (FSDP FULL_SHARD)
  int shard_group = 0;  // ranks a ZeRO shard spans; 0 = all of dp (HYBRID_SHARD: fewer)
  Precision dtype = Precision::kBf16;
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  Schedule schedule = Schedule::k1F1B;
  int virtual_stages = 1;    // v (interleaved only)
  int64_t micro_batch = 1;   // b: sequences per micro-batch per rank
  int64_t global_batch = 1;  // B: sequences per optimizer step
  int64_t seq_len = 1024;    // s
  int wrap_blocks = 1;       // blocks per ZeRO unit
  bool overlap_dp = true;    // dp communication overlaps backward
  ActivationForm form = ActivationForm::kKiri;
  OffloadSpec offload;

  int world() const { return dp * tp * pp; }
  int shard_size() const { return shard_group > 0 ? shard_group : dp; }
  // m = B / (b · dp): micro-batches per step (gradient accumulation = pipeline micro-batches).
  int64_t microbatches() const { return global_batch / (micro_batch * dp); }
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
