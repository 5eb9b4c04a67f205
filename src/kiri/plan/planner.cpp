#include "kiri/plan/planner.h"

#include <algorithm>
#include <cstdio>

#include "kiri/base/error.h"

namespace kiri::plan {

Evaluation evaluate(const ModelSpec& model, const Layout& layout, const ClusterSpec& cluster) {
  validate(layout, model);
  Evaluation e;
  e.layout = layout;
  e.memory = worst_rank_memory(model, layout);
  e.time = estimate_time(model, layout, cluster);
  e.capacity = cluster.memory_bytes;
  e.fits = e.memory.memory.total() <= e.capacity;
  if (!model.params_only())
    e.layer_activations = layer_activation_bytes(model, layout, layout.activation_checkpointing);
  return e;
}

namespace {

bool valid(const Layout& l, const ModelSpec& m) {
  try {
    validate(l, m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool faster(const Evaluation& a, const Evaluation& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits && a.time.estimated) {
    if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    // The same time (communication hidden): the one that moves less.
    const double ca = a.time.tp_comm_s + a.time.pp_comm_s + a.time.dp_comm_total_s;
    const double cb = b.time.tp_comm_s + b.time.pp_comm_s + b.time.dp_comm_total_s;
    if (ca != cb) return ca < cb;
  }
  return a.memory.memory.total() < b.memory.memory.total();
}

// The global batch of `base` if dp·b divides it, else the next multiple (for checks that
// only need memory).
Layout with_dp(const Layout& base, int dp) {
  Layout l = base;
  l.dp = dp;
  l.tp = l.pp = 1;
  l.sequence_parallel = false;  // nothing to split at tp 1
  l.shard_group_size = 0;
  l.schedule = Schedule::k1F1B;
  l.virtual_stages = 1;
  const int64_t unit = l.micro_batch * dp;
  l.global_batch = (l.global_batch + unit - 1) / unit * unit;
  return l;
}

// One layer as ZeRO-3 works on it, whole: its parameters gathered and its full gradient in
// the value type, and its activations for one micro-batch.
double one_layer_bytes(const ModelSpec& m, const Layout& l) {
  if (m.params_only()) return 0;
  Layout whole = l;
  whole.tp = 1;
  whole.sequence_parallel = false;
  const double act = layer_activation_bytes(m, whole, Recompute::kNone);
  return 2.0 * static_cast<double>(m.layer_params()) * value_bytes(l.dtype) + act;
}

}  // namespace

namespace {

// Which layouts enumerate_layouts adds for one offload setting.
enum class ZeroRange { kAll, kStage3 };

void add_layouts(const PlanRequest& r, const OffloadSpec& offload, ZeroRange zeros,
                 std::vector<Evaluation>& out) {
  const ModelSpec& m = r.model;
  std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kFull};
  if (r.base.form == ActivationForm::kPaper)
    recomputes.insert(recomputes.begin() + 1, Recompute::kSelective);
  for (int tp : divisors(r.world)) {
    if (m.params_only() && tp > 1) break;
    if (tp > r.cluster.devices_per_node) break;
    for (int pp : divisors(r.world / tp)) {
      if (m.params_only() && pp > 1) break;
      const int dp = r.world / tp / pp;
      for (int zero = zeros == ZeroRange::kStage3 ? 3 : 0; zero <= 3; ++zero) {
        // One rank shards nothing, except that parameter offload needs stage 3's shard.
        if (dp == 1 && zero > 0 && zeros != ZeroRange::kStage3) break;
        for (Recompute rc : recomputes) {
          if (m.params_only() && rc != Recompute::kNone) break;
          std::vector<std::pair<Schedule, int>> schedules = {{Schedule::k1F1B, 1}};
          if (pp > 1) schedules.push_back({Schedule::kInterleaved, 2});
          for (auto [schedule, v] : schedules) {
            Layout l = r.base;
            l.dp = dp;
            l.tp = tp;
            l.pp = pp;
            l.zero_stage = zero;
            l.shard_group_size = 0;
            l.activation_checkpointing = rc;
            l.schedule = schedule;
            l.virtual_stages = v;
            l.offload = offload;
            // Sequence parallelism splits over tp: with tp 1 there is nothing to split (as
            // Megatron turns --sequence-parallel off at tp 1); the layout rule refuses it.
            l.sequence_parallel = r.base.sequence_parallel && tp > 1;
            if (!valid(l, m)) continue;
            out.push_back(evaluate(m, l, r.cluster));
          }
        }
      }
    }
  }
}

bool any_fits(const std::vector<Evaluation>& es) {
  return std::any_of(es.begin(), es.end(), [](const Evaluation& e) { return e.fits; });
}

}  // namespace

std::vector<Evaluation> enumerate_layouts(const PlanRequest& r) {
  KIRI_CHECK_KIND(kConfig, r.world >= 1, "the world must have at least 1 device, got ", r.world);
  std::vector<Evaluation> out;
  add_layouts(r, r.base.offload, ZeroRange::kAll, out);
  if (r.offload_if_needed && !r.base.offload.any() && !any_fits(out)) {
    OffloadSpec o = r.base.offload;
    o.optimizer = OffloadTarget::kNvme;
    add_layouts(r, o, ZeroRange::kAll, out);
    if (!any_fits(out) && !r.model.params_only()) {
      // ZeRO-Infinity: the parameters and with them the gradients (offload.gradients' auto).
      o.parameters = o.gradients = OffloadTarget::kNvme;
      add_layouts(r, o, ZeroRange::kStage3, out);
    }
  }
  std::stable_sort(out.begin(), out.end(), faster);
  return out;
}

std::string gib(double bytes) {
  char buf[32];
  if (bytes < 1024.0 * 1024.0 * 1024.0)  // small models: MiB, not "0.0 GiB"
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

namespace {

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

// Layouts within 1% of each other's step time count as equally fast: a cut that buys
// under 1% is not worth its complexity (and is within the model's noise).
constexpr double kNearlyAsFast = 1.01;

// The states do not fit, and the best layout cuts the layers into pipeline stages because
// sharding alone is slower or does not fit: the bottleneck is then too many layers (ZeRO-3
// would gather every layer's weights each micro-batch; stages keep theirs and send only
// activations).
void too_many_layers(const PlanRequest& r, const std::vector<Evaluation>& candidates,
                     Recommendation& rec) {
  if (!rec.best || rec.best->layout.pp == 1 || !rec.best->time.estimated) return;
  const Evaluation* flat = nullptr;  // the fastest fitting layout without stages
  for (const Evaluation& e : candidates)
    if (e.fits && e.layout.pp == 1) {
      flat = &e;
      break;
    }
  const Evaluation& best = *rec.best;
  const bool slower = !flat || flat->time.step_s > best.time.step_s * kNearlyAsFast;
  // As fast without stages, and the best layout shards: ZeRO carries the states.
  if (!slower && best.layout.zero_stage > 0) return;
  rec.bottleneck = "layers";
  rec.cut = "pipeline_parallel";
  const int64_t per_stage = (r.model.n_layer + best.layout.pp - 1) / best.layout.pp;
  const std::string stages = str(best.layout.pp, " stages keep at most ", per_stage, " of the ",
                                 r.model.n_layer, " layers on each device");
  if (!slower) {  // as fast, and no sharding needed once the layers are cut
    rec.message += str("; cutting the layers does it without sharding: ", stages,
                       ", as fast as the fastest layout without stages (", flat->layout.str(), ", ",
                       secs(flat->time.step_s), ") and moving less");
    return;
  }
  rec.message +=
      str("; but the layers are too many for sharding alone: ",
          flat ? str("the fastest layout without pipeline stages (", flat->layout.str(), ") takes ",
                     secs(flat->time.step_s), " (",
                     secs(flat->time.dp_comm_total_s + flat->time.tp_comm_s),
                     " of it communication, every layer's weights gathered or reduced over dp)")
               : std::string("no layout without pipeline stages fits"),
          ", while ", stages, " and send only activations: cut the layers");
}

// The states do not fit, and the best layout answers with tensor parallelism alone (no
// ZeRO, no stages): tp also cuts every rank's states by tp, and here it is the faster cut.
void states_cut_by_tp(const std::vector<Evaluation>& candidates, Recommendation& rec) {
  if (!rec.best || rec.bottleneck != "model_states" || !rec.best->time.estimated) return;
  const Layout& l = rec.best->layout;
  if (l.tp == 1 || l.pp > 1 || l.zero_stage > 0) return;
  rec.cut = "tensor_parallel";
  const Evaluation* zero = nullptr;  // the fastest fitting layout with ZeRO
  for (const Evaluation& e : candidates)
    if (e.fits && e.layout.zero_stage > 0) {
      zero = &e;
      break;
    }
  rec.message += str("; tensor parallelism cuts each rank's states by ", l.tp, " too, and is the ",
                     zero ? str("faster cut here (the fastest ZeRO layout, ", zero->layout.str(),
                                ", takes ", secs(zero->time.step_s), ")")
                          : std::string("only one that fits"));
}

// Whether layout l makes `cut` (data_parallel | zero | tensor_parallel | pipeline_parallel |
// checkpointing).
bool makes(const Layout& l, const std::string& cut) {
  return (cut == "data_parallel" && l.dp > 1) || (cut == "zero" && l.zero_stage > 0) ||
         (cut == "tensor_parallel" && l.tp > 1) || (cut == "pipeline_parallel" && l.pp > 1) ||
         (cut == "checkpointing" && l.activation_checkpointing != Recompute::kNone);
}

// The headline's cut is one the recommended layout makes: when the fastest layout that fits
// answers the bottleneck with another cut (pipeline stages hold fewer layers' activations
// than recomputation would save, say), name that cut, and the fastest layout that makes the
// first one.
void match_headline(const std::vector<Evaluation>& candidates, Recommendation& rec) {
  if (!rec.best || !rec.best->time.estimated || rec.cut.empty()) return;
  const Layout& l = rec.best->layout;
  if (makes(l, rec.cut)) return;
  const std::string cut = l.pp > 1                                         ? "pipeline_parallel"
                          : l.tp > 1                                       ? "tensor_parallel"
                          : l.zero_stage > 0                               ? "zero"
                          : l.activation_checkpointing != Recompute::kNone ? "checkpointing"
                                                                           : "data_parallel";
  const Evaluation* with = nullptr;  // the fastest that fits and makes the first cut
  for (const Evaluation& e : candidates)
    if (e.fits && makes(e.layout, rec.cut)) {
      with = &e;
      break;
    }
  rec.message += str("; the fastest layout that fits answers it with ", cut, " instead (",
                     with ? str("the fastest with ", rec.cut, ", ", with->layout.str(), ", takes ",
                                secs(with->time.step_s))
                          : str("no layout with ", rec.cut, " fits"),
                     ")");
  rec.cut = cut;
}

// "the optimizer states" / "the optimizer states, the parameters and the gradients"
std::string offloaded_what(const OffloadSpec& o) {
  std::vector<std::string> parts;
  if (o.optimizer == OffloadTarget::kNvme) parts.push_back("the optimizer states");
  if (o.parameters == OffloadTarget::kNvme) parts.push_back("the parameters");
  if (o.gradients == OffloadTarget::kNvme) parts.push_back("the gradients");
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i)
    s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s;
}

std::string disk_words(const ClusterSpec& c) {
  return str(c.disk.read_bandwidth / 1e9, " GB/s read, ", c.disk.write_bandwidth / 1e9,
             " GB/s write per node, ",
             c.disk.measured ? "measured by kiri plan --calibrate"
                             : "assumed: kiri plan --calibrate measures offload.path's disk");
}

std::string offload_reason(const Evaluation& e, const ClusterSpec& c) {
  const MemoryBreakdown& m = e.memory.memory;
  const TimeBreakdown& t = e.time;
  std::string s =
      str("offload (", offloaded_what(e.layout.offload), " to NVMe): ", gib(m.nvme.total()),
          " per rank on NVMe (parameters ", gib(m.nvme.parameters), ", gradients ",
          gib(m.nvme.gradients), ", optimizer states ", gib(m.nvme.optimizer_states), "), ",
          gib(m.total()), " in memory");
  if (t.estimated)
    s += str("; per step ", gib(t.disk_read_bytes), " read, ", gib(t.disk_write_bytes),
             " written (", secs(t.disk_read_s + t.disk_write_s), " of I/O, ", secs(t.io_exposed_s),
             " not hidden; disk ", disk_words(c), ")");
  return s;
}

// No layout fits without offload, and the best one offloads: name the cut, the peak RAM,
// the NVMe bytes and the slowdown against the same layout without offload.
void offload_headline(const PlanRequest& r, Recommendation& rec) {
  const Evaluation& e = *rec.best;
  rec.cut = "offload";
  const MemoryBreakdown& m = e.memory.memory;
  rec.message += str("; no layout of ", r.world, r.world == 1 ? " device" : " devices",
                     " fits without offload, so offload ", offloaded_what(e.layout.offload),
                     " to NVMe (offload.path): ", gib(m.total()), " in memory of ", gib(e.capacity),
                     " per device, ", gib(m.nvme.total()), " per rank on NVMe");
  if (!e.time.estimated) return;
  Layout plain = e.layout;
  plain.offload.optimizer = plain.offload.parameters = OffloadTarget::kNone;
  rec.step_without_offload_s = estimate_time(r.model, plain, r.cluster).step_s;
  rec.offload_slowdown = e.time.step_s / rec.step_without_offload_s;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", rec.offload_slowdown);
  rec.message += str(", predicted slowdown ", ratio, "x (step ", secs(e.time.step_s), " against ",
                     secs(rec.step_without_offload_s), " for the same layout if it fitted; ",
                     gib(e.time.disk_read_bytes), " read and ", gib(e.time.disk_write_bytes),
                     " written per step, disk ", disk_words(r.cluster), ")");
}

}  // namespace

namespace {

// The fastest fitting candidate, or within kNearlyAsFast of it the one with the least on NVMe
// (0 unless offloaded), then the fewest cuts, then the least communication.
std::optional<Evaluation> pick_best(const std::vector<Evaluation>& candidates) {
  std::optional<Evaluation> best;
  for (const Evaluation& e : candidates)
    if (e.fits) {
      best = e;
      break;
    }
  auto cuts = [](const Layout& l) {
    return (l.zero_stage > 0) + (l.tp > 1) + (l.pp > 1) +
           (l.activation_checkpointing != Recompute::kNone);
  };
  auto comm = [](const Evaluation& e) {
    return e.time.tp_comm_s + e.time.pp_comm_s + e.time.dp_comm_total_s;
  };
  if (best && best->time.estimated) {
    const double limit = best->time.step_s * kNearlyAsFast;
    for (const Evaluation& e : candidates) {
      if (!e.fits || e.time.step_s > limit) break;  // sorted: the fitting ones by time
      // Offloaded, the least on NVMe first: disk space, and the traffic of a shared disk.
      const double da = e.memory.memory.nvme.total(), db = best->memory.memory.nvme.total();
      const int a = cuts(e.layout), b = cuts(best->layout);
      if (da < db || (da == db && (a < b || (a == b && comm(e) < comm(*best))))) best = e;
    }
  }
  return best;
}

// The fewest devices on which pure ZeRO-3 (with full recomputation) fits; 0 for none.
int min_devices(const PlanRequest& r) {
  const ModelSpec& m = r.model;
  for (int n = 1; n <= (1 << 20); n *= 2) {
    Layout l = with_dp(r.base, n);
    l.zero_stage = n > 1 ? 3 : 0;
    l.activation_checkpointing = m.params_only() ? Recompute::kNone : Recompute::kFull;
    if (worst_rank_memory(m, l).memory.total() <= r.cluster.memory_bytes) return n;
  }
  return 0;
}

// What stops plain data parallelism (`base`: its worst rank, b0 its layout), and the cut that
// answers it: rec's bottleneck, cut and message.
void diagnose(const PlanRequest& r, const std::vector<Evaluation>& candidates, const Layout& b0,
              const MemoryBreakdown& base, Recommendation& rec) {
  const ModelSpec& m = r.model;
  const double cap = r.cluster.memory_bytes;
  if (base.total() <= cap) {
    rec.bottleneck = "compute";
    rec.cut = "data_parallel";
    rec.message = str("plain data parallelism fits (", gib(base.total()), " of ", gib(cap),
                      " per device): the bottleneck is compute, so cut the data: ",
                      r.world > 1 ? str("dp ", r.world, " splits each step's batch")
                                  : std::string("add devices as data-parallel replicas"));
  } else if (base.model_states() > cap) {
    const double layer = one_layer_bytes(m, r.base);
    if (!m.params_only() && layer > cap) {
      rec.bottleneck = "layer";
      rec.cut = "tensor_parallel";
      rec.message =
          str("one layer (", gib(layer), " gathered with its activations) is more than a device's ",
              gib(cap), ": cut the matrices with tensor parallelism");
    } else {
      rec.bottleneck = "model_states";
      rec.cut = "zero";
      int stage = 0;
      for (int z = 1; z <= 3 && r.world > 1; ++z) {
        Layout l = b0;
        l.zero_stage = z;
        if (worst_rank_memory(m, l).memory.model_states() <= cap) {
          stage = z;
          break;
        }
      }
      rec.message =
          str("the model states (", gib(base.model_states()), " per device: ", gib(base.parameters),
              " parameters, ", gib(base.gradients), " gradients, ", gib(base.optimizer_states),
              " optimizer states) exceed a device's ", gib(cap), ": shard them with ZeRO/FSDP");
      if (stage > 0)
        rec.message += str(" (stage ", stage, " over dp ", r.world, " is enough for the states)");
      else if (rec.min_devices > 0)
        rec.message += str(", which needs at least ", rec.min_devices,
                           " devices (ZeRO-3 with full recomputation), or tensor/pipeline "
                           "parallelism over as many");
      too_many_layers(r, candidates, rec);
      states_cut_by_tp(candidates, rec);
    }
  } else {
    rec.bottleneck = "activations";
    rec.cut = "checkpointing";
    rec.message = str("the model states fit (", gib(base.model_states()), ") but not with the ",
                      gib(base.activations), " of activations: recompute them (checkpointing)");
  }
}

// Why the recommended layout has each of its cuts, and the message's end.
void explain(const PlanRequest& r, const MemoryBreakdown& base, Recommendation& rec) {
  const ModelSpec& m = r.model;
  if (rec.best) {
    const Layout& l = rec.best->layout;
    const MemoryBreakdown& mem = rec.best->memory.memory;
    if (l.dp > 1)
      rec.reasons.push_back(str("data parallel: dp ", l.dp, " splits the batch of ", l.global_batch,
                                " sequences (", l.step_microbatches(), " micro-batches of ",
                                l.micro_batch, " per rank)"));
    if (l.zero_stage > 0)
      rec.reasons.push_back(
          str("ZeRO stage ", l.zero_stage, ": model states ", gib(base.model_states()), " -> ",
              gib(mem.all_model_states()), " per rank",
              l.offload.any() ? str(" (", gib(mem.model_states()), " of them in memory)") : ""));
    if (l.tp > 1)
      rec.reasons.push_back(str("tensor parallel: tp ", l.tp, " cuts each layer's matrices (",
                                gib(static_cast<double>(m.layer_params()) * value_bytes(l.dtype)),
                                " of weights per layer)"));
    if (l.pp > 1)
      rec.reasons.push_back(str("pipeline parallel: pp ", l.pp, " (", name(l.schedule),
                                l.virtual_stages > 1 ? str(" v ", l.virtual_stages) : "",
                                "), bubble ", pct(rec.best->time.bubble_fraction)));
    if (l.activation_checkpointing != Recompute::kNone)
      rec.reasons.push_back(str("checkpointing (", name(l.activation_checkpointing),
                                "): activations ", gib(mem.activations), " per rank"));
    if (l.offload.any()) rec.reasons.push_back(offload_reason(*rec.best, r.cluster));
    rec.message += str(". Recommended: ", l.str());
    if (rec.best->time.estimated)
      rec.message +=
          str(" (step ", secs(rec.best->time.step_s), ", MFU ", pct(rec.best->time.mfu), ")");
  } else {
    rec.message += str(". No layout of ", r.world, r.world == 1 ? " device" : " devices", " fits");
    if (r.offload_if_needed && !r.base.offload.any())
      rec.message +=
          ", not even with the optimizer states, the parameters and the gradients offloaded to "
          "NVMe";
  }
}

}  // namespace

Recommendation recommend(const PlanRequest& r, const std::vector<Evaluation>& candidates) {
  Recommendation rec;
  rec.best = pick_best(candidates);
  rec.min_devices = min_devices(r);
  Layout b0 = with_dp(r.base, r.world);
  b0.zero_stage = 0;
  b0.activation_checkpointing = Recompute::kNone;
  const MemoryBreakdown base = worst_rank_memory(r.model, b0).memory;
  diagnose(r, candidates, b0, base, rec);
  if (rec.best && rec.best->layout.offload.any() && !r.base.offload.any())
    offload_headline(r, rec);
  else
    match_headline(candidates, rec);
  explain(r, base, rec);
  return rec;
}

std::string format_table(const std::vector<Evaluation>& cs, size_t top) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "%-4s %-4s %-4s %-4s %-9s %-14s %9s %9s %9s %9s %9s %9s %9s %-4s %10s %12s %6s\n",
                "dp", "tp", "pp", "zero", "recompute", "schedule", "params", "grads", "optim",
                "activ", "buffers", "total", "nvme", "fits", "step", "tokens/s", "MFU");
  out += line;
  for (size_t i = 0; i < cs.size() && i < top; ++i) {
    const Evaluation& e = cs[i];
    const Layout& l = e.layout;
    const MemoryBreakdown& m = e.memory.memory;
    const std::string sched =
        l.pp == 1 ? "-"
                  : (l.virtual_stages > 1 ? str(name(l.schedule), " v", l.virtual_stages)
                                          : std::string(name(l.schedule)));
    auto g = [](double b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fG", b / (1024.0 * 1024.0 * 1024.0));
      return std::string(buf);
    };
    std::string step = "-", tok = "-", mfu = "-";
    if (e.time.estimated) {
      step = secs(e.time.step_s);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g", e.time.tokens_per_s);
      tok = buf;
      mfu = pct(e.time.mfu);
    }
    std::snprintf(line, sizeof line,
                  "%-4d %-4d %-4d %-4d %-9s %-14s %9s %9s %9s %9s %9s %9s %9s %-4s %10s %12s %6s\n",
                  l.dp, l.tp, l.pp, l.zero_stage, name(l.activation_checkpointing), sched.c_str(),
                  g(m.parameters).c_str(), g(m.gradients).c_str(), g(m.optimizer_states).c_str(),
                  g(m.activations).c_str(), g(m.buffers).c_str(), g(m.total()).c_str(),
                  l.offload.any() ? g(m.nvme.total()).c_str() : "-", e.fits ? "yes" : "no",
                  step.c_str(), tok.c_str(), mfu.c_str());
    out += line;
  }
  if (cs.size() > top) out += str("(", cs.size() - top, " more; --top N shows more)\n");
  return out;
}

