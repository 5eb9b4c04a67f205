// The parallel.* and offload.* rows of the config schema (config_schema.cpp): the typed
// layout (config/layout.h) and where the training state lives (config/offload_config.h).
#include <algorithm>

#include "kiri/base/units.h"
#include "kiri/config/config_field.h"

namespace kiri {

using nlohmann::json;

namespace {

// parallel.recompute_modules: a JSON list of names, or as --set text the names separated by
// commas (`core_attn,mlp_act`) or a JSON list; each checked against the modules kiri has.
Field recompute_modules_field() {
  const std::string key = "parallel.recompute_modules";
  std::string valid;
  for (const std::string& n : kiri::recompute_module_names())
    valid += (valid.empty() ? "" : ", ") + n;
  Field f;
  f.doc = {key, "list of strings", "",
           "selective: what every block recomputes in backward instead of keeping: `core_attn` "
           "(the attention core's output and log-sum-exp), `layernorm` (the norms' outputs, "
           "under sequence parallelism all-gathered again), `mlp_act` (the MLP activation's "
           "output). Empty: [\"core_attn\"], Megatron-core's default. One of: " +
               valid + "."};
  f.set = [key](kiri::RunConfig& c, const json& v) {
    json list = v;
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      list = json::array();
      if (!s.empty() && s.front() == '[') {
        list = json::parse(s, nullptr, false);
      } else {
        size_t at = 0;
        while (at <= s.size() && !s.empty()) {
          const size_t comma = std::min(s.find(',', at), s.size());
          list.push_back(s.substr(at, comma - at));
          at = comma + 1;
        }
      }
    }
    KIRI_CHECK_KIND(kConfig, list.is_array(), key, " must be a list of module names, got ",
                    quote_bounded(v.dump(), 80));
    std::vector<std::string> names;
    for (const json& n : list) names.push_back(as_string(n, key));
    kiri::parse_recompute_modules(names, kiri::LayoutWords::kConfig);  // unknown: the valid ones
    c.parallel.recompute_modules = names;
  };
  f.get = [](const kiri::RunConfig& c) { return json(c.parallel.recompute_modules); };
  return f;
}

}  // namespace

