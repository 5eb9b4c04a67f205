#pragma once
// What the planner plans for: a model (a preset, explicit dimensions, or just a
// parameter count) and a cluster of devices. Numbers only; no kiri objects.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/config/gpt_config.h"

namespace kiri::plan {

// ModelSpec::arch is the config's Arch (config/gpt_config.h): one enum for runtime and planner.

struct ModelSpec {
  std::string name;
  Arch arch = Arch::kGpt2;
  int64_t n_layer = 0, hidden = 0, heads = 0, vocab = 0;
  int64_t ffn = 0;                  // MLP width; 0 = 4·hidden (GPT-2)
  int64_t kv_heads = 0;             // key/value heads (LLaMA's num_key_value_heads); 0 = heads
  bool tie_word_embeddings = true;  // the LM head is wte (GPT-2 always; LLaMA per config)
  int64_t max_seq = 1024;           // context length (GPT-2's position rows)
  double params = 0;                // > 0: a parameter count only (--params), no structure

  bool params_only() const { return params > 0 && n_layer == 0; }
  int64_t ffn_width() const { return ffn > 0 ? ffn : 4 * hidden; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head_dim() const { return hidden / heads; }
  // k's and v's width: kv heads × head_dim (hidden without grouped-query attention).
  int64_t kv_width() const { return kv_head_count() * head_dim(); }
  // One block: GPT-2 12h² + 13h; LLaMA 2h² + 2·h·kv_width + 3·h·ffn + 2h (q and o h×h,
  // k and v h×kv_width, gate/up/down h×ffn, two RMSNorms).
  int64_t layer_params() const;
  // The weights of a block's matrix multiplies (12h² for GPT-2): 2 FLOPs each per token.
  int64_t layer_matmul_params() const;
  // wte (+ wpe for GPT-2: V·h + max_seq·h).
  int64_t embedding_params() const;
  // The final norm: 2h (LayerNorm) or h (RMSNorm).
  int64_t final_norm_params() const;
  // The LM head's own weights: 0 when tied to wte, else V·h.
  int64_t head_params() const;
  // All of them (or `params` for a parameter-count-only model).
  double total_params() const;
};

// gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1.5B, gpt3-175B, llama-tiny, smollm-135M,
// tinyllama-1.1B, llama-7B, llama-13B, llama3-8B; raises kConfig naming the known ones.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// A GPT-2-style model of the given dimensions (kConfig on non-positive ones).
ModelSpec model_from_dims(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                          int64_t max_seq = 1024);
// LLaMA's SwiGLU width when a config does not give one (Meta's rule): 8h/3 rounded down,
// then up to a multiple of 256 (11008 for h = 4096).
int64_t llama_default_ffn(int64_t hidden);
// A LLaMA model of the given dimensions: kConfig on non-positive ones, on heads not dividing
// hidden, or kv_heads not dividing heads (grouped-query attention shares each kv head among
// heads / kv_heads query heads), naming the numbers.
ModelSpec llama_from_dims(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                          int64_t ffn, int64_t vocab, bool tie_word_embeddings,
                          int64_t max_seq = 1024);
// A model known only by its parameter count (model-state questions).
ModelSpec model_from_params(double params);

struct Link {
  double bandwidth = 0;  // bytes/s, one direction, per device
  double latency = 0;    // seconds per message (α)
};

// Work that is not a GEMM, seconds per element on one device (memory-bound kernels; the
// GEMMs are FLOPs at the device's rate). Per micro-batch: logits (softmax cross-entropy
// forward and backward, per element of the [tokens, V/t] logits: `logit_s` for the one-pass
// kernel of tp 1, `logit_split_s` for tensor parallelism's vocab-parallel pair) and the
// blocks' LayerNorm, GELU, attention softmax, residual and bias work (per token × hidden ×
// layer, forward and backward); per step: the optimizer (AdamW per updated element, master
// copy included: `optimizer_s`, or `optimizer_zeroing_s` where the update also zeroes the
// gradient it reads), the gradient norm (per gradient element read) and a zeroing pass of its
// own (per gradient element zeroed, in the layouts that have one: time.h's gradient_work).
struct NonGemmCosts {
  double logit_s = 0, activation_s = 0, optimizer_s = 0, gradient_s = 0;
  double logit_split_s = 0, optimizer_zeroing_s = 0, zeroing_s = 0;
};
// Bytes each of those moves, for clusters known by their memory bandwidth (fp32 elements):
// - a logit of the one-pass loss (kernels::softmax_xent_forward_backward) 8: each row is read
//   from memory once and its dlogits written once; the row's max, sum and gradient passes
//   run while it is in cache (a row of V = 50257 is 196 KiB). Under 16-bit parameters it also
//   writes the 2-byte copy the head's GEMMs read (10), which no cost here counts;
// - a logit of the vocab-parallel pair (tp > 1) 16: the max pass, the sum pass (after the max's
//   all-reduce) and the backward each sweep every row from memory, and the backward writes;
// - a token × hidden of a layer 136 (four passes over Korthikanti's 34);
// - an optimizer element 28 (gradient, master, m and v read; master, m, v and the 16-bit copy
//   written), 32 when the update zeroes the gradient it has read (one more write);
// - a gradient element 4 for the norm (read) and 4 for a zeroing pass (written).
inline constexpr double kLogitBytes = 8, kSplitLogitBytes = 16, kActivationBytes = 136,
                        kOptimizerBytes = 28, kOptimizerZeroingBytes = 32, kGradientBytes = 4,
                        kZeroingBytes = 4;
NonGemmCosts non_gemm_from_bandwidth(double bytes_per_s);

// The disk under offload.path, per node (its ranks share it): bytes/s of O_DIRECT transfers
// at the offload's block size and queue depth.
struct DiskSpec {
  double read_bandwidth = 0, write_bandwidth = 0;
  bool measured = false;  // by `kiri plan --calibrate` (else kAssumedDisk's assumption)
};
// Without `kiri plan --calibrate`: an NVMe SSD's sustained direct I/O, assumed (PCIe 3 x4
// class: 2 GB/s read, 1 GB/s write).
inline constexpr DiskSpec kAssumedDisk{2e9, 1e9, false};

struct ClusterSpec {
  std::string name;
  std::string device;
  int devices_per_node = 1;
  int nodes = 1;
  double memory_bytes = 0;     // per device
  double flops_fp32 = 0;       // peak FLOP/s per device, fp32 (dense): MFU's denominator
  double flops_16bit = 0;      // peak FLOP/s per device, bf16/fp16 (dense)
  double flops_fp16 = 0;       // fp16's peak where it differs from bf16's; 0 = flops_16bit
  double efficiency = 1;       // sustained fraction of the peak in large GEMMs
  double sustained_16bit = 0;  // 16-bit GEMM FLOP/s where not flops_16bit·efficiency; 0 = that
  Link intra, inter;           // within a node, across nodes (inter: per NIC)
  // The NICs a node's inter-node traffic leaves through: 0 = one per device (a DGX's compute
  // NICs), 1 = one link per host (scripts/cluster.sh's namespace hosts), shared by its ranks.
  int nics_per_node = 0;
  // > 0: every rank of the cluster shares this many cores (namespace hosts on one machine);
  // a rank computes at min(1, shared_cores / world) of its calibrated speed. 0 = not shared.
  int shared_cores = 0;
  // A fixed cost per optimizer step that no other term counts (the trainer's own work between
  // steps: data, logging, the loss's reduction), seconds; 0 unless given.
  double step_overhead_s = 0;
  double memory_bandwidth = 0;  // bytes/s per device (datasheet)
  // Whether collectives run beside compute (GPUs: NCCL kernels and copy engines) or on the
  // computing cores themselves (CPU ranks: shared-memory copies and reductions), where
  // nothing hides behind backward (docs/ddp.md).
  bool comm_overlaps_compute = true;
  // The share of the compute that a collective hidden behind it still takes while it runs:
  // the computing cores also carry its copies, its reductions and the kernel's network work
  // (CPU ranks without a spare core; scripts/cluster.sh's hosts share one machine's cores).
  // 0 = hidden for free (GPUs: NCCL beside the SMs, NICs that DMA). Measured by `kiri plan
  // --calibrate` across hosts (Calibration::transfer_compute_share), or given.
  double transfer_compute_share = 0;
  NonGemmCosts non_gemm;         // presets: from memory_bandwidth; calibration: measured
  DiskSpec disk = kAssumedDisk;  // offload.path's disk (calibration: measured)
  // Where the numbers come from: a calibration file (this-machine after `kiri plan
  // --calibrate`), and which fields it measured / which stay assumptions.
  std::string source;
  std::vector<std::string> measured, assumed;

