#include "kiri/plan/specs.h"

#include <cmath>
#include <string>
#include <utility>

#include "kiri/base/error.h"
#include "kiri/plan/calibration.h"

namespace kiri::plan {

int64_t ModelSpec::layer_params() const {
  const int64_t h = hidden;
  // q, k, v, o, gate, up, down (no biases) and two RMSNorms.
  if (arch == Arch::kLlama) return layer_matmul_params() + 2 * h;
  // c_attn 3h² + 3h, attn c_proj h² + h, c_fc h·f + f, mlp c_proj f·h + h, ln_1 and ln_2 4h.
  const int64_t f = ffn_width();
  return 4 * h * h + 2 * h * f + 3 * h + h + f + h + 4 * h;
}

int64_t ModelSpec::layer_matmul_params() const {
  const int64_t h = hidden;
  // q and o h×h, k and v h×kv_width (grouped-query attention), gate/up/down h×ffn (SwiGLU).
  if (arch == Arch::kLlama) return 2 * h * h + 2 * h * kv_width() + 3 * h * ffn_width();
  return 4 * h * h + 2 * h * ffn_width();
}

int64_t ModelSpec::embedding_params() const {
  if (arch == Arch::kLlama) return vocab * hidden;
  return vocab * hidden + max_seq * hidden;
}

int64_t ModelSpec::final_norm_params() const {
  return arch == Arch::kLlama ? hidden : 2 * hidden;
}

int64_t ModelSpec::head_params() const {
  return tie_word_embeddings ? 0 : vocab * hidden;
}

double ModelSpec::total_params() const {
  if (params_only()) return params;
  return static_cast<double>(n_layer * layer_params() + embedding_params() + final_norm_params() +
                             head_params());
}

namespace {

ModelSpec gpt(const std::string& name, int64_t l, int64_t h, int64_t a, int64_t seq) {
  ModelSpec m = model_from_dims(l, h, a, 50257, seq);
  m.name = name;
  return m;
}

// The dimensions as Hugging Face's LlamaConfig names them: num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
// tie_word_embeddings, max_position_embeddings.
ModelSpec llama(const std::string& name, int64_t l, int64_t h, int64_t a, int64_t kv, int64_t ffn,
                int64_t vocab, bool tied, int64_t context) {
  ModelSpec m = llama_from_dims(l, h, a, kv, ffn, vocab, tied, context);
  m.name = name;
  return m;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  return {"gpt2-124M",   "gpt2-350M",      "gpt2-774M", "gpt2-1.5B", "gpt3-175B", "llama-tiny",
          "smollm-135M", "tinyllama-1.1B", "llama-7B",  "llama-13B", "llama3-8B"};
}

ModelSpec model_preset(const std::string& name) {
  // GPT-2: Radford et al. 2019, Table 2 (and the Hugging Face configs: n_ctx 1024, vocab 50257).
  if (name == "gpt2-124M") return gpt(name, 12, 768, 12, 1024);
  if (name == "gpt2-350M") return gpt(name, 24, 1024, 16, 1024);
  if (name == "gpt2-774M") return gpt(name, 36, 1280, 20, 1024);
  if (name == "gpt2-1.5B") return gpt(name, 48, 1600, 25, 1024);
  // GPT-3: Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048).
  if (name == "gpt3-175B") return gpt(name, 96, 12288, 96, 2048);
  // kiri's own tiny Llama for tests (no published model): grouped-query attention with 2
  // query heads per kv head, head_dim 16, ffn 8h/3 rounded up to 16, a byte vocabulary.
  if (name == "llama-tiny") return llama(name, 2, 64, 4, 2, 176, 256, false, 256);
  // The rest as their Hugging Face config.json files give them:
  // HuggingFaceTB/SmolLM-135M (SmolLM2-135M has the same shape, context 8192).
  if (name == "smollm-135M") return llama(name, 30, 576, 9, 3, 1536, 49152, true, 2048);
  // TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T (and TinyLlama-1.1B-Chat-v1.0).
  if (name == "tinyllama-1.1B") return llama(name, 22, 2048, 32, 4, 5632, 32000, false, 2048);
  // LLaMA: Touvron et al. 2023, Table 2, and huggyllama/llama-7b, llama-13b (Llama 2 7B and
  // 13B, meta-llama/Llama-2-7b-hf, have the same shapes with context 4096).
  if (name == "llama-7B") return llama(name, 32, 4096, 32, 32, 11008, 32000, false, 2048);
  if (name == "llama-13B") return llama(name, 40, 5120, 40, 40, 13824, 32000, false, 2048);
  // meta-llama/Meta-Llama-3-8B: 8 kv heads, the 128256-token vocabulary, context 8192.
  if (name == "llama3-8B") return llama(name, 32, 4096, 32, 8, 14336, 128256, false, 8192);
  std::string known;
  for (const auto& n : model_preset_names()) known += " " + n;
  KIRI_RAISE(kConfig, "unknown model '", name, "' (known:", known,
             "; or --layers/--hidden/--heads/--vocab, or --params)");
}

ModelSpec model_from_dims(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                          int64_t max_seq) {
  KIRI_CHECK_KIND(kConfig, layers > 0 && hidden > 0 && heads > 0 && vocab > 0 && max_seq > 0,
                  "model dimensions must be positive: --layers ", layers, " --hidden ", hidden,
                  " --heads ", heads, " --vocab ", vocab, " (context ", max_seq, ")");
  KIRI_CHECK_KIND(kConfig, hidden % heads == 0, "--heads ", heads, " does not divide --hidden ",
                  hidden);
  ModelSpec m;
  m.name = str("gpt-L", layers, "-h", hidden);
  m.n_layer = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.vocab = vocab;
  m.max_seq = max_seq;
  return m;
}

int64_t llama_default_ffn(int64_t hidden) {
  const int64_t f = 8 * hidden / 3;
  return (f + 255) / 256 * 256;
}

ModelSpec llama_from_dims(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                          int64_t ffn, int64_t vocab, bool tie_word_embeddings, int64_t max_seq) {
  KIRI_CHECK_KIND(
      kConfig,
      layers > 0 && hidden > 0 && heads > 0 && kv_heads > 0 && ffn > 0 && vocab > 0 && max_seq > 0,
      "model dimensions must be positive: --layers ", layers, " --hidden ", hidden, " --heads ",
      heads, " --kv-heads ", kv_heads, " --ffn ", ffn, " --vocab ", vocab, " (context ", max_seq,
      ")");
  KIRI_CHECK_KIND(kConfig, hidden % heads == 0, "--heads ", heads, " does not divide --hidden ",
                  hidden);
  KIRI_CHECK_KIND(kConfig, heads % kv_heads == 0, "--kv-heads ", kv_heads,
                  " does not divide --heads ", heads,
                  " (grouped-query attention shares each key/value head among a whole number "
                  "of query heads)");
  ModelSpec m;
  m.name = str("llama-L", layers, "-h", hidden);
  m.arch = Arch::kLlama;
  m.n_layer = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn = ffn;
  m.vocab = vocab;
  m.tie_word_embeddings = tie_word_embeddings;
  m.max_seq = max_seq;
  return m;
}

ModelSpec model_from_params(double params) {
  KIRI_CHECK_KIND(kConfig, params >= 1, "--params must be at least 1, got ", params);
  ModelSpec m;
  m.name = str(params, " params");
  m.params = params;
  return m;
}

NonGemmCosts non_gemm_from_bandwidth(double bytes_per_s) {
  KIRI_CHECK_KIND(kConfig, bytes_per_s > 0, "memory bandwidth must be positive, got ", bytes_per_s);
  NonGemmCosts c;
  c.logit_s = kLogitBytes / bytes_per_s;
  c.activation_s = kActivationBytes / bytes_per_s;
  c.optimizer_s = kOptimizerBytes / bytes_per_s;
  c.gradient_s = kGradientBytes / bytes_per_s;
  c.logit_split_s = kSplitLogitBytes / bytes_per_s;
  c.optimizer_zeroing_s = kOptimizerZeroingBytes / bytes_per_s;
  c.zeroing_s = kZeroingBytes / bytes_per_s;
  return c;
}

namespace {

// "200mbit" -> {200, "mbit"}; kConfig when there is no number.
std::pair<double, std::string> number_and_unit(const std::string& text, const std::string& option) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KIRI_CHECK_KIND(kConfig, used > 0 && std::isfinite(v), "--", option,
                  ": expected a number with an optional unit, got '", text, "'");
  return {v, text.substr(used)};
}

}  // namespace

double parse_link_rate(const std::string& text, const std::string& option) {
  auto [v, unit] = number_and_unit(text, option);
  double scale = 0;
  if (unit.empty()) scale = 1;
  // tc's rate words: [k|m|g|t][i](bit|bps); bit is bits/s, bps bytes/s.
  const bool bits = unit.size() >= 3 && unit.compare(unit.size() - 3, 3, "bit") == 0;
  const bool bytes = unit.size() >= 3 && unit.compare(unit.size() - 3, 3, "bps") == 0;
  if (bits || bytes) {
    std::string prefix = unit.substr(0, unit.size() - 3);
    const bool binary = prefix.size() == 2 && prefix[1] == 'i';
    if (binary) prefix.pop_back();
    const double base = binary ? 1024 : 1000;
    const std::string prefixes = "kmgt";
    if (prefix.empty() && !binary) {
      scale = 1;
    } else if (prefix.size() == 1 && prefixes.find(prefix[0]) != std::string::npos) {
      scale = std::pow(base, static_cast<double>(prefixes.find(prefix[0]) + 1));
    }
    if (bits) scale /= 8;
  }
  KIRI_CHECK_KIND(kConfig, scale > 0, "--", option, ": unknown rate unit '", unit, "' in '", text,
                  "' (bytes/s, or tc's bit, kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps)");
  KIRI_CHECK_KIND(kConfig, v > 0, "--", option, " must be positive, got '", text, "'");
  return v * scale;
}

double parse_seconds(const std::string& text, const std::string& option) {
  auto [v, unit] = number_and_unit(text, option);
  double scale = 0;
  if (unit.empty() || unit == "s" || unit == "sec" || unit == "secs") scale = 1;
  if (unit == "ms" || unit == "msec" || unit == "msecs") scale = 1e-3;
  if (unit == "us" || unit == "usec" || unit == "usecs") scale = 1e-6;
  KIRI_CHECK_KIND(kConfig, scale > 0, "--", option, ": unknown time unit '", unit, "' in '", text,
                  "' (seconds, or s, ms, us)");
  KIRI_CHECK_KIND(kConfig, v >= 0, "--", option, " must not be negative, got '", text, "'");
  return v * scale;
}

std::vector<std::string> cluster_preset_names() {
  return {"a100-80g-nvlink", "h100-80g-nvlink-ib", "v100-32g-pcie", "this-machine"};
}

ClusterSpec this_machine_assumed() {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  // Rough numbers for the 2-core development VM (one rank per core), until `kiri plan
  // --calibrate` measures them: the fp32 FMA peak ~176 GFLOP/s per core (kernels::peak_flops
  // measures 176-179), bf16's the same (vdpbf16ps reaches only ~87 there, so fp32 FMA is
  // bf16's fastest path), fp16 ~2x (vfmadd231ph, AVX512_FP16); oneDNN SGEMM reaching
  // 150-230 GFLOP/s on 2 threads (efficiency ~0.6); 16-bit GEMMs at ~86 x 0.6 GFLOP/s
  // (docs/performance.md, "Mixed-precision GEMM"); ~23.5 GiB of RAM split over the 2 ranks;
  // MPI over shared memory at a few GB/s and microseconds.
  ClusterSpec c;
  c.name = "this-machine";
  c.device = "x86-64 core (avx512)";
  c.devices_per_node = 2;
  c.memory_bytes = 11 * GiB;
  c.flops_fp32 = 176e9;
  c.flops_16bit = 176e9;
  c.flops_fp16 = 352e9;
  c.efficiency = 0.6;
  c.sustained_16bit = 86e9 * 0.6;
  c.intra = {4e9, 2e-6};
  c.inter = {4e9, 2e-6};
  c.memory_bandwidth = 10e9;  // a core's share of the copy bandwidth
  c.comm_overlaps_compute = false;
  c.non_gemm = non_gemm_from_bandwidth(c.memory_bandwidth);
  c.assumed = {"all (no calibration file: run kiri plan --calibrate)"};
  return c;
}

ClusterSpec cluster_preset(const std::string& name) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  ClusterSpec c;
  c.name = name;
  if (name == "a100-80g-nvlink") {
    // NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 312 TFLOP/s dense BF16/FP16,
    // 19.5 TFLOP/s FP32 (non-tensor), 80 GB HBM2e, NVLink 3: 600 GB/s bidirectional per GPU.
    // DGX A100 user guide: 8 GPUs per node, 8 ConnectX-6 HDR 200 Gb/s (25 GB/s) for compute.
    c.device = "NVIDIA A100-SXM4-80GB";
    c.devices_per_node = 8;
    c.memory_bytes = 80 * GiB;
    c.flops_16bit = 312e12;
    c.flops_fp32 = 19.5e12;
    c.efficiency = 0.7;  // assumption: large GEMMs reach ~70% of peak (to be calibrated)
    c.intra = {300e9, 5e-6};
    c.inter = {25e9, 10e-6};
    c.memory_bandwidth = 2039e9;  // HBM2e
    c.non_gemm = non_gemm_from_bandwidth(c.memory_bandwidth);
    return c;
  }
  if (name == "h100-80g-nvlink-ib") {
    // NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s dense BF16/FP16, 67 TFLOP/s
    // FP32, 80 GB HBM3, NVLink 4: 900 GB/s bidirectional per GPU. DGX H100: 8 GPUs per node,
    // 8 ConnectX-7 NDR 400 Gb/s (50 GB/s) InfiniBand ports for compute.
    c.device = "NVIDIA H100-SXM5-80GB";
    c.devices_per_node = 8;
    c.memory_bytes = 80 * GiB;
    c.flops_16bit = 989e12;
    c.flops_fp32 = 67e12;
    c.efficiency = 0.7;  // assumption, as above
    c.intra = {450e9, 5e-6};
    c.inter = {50e9, 10e-6};
    c.memory_bandwidth = 3.35e12;  // HBM3
    c.non_gemm = non_gemm_from_bandwidth(c.memory_bandwidth);
    return c;
  }
  if (name == "v100-32g-pcie") {
    // NVIDIA V100 datasheet (PCIe 32GB): 112 TFLOP/s FP16 tensor, 14 TFLOP/s FP32, 32 GB
    // HBM2, PCIe Gen3 x16: 32 GB/s bidirectional. Assumed: 8 GPUs per node sharing one
    // 100 Gb/s EDR InfiniBand port (12.5 GB/s, 1.56 GB/s per GPU). V100 has no bf16: the
    // planner takes the fp16 rate for both 16-bit types.
    c.device = "NVIDIA V100-PCIE-32GB";
    c.devices_per_node = 8;
    c.memory_bytes = 32 * GiB;
    c.flops_16bit = 112e12;
    c.flops_fp32 = 14e12;
    c.efficiency = 0.6;  // assumption
    c.intra = {16e9, 10e-6};
    c.inter = {12.5e9 / 8, 20e-6};
    c.memory_bandwidth = 900e9;  // HBM2
    c.non_gemm = non_gemm_from_bandwidth(c.memory_bandwidth);
    return c;
  }
  if (name == "this-machine") {
    if (auto cal = load_calibration(default_calibration_path()))
      return calibrated_cluster(*cal, default_calibration_path());
    return this_machine_assumed();
  }
  std::string known;
  for (const auto& n : cluster_preset_names()) known += " " + n;
  KIRI_RAISE(kConfig, "unknown cluster '", name, "' (known:", known, ")");
}

}  // namespace kiri::plan
