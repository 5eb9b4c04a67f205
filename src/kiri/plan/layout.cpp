#include "kiri/plan/layout.h"

#include <algorithm>

#include "kiri/base/error.h"

namespace kiri::plan {

const char* name(ActivationForm f) {
  return f == ActivationForm::kPaper ? "paper" : "kiri";
}

const char* name(Attention a) {
  return a == Attention::kFlash ? "flash" : "standard";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  KIRI_RAISE(kConfig, "--dtype must be fp32, bf16 or fp16, got '", s, "'");
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  KIRI_RAISE(kConfig, "--activation-checkpointing must be none, selective or full, got '", s, "'");
}

Schedule parse_schedule(const std::string& s) {
  if (s == "gpipe") return Schedule::kGpipe;
  if (s == "1f1b") return Schedule::k1F1B;
  if (s == "interleaved") return Schedule::kInterleaved;
  KIRI_RAISE(kConfig, "--schedule must be gpipe, 1f1b or interleaved, got '", s, "'");
}

ActivationForm parse_form(const std::string& s) {
  if (s == "paper") return ActivationForm::kPaper;
  if (s == "kiri") return ActivationForm::kKiri;
  KIRI_RAISE(kConfig, "--activations must be paper or kiri, got '", s, "'");
}

Attention parse_attention(const std::string& s) {
  if (s == "standard") return Attention::kStandard;
  if (s == "flash") return Attention::kFlash;
  KIRI_RAISE(kConfig, "--attention must be standard or flash, got '", s, "'");
}

OffloadTarget parse_offload(const std::string& s, const std::string& option) {
  if (s == "none") return OffloadTarget::kNone;
  if (s == "nvme") return OffloadTarget::kNvme;
  if (s == "cpu") {  // refused by the layout's own rule, in kiri plan's words
    OffloadSpec o;
    OffloadTarget& tier = option.find("parameters") != std::string::npos  ? o.parameters
                          : option.find("gradients") != std::string::npos ? o.gradients
                                                                          : o.optimizer;
    tier = OffloadTarget::kCpu;
    kiri::LayoutFacts f;
    f.words = LayoutWords::kPlan;
    kiri::validate_layout(kiri::Layout{}, f, o);
  }
  KIRI_RAISE(kConfig, option, " must be none or nvme, got '", s, "'");
}

int value_bytes(Precision p) {
  return p == Precision::kFp32 ? 4 : 2;
}

int64_t global_batch(int64_t micro_batch, int64_t grad_accum, int64_t dp) {
  return micro_batch * grad_accum * dp;
}

std::string Layout::str() const {
  std::string s = kiri::str("dp ", dp, " x tp ", tp, " x pp ", pp, ", zero ", zero_stage, ", ",
                            name(dtype), ", recompute ", name(activation_checkpointing));
  // selective's modules when they are not Megatron's default (core_attn)
  if (activation_checkpointing == Recompute::kSelective &&
      !(modules == kiri::RecomputeModules{.core_attn = true}))
    s += kiri::str(" (", kiri::name(modules), ")");
  if (sequence_parallel) s += ", sp";
  if (pp > 1) s += kiri::str(", ", name(schedule));
  if (virtual_stages > 1) s += kiri::str(" v ", virtual_stages);
  s += kiri::str(", b ", micro_batch, ", m ", step_microbatches());
  std::string off;
  if (offload.optimizer == OffloadTarget::kNvme) off += "+optimizer";
  if (offload.parameters == OffloadTarget::kNvme) off += "+parameters";
  if (offload.gradients == OffloadTarget::kNvme) off += "+gradients";
  if (!off.empty()) s += ", offload " + off.substr(1);
  return s;
}

StreamShape stream_shape(const OffloadSpec& o, Precision dtype) {
  const int64_t d = value_bytes(dtype);
  const bool values = o.parameters == OffloadTarget::kNvme;
  const bool grads = o.gradients == OffloadTarget::kNvme;
  StreamShape out;
  out.bytes_per_element =
      4 * (dtype == Precision::kFp32 ? 2 : 3) + (values ? d : 0) + (grads ? d : 0);
  out.granule = o.block_size / (values || grads ? std::min<int64_t>(4, d) : 4);
  return out;
}

namespace {

// The planner's own offload rules, on top of the layout's tiers: the staging pool and I/O
// shape that optim::StateStore streams with.
void validate_offload_io(const Layout& l) {
  const OffloadSpec& o = l.offload;
  if (!o.any()) return;
  KIRI_CHECK_KIND(kConfig, o.buffer_count >= 2,
                  "offload.buffer_count must be >= 2 (one chunk read while one is written), got ",
                  o.buffer_count);
  KIRI_CHECK_KIND(kConfig, o.block_size > 0 && o.block_size % 4096 == 0,
                  "offload.block_size must be a positive multiple of 4096 bytes, got ",
                  o.block_size);
  KIRI_CHECK_KIND(kConfig, o.queue_depth >= 1, "offload.queue_depth must be >= 1, got ",
                  o.queue_depth);
  // optim::StateStore's rule: a buffer holds at least one granule of every streamed state.
  const StreamShape shape = stream_shape(o, l.dtype);
  const int64_t per_elem = shape.bytes_per_element, granule = shape.granule;
  KIRI_CHECK_KIND(
      kConfig, o.optimizer == OffloadTarget::kNone || o.buffer_bytes >= per_elem * granule,
      "an offload buffer of ", o.buffer_bytes, " bytes cannot hold one block of each ",
      "offloaded state (", per_elem * granule, " bytes at a block of ", o.block_size, ")");
}

}  // namespace

void validate(const Layout& l, const ModelSpec& model, int world) {
  KIRI_CHECK_KIND(kConfig, l.micro_batch >= 1 && l.global_batch >= 1 && l.seq_len >= 1,
                  "--micro-batch ", l.micro_batch, ", --global-batch ", l.global_batch,
                  " and --seq-len ", l.seq_len, " must be at least 1");
  KIRI_CHECK_KIND(kConfig, l.dp >= 1, "--dp = ", l.dp, " must be >= 1");
  KIRI_CHECK_KIND(kConfig, l.global_batch % (l.micro_batch * l.dp) == 0, "--global-batch ",
                  l.global_batch, " is not a multiple of micro-batch ", l.micro_batch, " x dp ",
                  l.dp, " = ", l.micro_batch * l.dp);
  KIRI_CHECK_KIND(kConfig, l.wrap_blocks >= 1, "wrap_blocks must be at least 1, got ",
                  l.wrap_blocks);
  if (model.params_only())
    KIRI_CHECK_KIND(kConfig, l.tp == 1 && l.pp == 1,
                    "a --params model has no structure to cut: only --dp and --zero-stage apply "
                    "(got tp ",
                    l.tp, ", pp ", l.pp, ")");
  // Every rule of kiri's layout, in kiri plan's words; the pipeline's m comes from the batch.
  kiri::Layout cut = l;
  cut.microbatches = static_cast<int>(l.step_microbatches());
  kiri::LayoutFacts f;
  f.words = LayoutWords::kPlan;
  f.world = world > 0 ? world : 0;
  if (!model.params_only()) {
    f.n_layer = static_cast<int>(model.n_layer);
    f.n_head = static_cast<int>(model.heads);
    f.kv_heads = static_cast<int>(model.kv_head_count());
    f.mlp_width = model.ffn_width();
    f.micro_batch = l.micro_batch;
    f.seq_len = l.seq_len;
  }
  kiri::validate_layout(cut, f, l.offload);
  validate_offload_io(l);
  if (model.params_only()) return;
  KIRI_CHECK_KIND(kConfig, model.arch != Arch::kGpt2 || l.seq_len <= model.max_seq, "--seq-len ",
                  l.seq_len, " is longer than ", model.name, "'s context ", model.max_seq);
}

}  // namespace kiri::plan