  int world() const { return devices_per_node * nodes; }
  int nics() const { return nics_per_node > 0 ? nics_per_node : devices_per_node; }
};

// A link rate in bytes/s: a plain number is bytes/s (300e9); with a unit, tc's words (tc(8),
// "RATES"): bit, kbit, mbit, gbit, tbit are bits/s and bps, kbps, mbps, gbps, tbps bytes/s,
// decimal (1gbit = 125e6 bytes/s), k/m/g/t with an i (kibit, mibps, ...) binary. kConfig
// naming `option` and the text otherwise, or when not positive.
double parse_link_rate(const std::string& text, const std::string& option);
// A time in seconds: a plain number is seconds (5e-6); with a unit s, ms, us (or usec,
// msec, sec, as tc writes them). kConfig naming `option` otherwise, or when negative.
double parse_seconds(const std::string& text, const std::string& option);

// a100-80g-nvlink, h100-80g-nvlink-ib, v100-32g-pcie, this-machine; kConfig otherwise.
// this-machine loads the calibration file (plan/calibration.h, default_calibration_path())
// when there is one, else takes the assumed numbers (this_machine_assumed()).
ClusterSpec cluster_preset(const std::string& name);
ClusterSpec this_machine_assumed();
std::vector<std::string> cluster_preset_names();

}  // namespace kiri::plan