void add_parallel_fields(std::vector<Field>& f) {
  // parallel
  f.push_back(int_field("parallel.dp", KIRI_FIELD(parallel.dp), 0, 1 << 20,
                        "Data-parallel degree; 0 (unset) infers it as world / (tp x pp), as "
                        "Megatron and torchtitan do, and rank 0 says so (`kiri config` prints "
                        "0). dp x tp x pp must equal the number of processes: a world that tp x "
                        "pp does not divide, or a given dp that does not fit it, is an error "
                        "naming world, dp, tp and pp."));
  f.push_back(
      int_field("parallel.tp", KIRI_FIELD(parallel.tp), 1, 1 << 20, "Tensor-parallel degree."));
  f.push_back(
      int_field("parallel.pp", KIRI_FIELD(parallel.pp), 1, 1 << 20, "Pipeline-parallel degree."));
  f.push_back(float_field("parallel.bucket_mb", KIRI_FIELD(parallel.bucket_mb), 1e-6, 1e6,
                          "DDP gradient bucket size in MiB; each bucket's all-reduce starts as "
                          "soon as backward has produced all of its gradients."));
  f.push_back(float_field("parallel.timeout_s", KIRI_FIELD(parallel.timeout_s), 0.001, 1e7,
                          "Timeout of each collective in seconds: past it the rank stops with a "
                          "diagnosis naming the missing or divergent rank."));
  f.push_back(int_field("parallel.link_probe_every", KIRI_FIELD(parallel.link_probe_every), 0,
                        1 << 30,
                        "Across hosts: every this many steps, the first rank of each host times "
                        "a 1 MiB exchange with every other host's, and the progress line and "
                        "metrics name a host whose link is slow (docs/cluster.md); 0 = never. "
                        "One host: no effect."));
  f.push_back(bool_field("parallel.check_collectives", KIRI_FIELD(parallel.check_collectives),
                         "Before each collective, ranks agree on its kind and size, so a mismatch "
                         "is named instead of computing garbage (a small extra message each)."));
  f.push_back(int_field("parallel.zero_stage", KIRI_FIELD(parallel.zero_stage), 0, 3,
                        "ZeRO stage (DeepSpeed): 0 = DDP, every rank holds everything; 1 = "
                        "optimizer states sharded over dp; 2 = + gradients (reduce-scattered "
                        "during backward); 3 = + parameters (all-gathered per unit just in time; "
                        "= FSDP FULL_SHARD)."));
  f.push_back(
      enum_field("parallel.sharding_strategy", KIRI_FIELD(parallel.sharding_strategy),
                 std::vector<std::pair<std::string, ShardingStrategy>>{
                     {"from_zero_stage", ShardingStrategy::kFromZeroStage},
                     {"NO_SHARD", ShardingStrategy::kNoShard},
                     {"SHARD_GRAD_OP", ShardingStrategy::kShardGradOp},
                     {"FULL_SHARD", ShardingStrategy::kFullShard},
                     {"HYBRID_SHARD", ShardingStrategy::kHybridShard}},
                 "The same engine in FSDP's words: NO_SHARD = stage 0, SHARD_GRAD_OP = stage 2, "
                 "FULL_SHARD = stage 3, HYBRID_SHARD = stage 3 within groups of "
                 "parallel.shard_group_size ranks, replicated across the groups. A zero_stage that "
                 "contradicts it is an error."));
  f.push_back(int_field("parallel.shard_group_size", KIRI_FIELD(parallel.shard_group_size), 0,
                        1 << 20,
                        "Ranks over which the state is sharded (HYBRID_SHARD); 0 = the whole dp "
                        "group. Must divide parallel.dp."));
  f.push_back(int_field("parallel.wrap_blocks", KIRI_FIELD(parallel.wrap_blocks), 1, 1 << 20,
                        "Wrap policy of the sharding units: the embeddings, then every "
                        "wrap_blocks transformer blocks, then the final LayerNorm, each one flat "
                        "buffer padded to a multiple of the shard group size."));
  f.push_back(bool_field("parallel.prefetch", KIRI_FIELD(parallel.prefetch),
                         "Stage 3: start the next unit's all-gather while the current unit "
                         "computes (forward and backward)."));
  f.push_back(enum_field(
      "parallel.activation_checkpointing", KIRI_FIELD(parallel.activation_checkpointing),
      std::vector<std::pair<std::string, kiri::ActivationCheckpointing>>{
          {"none", kiri::ActivationCheckpointing::kNone},
          {"full", kiri::ActivationCheckpointing::kFull},
          {"every_k", kiri::ActivationCheckpointing::kEveryK},
          {"selective", kiri::ActivationCheckpointing::kSelective}},
      "Checkpointed blocks keep only their input in forward and recompute their activations "
      "in backward: `full` = every block, `every_k` = blocks 0, k, 2k, ... "
      "(parallel.activation_checkpointing_k); `selective` = every block keeps its linear "
      "layers' inputs and recomputes only parallel.recompute_modules (docs/parallelism.md)."));
  f.push_back(recompute_modules_field());
  f.push_back(int_field("parallel.activation_checkpointing_k",
                        KIRI_FIELD(parallel.activation_checkpointing_k), 1, 1 << 20,
                        "every_k: checkpoint every k-th block."));
  f.push_back(bool_field(
      "parallel.sequence_parallel", KIRI_FIELD(parallel.sequence_parallel),
      "Megatron's sequence parallelism (needs parallel.tp > 1): the norms and the residual "
      "stream hold micro_batch x seq_len / tp token rows per tensor-parallel rank (tp must "
      "divide them); an all-gather enters each attention and MLP and a reduce-scatter leaves "
      "it, in place of tensor parallelism's all-reduces (the same bytes; the norms' weight "
      "gradients add one small all-reduce per block and micro-batch). "
      "docs/parallelism.md."));
  f.push_back(enum_field(
      "parallel.schedule", KIRI_FIELD(parallel.schedule),
      std::vector<std::pair<std::string, PipelineSchedule>>{
          {"gpipe", PipelineSchedule::kGpipe},
          {"1f1b", PipelineSchedule::k1F1B},
          {"interleaved", PipelineSchedule::kInterleaved}},
      "Pipeline schedule (pp > 1): `gpipe` (all forwards, then all backwards: holds m "
      "micro-batches), `1f1b` (one forward, one backward: holds at most pp), `interleaved` "
      "(1F1B over parallel.virtual_stages chunks per rank: the bubble shrinks by that factor)."));
  f.push_back(
      int_field("parallel.microbatches", KIRI_FIELD(parallel.microbatches), 1, 1 << 20,
                "Micro-batches m per accumulation step: each rank's rows are micro_batch x "
                "m, run through the pipeline one micro-batch at a time; the pipeline's "
                "bubble is (pp-1)/(m+pp-1). global_batch = micro_batch x m x grad_accum x dp."));
  f.push_back(int_field("parallel.virtual_stages", KIRI_FIELD(parallel.virtual_stages), 1, 1 << 10,
                        "Interleaved schedule: model chunks per pipeline rank (v); the layers are "
                        "cut into pp x v chunks, chunk c on rank c % pp."));
}

