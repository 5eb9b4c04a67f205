#include "kiri/plan/layout.h"

#include <algorithm>

#include "kiri/base/error.h"

namespace kiri::plan {

const char* name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

const char* name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* name(Schedule s) {
  switch (s) {
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::k1F1B:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

const char* name(ActivationForm f) {
  return f == ActivationForm::kPaper ? "paper" : "kiri";
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
  KIRI_RAISE(kConfig, "--recompute must be none, selective or full, got '", s, "'");
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

const char* name(OffloadTarget t) {
  return t == OffloadTarget::kNvme ? "nvme" : "none";
}

OffloadTarget parse_offload(const std::string& s, const std::string& option) {
  if (s == "none") return OffloadTarget::kNone;
  if (s == "nvme") return OffloadTarget::kNvme;
  KIRI_CHECK_KIND(kConfig, s != "cpu", option,
                  " = cpu: on kiri's CPU backend device and host memory are the same RAM, so "
                  "the state is in host memory already; offload to nvme moves it off");
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
                            name(dtype), ", recompute ", name(recompute));
  if (sequence_parallel) s += ", sp";
  if (pp > 1) s += kiri::str(", ", name(schedule));
  if (virtual_stages > 1) s += kiri::str(" v ", virtual_stages);
  s += kiri::str(", b ", micro_batch, ", m ", microbatches());
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

void validate_offload(const Layout& l) {
  const OffloadSpec& o = l.offload;
  if (!o.any()) return;
  KIRI_CHECK_KIND(kConfig, o.parameters == OffloadTarget::kNone || l.zero_stage == 3,
                  "parameter offload needs ZeRO stage 3 (each rank keeps only its shard of the "
                  "parameters, which is what moves to NVMe), got stage ",
                  l.zero_stage);
  KIRI_CHECK_KIND(kConfig,
                  o.parameters == OffloadTarget::kNone || o.optimizer == OffloadTarget::kNvme,
                  "parameter offload needs the optimizer states offloaded too (ZeRO-Infinity "
                  "moves the larger states first; offload.optimizer = nvme)");
  KIRI_CHECK_KIND(kConfig, o.gradients == OffloadTarget::kNone || l.zero_stage >= 2,
                  "gradient offload needs ZeRO stage 2 or 3 (each rank keeps only its shard of "
                  "the gradients, which is what moves to NVMe), got stage ",
                  l.zero_stage);
  KIRI_CHECK_KIND(kConfig,
                  o.gradients == OffloadTarget::kNone || o.optimizer == OffloadTarget::kNvme,
                  "gradient offload needs the optimizer states offloaded too (the optimizer "
                  "reads the gradients with its states; offload.optimizer = nvme)");
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
  KIRI_CHECK_KIND(kConfig, l.dp >= 1 && l.tp >= 1 && l.pp >= 1, "--dp ", l.dp, ", --tp ", l.tp,
                  " and --pp ", l.pp, " must be at least 1");
  KIRI_CHECK_KIND(kConfig, world <= 0 || l.world() == world, "dp ", l.dp, " x tp ", l.tp, " x pp ",
                  l.pp, " = ", l.world(), " is not the world size ", world);
  KIRI_CHECK_KIND(kConfig, l.zero_stage >= 0 && l.zero_stage <= 3, "--zero-stage must be 0-3, got ",
                  l.zero_stage);
  KIRI_CHECK_KIND(kConfig, l.shard_group >= 0 && (l.shard_group == 0 || l.dp % l.shard_group == 0),
                  "the shard group ", l.shard_group, " does not divide dp ", l.dp);
  KIRI_CHECK_KIND(kConfig, l.micro_batch >= 1 && l.global_batch >= 1 && l.seq_len >= 1,
                  "--micro-batch ", l.micro_batch, ", --global-batch ", l.global_batch,
                  " and --seq-len ", l.seq_len, " must be at least 1");
  KIRI_CHECK_KIND(kConfig, l.global_batch % (l.micro_batch * l.dp) == 0, "--global-batch ",
                  l.global_batch, " is not a multiple of micro-batch ", l.micro_batch, " x dp ",
                  l.dp, " = ", l.micro_batch * l.dp);
  KIRI_CHECK_KIND(kConfig, l.wrap_blocks >= 1, "wrap_blocks must be at least 1, got ",
                  l.wrap_blocks);
  validate_offload(l);
  if (model.params_only()) {
    KIRI_CHECK_KIND(kConfig, l.tp == 1 && l.pp == 1,
                    "a --params model has no structure to cut: only --dp and --zero-stage apply "
                    "(got tp ",
                    l.tp, ", pp ", l.pp, ")");
    return;
  }
  if (model.arch == Arch::kLlama) {
    // Megatron's cut of grouped-query attention: each tp rank keeps whole query heads and
    // whole key/value heads (nanotron and picotron require both; no kv replication).
    KIRI_CHECK_KIND(kConfig, model.heads % l.tp == 0 && model.kv_head_count() % l.tp == 0, "--tp ",
                    l.tp, " must divide both the ", model.heads, " query heads and the ",
                    model.kv_head_count(), " key/value heads of ", model.name);
  } else {
    KIRI_CHECK_KIND(kConfig, model.heads % l.tp == 0, "--tp ", l.tp, " does not divide the ",
                    model.heads, " heads");
  }
  KIRI_CHECK_KIND(kConfig, model.ffn_width() % l.tp == 0, "--tp ", l.tp,
                  " does not divide the MLP width ", model.ffn_width());
  KIRI_CHECK_KIND(kConfig, l.pp <= model.n_layer, "--pp ", l.pp, " is more than the ",
                  model.n_layer, " layers");
  KIRI_CHECK_KIND(kConfig, l.pp == 1 || l.zero_stage <= 1, "--zero-stage ", l.zero_stage,
                  " with --pp ", l.pp,
                  ": stages 2 and 3 reduce every micro-batch, which kiri's schedules do not "
                  "interleave (pp > 1 needs stage 0 or 1)");
  const int64_t m = l.microbatches();
  if (l.schedule == Schedule::kInterleaved) {
    KIRI_CHECK_KIND(kConfig, l.pp >= 2, "the interleaved schedule needs --pp >= 2, got ", l.pp);
    KIRI_CHECK_KIND(kConfig, l.virtual_stages >= 2, "the interleaved schedule needs ",
                    "--virtual-stages >= 2, got ", l.virtual_stages);
    KIRI_CHECK_KIND(kConfig, m % l.pp == 0, "interleaved: the ", m,
                    " micro-batches are not a multiple of pp ", l.pp);
    KIRI_CHECK_KIND(kConfig, model.n_layer >= int64_t{l.pp} * l.virtual_stages,
                    "interleaved: ", model.n_layer, " layers are fewer than pp ", l.pp, " x v ",
                    l.virtual_stages);
  } else {
    KIRI_CHECK_KIND(kConfig, l.virtual_stages == 1, "--virtual-stages ", l.virtual_stages,
                    " needs the interleaved schedule (", name(l.schedule), " has 1)");
  }
  KIRI_CHECK_KIND(kConfig, model.arch != Arch::kGpt2 || l.seq_len <= model.max_seq, "--seq-len ",
                  l.seq_len, " is longer than ", model.name, "'s context ", model.max_seq);
}

}  // namespace kiri::plan
