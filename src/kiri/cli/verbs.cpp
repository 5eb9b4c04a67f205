#include "kiri/cli/verbs.h"

#include "kiri/base/error.h"
#include "kiri/base/suggest.h"
#include "kiri/cli/config_flags.h"

namespace kiri::cli {

namespace {

using K = OptionKind;

// The config of a run: a file, then --set in order (docs/config.md).
const OptionSpec kSet = {"--set", K::kRepeated, "KEY=VALUE", "",
                         "set a config key after the file, e.g. --set train.lr=3e-4"};
// A DeepSpeed config's keys over kiri's (docs/deepspeed.md).
const OptionSpec kDeepSpeed = {"--deepspeed", K::kValue, "DS_CONFIG.json", "",
                               "a DeepSpeed JSON config (as the HF Trainer takes it) mapped "
                               "onto kiri's keys (docs/deepspeed.md)"};
const OptionSpec kMemLimit = {"--mem-limit", K::kValue, "BYTES", "the config's train.mem_limit",
                              "the allocator's limit per rank (2GiB, 300MB); sets train.mem_limit"};

// `spec` with the familiar flags that alias config keys (config_flags.h) after its own.
VerbSpec with_config_flags(VerbSpec spec) {
  for (OptionSpec& o : config_flag_options()) spec.options.push_back(std::move(o));
  return spec;
}

VerbSpec train_verb() {
  return {"train",
          "[CONFIG]",
          0,
          1,
          "Train a model (one process, or one rank of kiri launch / mpirun / srun).",
          {kSet,
           kDeepSpeed,
           {"--resume", K::kValue, "auto|CKPT_DIR", "",
            "continue a run: from a checkpoint (its folder or checkpoint.dir) with its saved "
            "config, or `auto`: from the run folder's latest checkpoint, fresh if it has none"},
           {"--accept-data-change", K::kFlag, "", "",
            "--resume: continue although the tokenizer or the token shards changed since the "
            "checkpoint was saved (refused otherwise; docs/checkpoints.md)"},
           {"--peak-flops", K::kValue, "FLOPS", "measured (FMA loop)",
            "MFU's peak per rank in FLOP/s, e.g. 2.5e12 (docs/metrics.md)"},
           {"--global-batch", K::kValue, "G", "the config's",
            "sequences per step to keep on this world: train.grad_accum (and if needed "
            "train.micro_batch) are set so that micro_batch x microbatches x grad_accum x dp = G"},
           {"--init-from", K::kValue, "MODEL_DIR", "",
            "start from a model's weights (a Hugging Face GPT-2 folder, or a kiri checkpoint) "
            "with a fresh optimizer at step 0; the model config comes from its config.json"},
           {"--overwrite", K::kFlag, "", "",
            "start over in a run folder that holds another run (removes kiri's files there)"},
           kMemLimit,
           {"--auto", K::kFlag, "", "",
            "let the planner choose dp/tp/pp, ZeRO stage and recomputation for this world"},
           {"--dry-run", K::kFlag, "", "",
            "load and validate the config, print it and its layout, and exit without training"}}};
}

VerbSpec launch_verb() {
  return {"launch",
          "-- VERB [ARGS...]",
          0,
          0,
          "Run N ranks of `kiri VERB ARGS...` through mpirun.",
          {{"-n", K::kValue, "N", "", "the number of ranks (required)"},
           {"--np", K::kValue, "N", "", "the same as -n (mpirun's -np)"},
           {"--hostfile", K::kValue, "FILE", "one node", "mpirun's hostfile, for more nodes"},
           {"--hosts", K::kValue, "H:N,...", "one node",
            "the hosts and their ranks (a:2,b:2), instead of a hostfile"},
           {"--threads", K::kValue, "T", "cores / N", "OpenMP threads per rank"},
           {"--mpirun", K::kValue, "PATH", "mpirun", "the mpirun to start"},
           {"--launcher", K::kValue, "CMD", "mpirun",
            "another launcher's command, {n} replaced by the ranks, e.g. \"srun -n {n}\""},
           {"--max-restarts", K::kValue, "R", "0",
            "restart a train job that fails on a rank (killed, hung, a communication or I/O "
            "error) up to R times from its latest checkpoint (docs/cli.md)"},
           {"--exclude-failed", K::kFlag, "", "",
            "restart without the hosts (or, without --hostfile, the slots) that failed"},
           {"--max-host-failures", K::kValue, "K", "1",
            "--exclude-failed: the failures after which a host is left out"},
           {"--min-ranks", K::kValue, "M", "-n",
            "the fewest ranks a restart may run on (dp shrinks, the global batch is kept)"}}};
}

VerbSpec config_verb() {
  return {"config",
          "[CONFIG]",
          0,
          1,
          "Print the resolved config as JSON (or every key's documentation).",
          {kSet,
           kDeepSpeed,
           kMemLimit,
           {"--markdown", K::kFlag, "", "", "print every key's documentation (docs/config.md)"}}};
}

VerbSpec sample_verb() {
  return {"sample",
          "MODEL",
          1,
          1,
          "Generate text from a checkpoint or a Hugging Face model folder (kiri's export, or one "
          "that transformers saved), printed as it is generated.",
          {{"--prompt", K::kValue, "TEXT", "a newline", "the text to continue"},
           {"--prompts", K::kValue, "FILE", "",
            "several prompts, each continued in turn with the same seed: one per non-blank "
            "line, or a .jsonl file of objects with a string \"prompt\""},
           {"--tokens", K::kValue, "N", "100", "the most tokens to generate"},
           {"--stop-at-eos", K::kFlag, "", "",
            "stop at the tokenizer's end-of-text token (eos_token_id), unprinted"},
           {"--temperature", K::kValue, "T", "0.8", "softmax temperature; 0 is greedy"},
           {"--top-k", K::kValue, "K", "0 (all)", "sample from the K most likely tokens"},
           {"--top-p", K::kValue, "P", "1 (all)",
            "sample from the fewest most likely tokens whose probability reaches P (after "
            "--top-k)"},
           {"--seed", K::kValue, "S", "0", "the sampling seed"},
           {"--tokenizer", K::kValue, "NAME", "the model's",
            "byte, gpt2 or a tokenizer's path, for a model folder that holds no tokenizer"},
           {"--logits", K::kValue, "FILE", "",
            "also write the prompt's next-token logits [T, V] to FILE (float32, little-endian; "
            "row t after prompt tokens 0..t)"}}};
}

VerbSpec eval_verb() {
  return {
      "eval",
      "MODEL",
      1,
      1,
      "Print the validation loss of a checkpoint or a Hugging Face model folder (on one "
      "process, whatever layout wrote it).",
      {{"--batches", K::kValue, "N", "train.eval_batches", "validation batches to average over"},
       {"--data", K::kValue, "DIR", "the checkpoint's data",
        "evaluate on the validation split of these token shards (data.dir)"},
       {"--set", K::kRepeated, "KEY=VALUE", "",
        "a config key over the checkpoint's (or, for a model folder, the defaults): "
        "train.seq_len, train.micro_batch, data.tokenizer, ..."},
       {"--accept-data-change", K::kFlag, "", "",
        "evaluate although the tokenizer or the token shards changed since the checkpoint was "
        "saved (refused otherwise; docs/checkpoints.md)"}}};
}

VerbSpec data_verb() {
  return {"data",
          "INPUT...",
          1,
          1 << 20,
          "Tokenize files, folders and globs of text, JSON Lines or tokens into train and "
          "validation shards (docs/data.md).",
          {{"--out", K::kValue, "DIR", "", "the folder for the shards and corpus.json (required)"},
           {"--tokenizer", K::kValue, "NAME|PATH", "gpt2",
            "gpt2, byte, or a Hugging Face tokenizer folder or tokenizer.json"},
           {"--format", K::kValue, "auto|text|jsonl|tokens|chat|prompt-completion", "auto",
            "how inputs are read; auto: tokens by their header, jsonl by .jsonl/.ndjson, else "
            "text; chat, prompt-completion: fine-tuning JSON Lines with a loss mask"},
           {"--chat-template", K::kValue, "simple|tokenizer", "simple",
            "--format chat: kiri's simple template, or the tokenizer folder's own "
            "(tokenizer_config.json; Llama 3 and ChatML)"},
           {"--separator", K::kValue, "STR", "none: one document per file",
            "split text files into documents on STR"},
           {"--text-key", K::kValue, "KEY", "text", "the JSON Lines member holding the text"},
           {"--val-fraction", K::kValue, "F", "0.1", "the share of the tokens held out"},
           {"--assets", K::kValue, "DIR", "$KIRI_DATA_DIR or the build's data/",
            "where the GPT-2 tokenizer's files are"}}};
}

VerbSpec export_verb() {
  return {"export",
          "CKPT_DIR",
          1,
          1,
          "Write a checkpoint as a Hugging Face model folder (docs/checkpoints.md).",
          {{"--out", K::kValue, "DIR", "", "the new folder (required; must not hold files)"},
           {"--dtype", K::kValue, "fp32|bf16|fp16", "fp32", "the weights' dtype on disk"},
           {"--max-shard-size", K::kValue, "BYTES", "5GB",
            "largest model file; above it model-0000k-of-0000n.safetensors + index (2GB, "
            "2GiB)"}}};
}

VerbSpec bench_verb() {
  return {
      "bench",
      "",
      0,
      0,
      "Time training steps: one JSON line per result (docs/performance.md).",
      {{"--config", K::kRepeated, "tiny|gpt2-124M|tiny-llama|smollm-135M",
        "tiny and gpt2-124M (tiny with a mode)", "the model to time"},
       {"--threads", K::kRepeated, "T", "1 and 2 (1 with --dtypes, --layouts)", "OpenMP threads"},
       {"--steps", K::kValue, "N", "the config's", "timed steps"},
       {"--warmup", K::kValue, "N", "the config's", "untimed steps first"},
       {"--rounds", K::kValue, "N", "3",
        "rounds of every layout (--zero, --dtypes, --layouts, --activations)"},
       {"--only", K::kValue, "NAME", "all", "--layouts, --activations: the one layout to time"},
       {"--dtype", K::kValue, "fp32|bf16|fp16", "fp32",
        "the step's dtype (16-bit: mixed precision); MFU against that dtype's peak"},
       {"--peak-flops", K::kValue, "FLOPS", "measured (the dtype's fastest instruction)",
        "MFU's peak per process in FLOP/s (docs/metrics.md)"},
       {"--ddp", K::kFlag, "", "", "DDP's overlapped all-reduce against the naive one"},
       {"--zero", K::kFlag, "", "", "ZeRO stages 0-3 (and 3 without prefetch) as dp ranks"},
       {"--dtypes", K::kFlag, "", "", "fp32 against bf16, fp16 and fp32 with recomputation"},
       {"--layouts", K::kFlag, "", "", "dp, tp and pp (GPipe, 1F1B) layouts of the world"},
       {"--activations", K::kFlag, "", "",
        "tp over the world: sequence parallelism, selective and full recomputation"},
       {"--no-check", K::kFlag, "", "", "skip the collectives' cross-rank check"}}};
}

// kiri plan's model, cluster and layout options (docs/planner.md, "Options").
std::vector<OptionSpec> plan_options() {
  return {
      {"--set", K::kRepeated, "KEY=VALUE", "",
       "a config key as kiri train reads it (after CONFIG, and after the short flags, which "
       "alias parallel.*, train.dtype/micro_batch/seq_len and offload.*): one layout"},
      {"--model", K::kValue, "NAME", "gpt2-124M",
       "a model preset (gpt2-*, gpt3-175B, llama-*, llama3-8B, smollm-135M, tinyllama-1.1B)"},
      {"--layers", K::kValue, "L", "",
       "explicit dimensions: layers (with --hidden --heads --vocab)"},
      {"--hidden", K::kValue, "H", "", "explicit dimensions: hidden width"},
      {"--heads", K::kValue, "A", "", "explicit dimensions: attention (query) heads"},
      {"--vocab", K::kValue, "V", "", "explicit dimensions: vocabulary size"},
      {"--ffn", K::kValue, "F", "4 x hidden (llama: 8h/3 up to a multiple of 256)",
       "explicit dimensions: the MLP's width"},
      {"--arch", K::kValue, "gpt2|llama", "gpt2",
       "explicit dimensions: GPT-2's block or LLaMA's (RMSNorm, SwiGLU, RoPE, no biases)"},
      {"--kv-heads", K::kValue, "N", "--heads",
       "--arch llama: key/value heads (grouped-query attention; divides --heads)"},
      {"--tie-word-embeddings", K::kFlag, "", "",
       "--arch llama: the LM head is the embedding (else its own V x h)"},
      {"--params", K::kValue, "N", "", "a parameter count only (7.5e9): model states, no time"},
      {"--cluster", K::kValue, "NAME", "a100-80g-nvlink",
       "a cluster preset (a100-80g-nvlink, h100-80g-nvlink-ib, v100-32g-pcie, this-machine)"},
      {"--nodes", K::kValue, "K", "1", "table mode: lay out K nodes of the cluster"},
      {"--hosts", K::kValue, "K", "1", "--nodes: K hosts (nodes) of --ranks-per-host ranks"},
      {"--gpus", K::kValue, "N", "the nodes' devices", "table mode: lay out N devices"},
      {"--memory", K::kValue, "BYTES", "the preset's", "memory per device (40GiB)"},
      {"--gpus-per-node", K::kValue, "N", "the preset's",
       "devices per node (larger groups use the inter-node link)"},
      {"--ranks-per-host", K::kValue, "N", "the preset's", "--gpus-per-node: ranks per host"},
      {"--nics-per-node", K::kValue, "N", "one per device",
       "the NICs a node's inter-node traffic shares (1: one link per host)"},
      {"--shared-cores", K::kValue, "N", "not shared",
       "all ranks share N cores (namespace hosts on one machine): compute x min(1, N / ranks)"},
      {"--step-overhead", K::kValue, "S", "0", "a fixed cost per optimizer step, seconds (5ms)"},
      {"--transfer-compute-share", K::kValue, "F", "the calibration's, else 0",
       "the share of compute a hidden gradient transfer still takes while it runs, [0, 1]"},
      {"--flops", K::kValue, "F", "the preset's", "16-bit peak FLOP/s per device (312e12)"},
      {"--flops-fp32", K::kValue, "F", "the preset's", "fp32 peak FLOP/s per device"},
      {"--efficiency", K::kValue, "E", "the preset's",
       "the sustained share of the peak in large GEMMs, (0, 1]"},
      {"--intra-bandwidth", K::kValue, "B", "the preset's",
       "intra-node bytes/s per device (or tc's 10gbit)"},
      {"--intra-latency", K::kValue, "S", "the preset's", "intra-node latency, seconds (or 5us)"},
      {"--inter-bandwidth", K::kValue, "B", "the preset's",
       "inter-node bytes/s per NIC (or tc's 1gbit, 200mbit)"},
      {"--inter-latency", K::kValue, "S", "the preset's", "inter-node latency, seconds (or 1ms)"},
      {"--memory-bandwidth", K::kValue, "B", "the preset's",
       "memory bytes/s per device; sets the non-GEMM costs"},
      {"--dp", K::kValue, "N", "1", "layout mode: data-parallel degree"},
      {"--tp", K::kValue, "N", "1", "layout mode: tensor-parallel degree"},
      {"--pp", K::kValue, "N", "1", "layout mode: pipeline stages"},
      {"--zero-stage", K::kValue, "0-3", "0", "layout mode: the ZeRO stage"},
      {"--shard-group-size", K::kValue, "G", "dp",
       "the ZeRO shard group (HYBRID_SHARD; parallel.shard_group_size); divides dp"},
      {"--dtype", K::kValue, "fp32|bf16|fp16", "bf16",
       "parameter/gradient type; 16-bit adds fp32 master weights"},
      {"--micro-batch", K::kValue, "b", "1", "sequences per micro-batch per rank"},
      {"--global-batch", K::kValue, "B", "512 rounded up to a multiple of b x dp",
       "sequences per step"},
      {"--seq-len", K::kValue, "s", "the model's context", "tokens per sequence"},
      {"--activation-checkpointing", K::kValue, "none|selective|full", "none",
       "layout mode: activation recomputation (parallel.activation_checkpointing)"},
      {"--recompute-modules", K::kValue, "core_attn,layernorm,mlp_act", "core_attn",
       "selective: what every block recomputes (parallel.recompute_modules)"},
      {"--sequence-parallel", K::kFlag, "", "",
       "Megatron's sequence parallelism (parallel.sequence_parallel)"},
      {"--schedule", K::kValue, "gpipe|1f1b|interleaved", "1f1b", "layout mode: pipeline schedule"},
      {"--virtual-stages", K::kValue, "v", "2 for interleaved, else 1",
       "layout mode: model chunks per pipeline rank"},
      {"--wrap-blocks", K::kValue, "k", "1", "blocks per ZeRO unit (sizes stage 2/3 buffers)"},
      {"--activations", K::kValue, "kiri|paper", "kiri", "the activation-memory model"},
      {"--attention", K::kValue, "standard|flash", "paper: standard; kiri: flash",
       "the paper form's attention: s^2 softmax stored, or FlashAttention's log-sum-exp"},
      {"--grad-dtype", K::kValue, "fp32|DTYPE", "the dtype",
       "gradient buffers: fp32 as Megatron's main_grad (memory and dp bytes)"},
      {"--no-overlap", K::kFlag, "", "", "data-parallel communication does not overlap backward"},
      {"--offload-optimizer", K::kValue, "none|nvme", "none (table mode: nvme when nothing fits)",
       "the optimizer states on NVMe (offload.optimizer)"},
      {"--offload-parameters", K::kValue, "none|nvme", "none (table mode: nvme when nothing fits)",
       "ZeRO-3's parameter shards on NVMe (offload.parameters)"},
      {"--offload-gradients", K::kValue, "auto|none|nvme", "auto (with the parameters)",
       "ZeRO-2/3's gradient shards on NVMe (offload.gradients)"},
      {"--no-offload", K::kFlag, "", "", "table mode: never offload, even when nothing fits"},
      {"--offload-buffer-count", K::kValue, "N", "4", "offload.buffer_count: staging buffers"},
      {"--offload-buffer-mb", K::kValue, "MB", "64", "offload.buffer_mb: MiB per staging buffer"},
      {"--offload-block-size", K::kValue, "BYTES", "1MiB", "offload.block_size: bytes per request"},
      {"--offload-queue-depth", K::kValue, "N", "8", "offload.queue_depth: requests in flight"},
      {"--disk-read-bandwidth", K::kValue, "B", "calibrated, else 2e9",
       "offload.path's disk: read bytes/s per node"},
      {"--disk-write-bandwidth", K::kValue, "B", "calibrated, else 1e9",
       "offload.path's disk: write bytes/s per node"},
      {"--offload-path", K::kValue, "DIR", "runs/calibration",
       "--calibrate: the folder whose disk to measure (offload.path's)"},
      {"--disk-bytes", K::kValue, "BYTES", "256MiB", "--calibrate: bytes written and read back"},
      {"--offload-engine", K::kValue, "auto|io_uring|threads", "auto",
       "--calibrate: the I/O engine measured (offload.engine)"},
      {"--top", K::kValue, "N", "10", "rows of the table (candidates in JSON)"},
      {"--json", K::kFlag, "", "", "JSON instead of text"},
      {"--calibrate", K::kFlag, "", "",
       "measure this machine (GEMM, non-GEMM kernels, memcpy or all_reduce, disk) for "
       "this-machine"},
      {"--out", K::kValue, "FILE", "$KIRI_CALIBRATION or runs/calibration/this-machine.json",
       "--calibrate: where to write the calibration"},
  };
}

VerbSpec plan_verb() {
  return {"plan",
          "[CONFIG]",
          0,
          1,
          "Model a layout's memory per rank and step time, or rank a cluster's layouts "
          "(docs/planner.md).",
          plan_options()};
}

VerbSpec help_verb() {
  return {"help", "[VERB]", 0, 1, "Print the verbs, or one verb's help.", {}};
}

// What every verb takes besides its own options.
const std::vector<OptionSpec> kCommon = {
    {"--verbose", K::kFlag, "", "",
     "errors name their source location too; train prints every field of the progress line"},
    {"-h,--help", K::kFlag, "", "", "print this help and exit"},
};

}  // namespace

const std::vector<VerbSpec>& verb_specs() {
  static const std::vector<VerbSpec> verbs = [] {
    std::vector<VerbSpec> v = {with_config_flags(train_verb()),
                               launch_verb(),
                               with_config_flags(config_verb()),
                               sample_verb(),
                               eval_verb(),
                               export_verb(),
                               data_verb(),
                               bench_verb(),
                               with_config_flags(plan_verb()),
                               help_verb()};
    for (VerbSpec& s : v) s.options.insert(s.options.end(), kCommon.begin(), kCommon.end());
    return v;
  }();
  return verbs;
}

const VerbSpec* find_verb(const std::string& name) {
  for (const VerbSpec& s : verb_specs())
    if (s.name == name) return &s;
  return nullptr;
}

const VerbSpec& verb_spec(const std::string& name) {
  if (const VerbSpec* s = find_verb(name)) return *s;
  std::vector<std::string> names;
  std::string list;
  for (const VerbSpec& s : verb_specs()) {
    names.push_back(s.name);
    list += " " + s.name;
  }
  if (auto best = closest(name, names))
    KIRI_RAISE(kConfig, "unknown command '", name, "'; did you mean ", *best, "?");
  KIRI_RAISE(kConfig, "unknown command '", name, "' (kiri's commands:", list, ")");
}

}  // namespace kiri::cli