void add_offload_fields(std::vector<Field>& f) {
  // offload
  const std::vector<std::pair<std::string, kiri::OffloadTier>> devices{
      {"none", kiri::OffloadTier::kNone},
      {"cpu", kiri::OffloadTier::kCpu},
      {"nvme", kiri::OffloadTier::kNvme}};
  f.push_back(enum_field(
      "offload.optimizer", KIRI_FIELD(offload.optimizer), devices,
      "ZeRO-Offload: `nvme` keeps this rank's fp32 master weights, Adam m and v in swap files "
      "under offload.path and streams them through offload.buffer_count buffers in each step "
      "(any ZeRO stage and layout; docs/offload.md). `cpu` is an error on the CPU backend: "
      "host memory is already where the state is."));
  f.push_back(enum_field(
      "offload.parameters", KIRI_FIELD(offload.parameters), devices,
      "ZeRO-Infinity: `nvme` keeps this rank's parameter shards in swap files, read one unit "
      "ahead of their all-gather in forward and backward. ZeRO stage 3 with "
      "offload.optimizer = nvme only."));
  f.push_back(enum_field(
      "offload.gradients", KIRI_FIELD(offload.gradients),
      std::vector<std::pair<std::string, kiri::OffloadTier>>{{"auto", kiri::OffloadTier::kAuto},
                                                             {"none", kiri::OffloadTier::kNone},
                                                             {"cpu", kiri::OffloadTier::kCpu},
                                                             {"nvme", kiri::OffloadTier::kNvme}},
      "`nvme` writes each unit's reduced gradient shard to a swap file as soon as its "
      "reduction completes, and the optimizer reads it with its states (ZeRO stage 2 or 3 "
      "with offload.optimizer = nvme); `auto`: nvme when offload.parameters = nvme, else "
      "none."));
  f.push_back(string_field(
      "offload.path", KIRI_FIELD(offload.path),
      "Folder of the swap files (one subfolder per rank, locked against a second run); a "
      "local disk that takes O_DIRECT. `{run.dir}` is run.dir. Removed at a clean exit."));
  f.push_back(int_field("offload.buffer_count", KIRI_FIELD(offload.buffer_count), 2, 1024,
                        "Aligned staging buffers per rank: reads of the next chunk and writes of "
                        "the last overlap the update of this one from 3 up."));
  f.push_back(float_field("offload.buffer_mb", KIRI_FIELD(offload.buffer_mb), 0.0625, 1 << 20,
                          "Size of each staging buffer in MiB: one chunk of every offloaded "
                          "state of a unit."));
  f.push_back(string_field(
      "offload.block_size", KIRI_FIELD(offload.block_size),
      "Bytes per I/O request and per checksum (DeepSpeed's aio.block_size): a multiple of "
      "4 KiB, e.g. 1MiB.",
      [](const std::string& s) {
        const int64_t b = parse_bytes(s);
        KIRI_CHECK_KIND(kConfig, b >= 4096 && b % 4096 == 0 && b <= (int64_t{1} << 30),
                        "offload.block_size must be a multiple of 4 KiB up to 1 GiB, got '",
                        quote_bounded(s, 80), "'");
      }));
  f.push_back(int_field("offload.queue_depth", KIRI_FIELD(offload.queue_depth), 1, 1024,
                        "I/O requests in flight per rank (DeepSpeed's aio.queue_depth)."));
  f.push_back(enum_field(
      "offload.engine", KIRI_FIELD(offload.engine),
      std::vector<std::pair<std::string, kiri::IoEngine>>{{"auto", kiri::IoEngine::kAuto},
                                                          {"io_uring", kiri::IoEngine::kIoUring},
                                                          {"threads", kiri::IoEngine::kThreads}},
      "Asynchronous I/O: `io_uring` (liburing), `threads` (pread/pwrite on a "
      "thread pool), `auto` (the thread pool: it measured faster than io_uring on this "
      "machine's disk, docs/performance.md)."));
}

}  // namespace kiri
