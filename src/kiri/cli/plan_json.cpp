// kiri plan --json: the planner's types as the JSON that kiri plan prints.
#include "kiri/cli/plan_json.h"

namespace kiri::cli {

using nlohmann::json;

static json nullable(bool valid, double x) {
  return valid ? json(x) : json(nullptr);
}

static json memory_json(const plan::MemoryBreakdown& m) {
  return {{"parameters", m.parameters},
          {"gradients", m.gradients},
          {"optimizer_states", m.optimizer_states},
          {"activations", m.activations},
          {"buffers", m.buffers},
          {"total", m.total()},
          {"nvme",
           {{"parameters", m.nvme.parameters},
            {"gradients", m.nvme.gradients},
            {"optimizer_states", m.nvme.optimizer_states},
            {"total", m.nvme.total()}}}};
}

json layout_json(const plan::Layout& l) {
  return {{"dp", l.dp},
          {"tp", l.tp},
          {"pp", l.pp},
          {"zero_stage", l.zero_stage},
          {"shard_group_size", l.shard_size()},
          {"dtype", plan::name(l.dtype)},
          {"activation_checkpointing", plan::name(l.activation_checkpointing)},
          {"recompute_modules",
           l.activation_checkpointing == plan::Recompute::kSelective ? kiri::name(l.modules) : ""},
          {"sequence_parallel", l.sequence_parallel},
          {"schedule", plan::name(l.schedule)},
          {"virtual_stages", l.virtual_stages},
          {"micro_batch", l.micro_batch},
          {"global_batch", l.global_batch},
          {"microbatches", l.step_microbatches()},
          {"seq_len", l.seq_len},
          {"wrap_blocks", l.wrap_blocks},
          {"overlap_dp", l.overlap_dp},
          {"activations", plan::name(l.form)},
          {"attention", plan::name(l.attention())},
          {"grad_dtype", l.fp32_grads ? "fp32" : plan::name(l.dtype)},
          {"bucket_mb", l.bucket_mb},
          {"offload",
           {{"optimizer", plan::name(l.offload.optimizer)},
            {"parameters", plan::name(l.offload.parameters)},
            {"gradients", plan::name(l.offload.gradients)},
            {"buffer_count", l.offload.buffer_count},
            {"buffer_bytes", l.offload.buffer_bytes},
            {"block_size", l.offload.block_size},
            {"queue_depth", l.offload.queue_depth}}}};
}

json evaluation_json(const plan::Evaluation& e) {
  const plan::TimeBreakdown& t = e.time;
  const bool ok = t.estimated;
  json stages = json::array();
  for (const auto& s : e.memory.stages) stages.push_back(memory_json(s));
  return {{"layout", layout_json(e.layout)},
          {"stage", e.memory.stage},
          {"memory", memory_json(e.memory.memory)},
          {"memory_capacity", e.capacity},
          {"layer_activations", e.layer_activations},
          {"stages", stages},
          {"fits", e.fits},
          {"flops_per_step", nullable(ok, t.flops_per_step)},
          {"model_flops_per_step", nullable(ok, t.model_flops_per_step)},
          {"step_time_s", nullable(ok, t.step_s)},
          {"tokens_per_s", nullable(ok, t.tokens_per_s)},
          {"tflops_per_device", nullable(ok, t.tflops_per_device)},
          {"mfu", nullable(ok, t.mfu)},
          {"time",
           {{"compute_s", nullable(ok, t.compute_s)},
            {"stage_s", ok ? json(t.stage_s) : json(nullptr)},
            {"optimizer_s", nullable(ok, t.optimizer_s)},
            {"bubble_s", nullable(ok, t.bubble_s)},
            {"bubble_fraction", nullable(ok, t.bubble_fraction)},
            {"tp_comm_s", nullable(ok, t.tp_comm_s)},
            {"pp_comm_s", nullable(ok, t.pp_comm_s)},
            {"dp_comm_s", nullable(ok, t.dp_comm_s)},
            {"dp_comm_total_s", nullable(ok, t.dp_comm_total_s)},
            {"dp_comm_cpu_s", nullable(ok, t.dp_comm_cpu_s)},
            {"disk_read_bytes", nullable(ok, t.disk_read_bytes)},
            {"disk_write_bytes", nullable(ok, t.disk_write_bytes)},
            {"disk_read_s", nullable(ok, t.disk_read_s)},
            {"disk_write_s", nullable(ok, t.disk_write_s)},
            {"io_exposed_s", nullable(ok, t.io_exposed_s)},
            {"compute_slowdown", nullable(ok, t.compute_slowdown)},
            {"clip_s", nullable(ok, t.clip_s)},
            {"overhead_s", nullable(ok, t.overhead_s)},
            {"iteration_s", nullable(ok, t.iteration_s)}}}};
}

json model_json(const plan::ModelSpec& m) {
  json j = {{"name", m.name}, {"params", m.total_params()}};
  if (!m.params_only()) {
    j["arch"] = m.arch == kiri::Arch::kLlama ? "llama" : "gpt2";
    j["layers"] = m.n_layer;
    j["hidden"] = m.hidden;
    j["heads"] = m.heads;
    j["kv_heads"] = m.kv_head_count();
    j["vocab"] = m.vocab;
    j["tie_word_embeddings"] = m.tie_word_embeddings;
    j["ffn"] = m.ffn_width();
    j["context"] = m.max_seq;
  }
  return j;
}

json cluster_json(const plan::ClusterSpec& c) {
  return {{"name", c.name},
          {"device", c.device},
          {"devices_per_node", c.devices_per_node},
          {"nodes", c.nodes},
          {"memory_bytes", c.memory_bytes},
          {"flops_fp32", c.flops_fp32},
          {"flops_16bit", c.flops_16bit},
          {"flops_fp16", plan::peak_flops(c, plan::Precision::kFp16)},
          {"efficiency", c.efficiency},
          {"sustained_16bit", plan::sustained_flops(c, plan::Precision::kBf16)},
          {"memory_bandwidth", c.memory_bandwidth},
          {"comm_overlaps_compute", c.comm_overlaps_compute},
          {"transfer_compute_share", c.transfer_compute_share},
          {"non_gemm",
           {{"logit_s", c.non_gemm.logit_s},
            {"activation_s", c.non_gemm.activation_s},
            {"optimizer_s", c.non_gemm.optimizer_s},
            {"gradient_s", c.non_gemm.gradient_s},
            {"logit_split_s", c.non_gemm.logit_split_s},
            {"optimizer_zeroing_s", c.non_gemm.optimizer_zeroing_s},
            {"zeroing_s", c.non_gemm.zeroing_s}}},
          {"intra", {{"bandwidth", c.intra.bandwidth}, {"latency", c.intra.latency}}},
          {"inter", {{"bandwidth", c.inter.bandwidth}, {"latency", c.inter.latency}}},
          {"nics_per_node", c.nics()},
          {"shared_cores", c.shared_cores},
          {"step_overhead_s", c.step_overhead_s},
          {"disk",
           {{"read_bandwidth", c.disk.read_bandwidth},
            {"write_bandwidth", c.disk.write_bandwidth},
            {"measured", c.disk.measured}}},
          {"source", c.source.empty() ? json(nullptr) : json(c.source)},
          {"measured", c.measured},
          {"assumed", c.assumed}};
}

}  // namespace kiri::cli