std::string format_evaluation(const ModelSpec& model, const ClusterSpec& cluster,
                              const Evaluation& e) {
  const MemoryBreakdown& m = e.memory.memory;
  std::string out = str(model.name, " (", model.total_params() / 1e9, "B parameters) on ",
                        e.layout.world(), " x ", cluster.name, "\nlayout: ", e.layout.str(),
                        "\nper rank (pipeline stage ", e.memory.stage, "):\n");
  // The NVMe tier beside memory when something is offloaded.
  auto tier = [&](double nvme) {
    return e.layout.offload.any() ? str("  (nvme ", gib(nvme), ")") : std::string();
  };
  out += str("  parameters        ", gib(m.parameters), tier(m.nvme.parameters), "\n");
  out += str("  gradients         ", gib(m.gradients), tier(m.nvme.gradients), "\n");
  out += str("  optimizer states  ", gib(m.optimizer_states), tier(m.nvme.optimizer_states), "\n");
  out += str("  activations       ", gib(m.activations), " (", name(e.layout.form), " form, ",
             name(e.layout.attention()), " attention; a layer ", gib(e.layer_activations),
             " per micro-batch)\n");
  out += str("  buffers           ", gib(m.buffers), "\n");
  out += str("  total             ", gib(m.total()), " of ", gib(e.capacity), ": ",
             e.fits ? "fits" : "does NOT fit", "\n");
  if (e.layout.offload.any())
    out += str("  on NVMe           ", gib(m.nvme.total()), " (offload.path; ",
               e.layout.offload.buffer_count, " staging buffers of ",
               gib(static_cast<double>(e.layout.offload.buffer_bytes)), " in buffers)\n");
  if (e.time.estimated && e.layout.offload.any()) {
    const TimeBreakdown& t = e.time;
    out +=
        str("offload I/O per step: ", gib(t.disk_read_bytes), " read in ", secs(t.disk_read_s),
            ", ", gib(t.disk_write_bytes), " written in ", secs(t.disk_write_s), ", ",
            secs(t.io_exposed_s), " not hidden behind compute (disk ", disk_words(cluster), ")\n");
  }
  if (e.time.estimated) {
    const TimeBreakdown& t = e.time;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "step %.4g s (compute %.4g incl. optimizer %.4g, bubble %.4g, tp %.4g, pp %.4g, "
                  "dp %.4g exposed of %.4g, I/O %.4g exposed, clip %.4g, overhead %.4g)\n%.4g "
                  "FLOPs/step, %.4g tokens/s, %.4g TFLOP/s per device, MFU %.1f%%\n",
                  t.step_s, t.compute_s, t.optimizer_s, t.bubble_s, t.tp_comm_s, t.pp_comm_s,
                  t.dp_comm_s, t.dp_comm_total_s, t.io_exposed_s, t.clip_s, t.overhead_s,
                  t.flops_per_step, t.tokens_per_s, t.tflops_per_device, 100 * t.mfu);
    out += buf;
  }
  return out;
}

}  // namespace kiri::plan
