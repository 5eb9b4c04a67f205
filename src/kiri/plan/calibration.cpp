#include "kiri/plan/calibration.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

// Header-only: the plan library stays on base alone.
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/plan/time.h"

namespace kiri::plan {

namespace {
using nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

Link fit_link(const std::vector<LinkSample>& samples, int n) {
  KIRI_CHECK_KIND(kConfig, n >= 1, "fit_link: n must be >= 1, got ", n);
  KIRI_CHECK_KIND(kConfig, samples.size() >= 2, "fit_link needs two message sizes, got ",
                  samples.size());
  // Least squares of t = a + c·bytes weighted by 1/t² (relative errors: the small messages
  // decide the intercept, the large ones the slope).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const LinkSample& s : samples) {
    KIRI_CHECK_KIND(kConfig, s.seconds > 0 && s.bytes > 0,
                    "fit_link: times and sizes must be positive");
    const double w = 1.0 / (s.seconds * s.seconds);
    sw += w;
    sx += w * s.bytes;
    sy += w * s.seconds;
    sxx += w * s.bytes * s.bytes;
    sxy += w * s.bytes * s.seconds;
  }
  const double det = sw * sxx - sx * sx;
  KIRI_CHECK_KIND(kConfig, det > 0, "fit_link needs two distinct message sizes");
  double slope = (sw * sxy - sx * sy) / det;
  double intercept = (sy - slope * sx) / sw;
  if (slope <= 0) {  // noise swamped the size dependence: take the largest message's rate
    const LinkSample& big = *std::max_element(
        samples.begin(), samples.end(),
        [](const LinkSample& a, const LinkSample& b) { return a.bytes < b.bytes; });
    slope = big.seconds / big.bytes;
    intercept = 0;
  }
  intercept = std::max(0.0, intercept);
  if (n == 1) return {1.0 / slope, intercept};
  const double steps = 2.0 * (n - 1);
  return {steps / n / slope, intercept / steps};
}

Calibration::StepModel calibration_step_model() {
  return {3, 256, 4, 8192, 8, 64};
}

namespace {
// The calibrated this-machine cluster with the given non-GEMM costs, and the step model
// as a planner model and one-rank layout.
ModelSpec step_spec(const Calibration::StepModel& m) {
  return model_from_dims(m.n_layer, m.n_embd, m.n_head, m.vocab, std::max<int64_t>(1024, m.seq));
}
Layout step_layout(const Calibration::StepModel& m) {
  Layout l;
  l.dtype = Precision::kFp32;
  l.micro_batch = m.batch;
  l.global_batch = m.batch;
  l.seq_len = m.seq;
  return l;
}
}  // namespace

double activation_seconds_from_step(const Calibration& c, const Calibration::StepModel& m,
                                    double step_s) {
  KIRI_CHECK_KIND(kConfig, step_s > 0 && c.gemm_flops_1_thread > 0,
                  "activation_seconds_from_step: the step (", step_s, " s) and the GEMM rate (",
                  c.gemm_flops_1_thread, " FLOP/s) must be positive");
  Calibration without = c;
  without.activation_s = 0;
  const ModelSpec model = step_spec(m);
  const double rest = estimate_time(model, step_layout(m), calibrated_cluster(without, "")).step_s;
  const double elements = static_cast<double>(m.batch * m.seq * m.n_layer * m.n_embd);
  return std::max(0.0, step_s - rest) / elements;
}

std::string default_calibration_path() {
  if (const char* env = std::getenv("KIRI_CALIBRATION"); env && *env) return env;
  return "runs/calibration/this-machine.json";
}

namespace {
json peak_json(const Calibration::Peak& p) {
  return {{"flops_per_core", p.flops}, {"instruction", p.instruction}};
}
Calibration::Peak peak_of(const json& j) {
  return {j.at("flops_per_core").get<double>(), j.value("instruction", "")};
}
}  // namespace

std::string calibration_json(const Calibration& c) {
  json samples = json::array();
  for (const LinkSample& s : c.samples)
    samples.push_back({{"bytes", s.bytes}, {"seconds", s.seconds}});
  json j = {{"kind", "kiri-calibration"},
            {"version", 6},
            {"host", c.host},
            {"date", c.date},
            {"cores", c.cores},
            {"memory_bytes", c.memory_bytes},
            {"gemm",
             {{"dtype", "fp32"},
              {"n", c.gemm_n},
              {"threads", c.threads},
              {"flops_1_thread", c.gemm_flops_1_thread},
              {"flops_all_threads", c.gemm_flops_all_threads}}},
            {"gemm_bf16",
             {{"n", c.gemm_n},
              {"threads", 1},
              {"path", c.gemm_bf16_path},
              {"flops_1_thread", c.gemm_bf16_flops_1_thread},
              {"via_f32_flops_1_thread", c.gemm_bf16_via_f32_flops_1_thread},
              {"onednn_flops_1_thread", c.gemm_bf16_onednn_flops_1_thread},
              {"packed_flops_1_thread", c.gemm_bf16_packed_flops_1_thread}}},
            {"peak",
             {{"threads", 1},
              {"fp32", peak_json(c.peak_fp32)},
              {"bf16", peak_json(c.peak_bf16)},
              {"fp16", peak_json(c.peak_fp16)}}},
            {"link",
             {{"method", c.link_method},
              {"ranks", c.link_ranks},
              {"bandwidth", c.bandwidth},
              {"latency", c.latency > 0 ? json(c.latency) : json(nullptr)},
              {"hosts", c.link_hosts},
              {"transfer_compute_share", c.transfer_compute_share},
              {"samples", samples}}},
            {"non_gemm",
             {{"logit_s", c.logit_s},
              {"logit_split_s", c.logit_split_s},
              {"optimizer_s", c.optimizer_s},
              {"optimizer_zeroing_s", c.optimizer_zeroing_s},
              {"gradient_s", c.gradient_s},
              {"zeroing_s", c.zeroing_s},
              {"activation_s", c.activation_s},
              {"step",
               {{"n_layer", c.step_model.n_layer},
                {"n_embd", c.step_model.n_embd},
                {"n_head", c.step_model.n_head},
                {"vocab", c.step_model.vocab},
                {"batch", c.step_model.batch},
                {"seq", c.step_model.seq},
                {"seconds", c.step_s}}}}}};
  if (c.disk.read_bytes_per_s > 0)
    j["disk"] = {{"path", c.disk.path},
                 {"engine", c.disk.engine},
                 {"block_size", c.disk.block_size},
                 {"queue_depth", c.disk.queue_depth},
                 {"bytes", c.disk.bytes},
                 {"direct", c.disk.direct},
                 {"read_bytes_per_s", c.disk.read_bytes_per_s},
                 {"write_bytes_per_s", c.disk.write_bytes_per_s}};
  return j.dump(2) + "\n";
}

void save_calibration(const Calibration& c, const std::string& path) {
  if (const fs::path dir = fs::path(path).parent_path(); !dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    KIRI_CHECK_KIND(kIo, !ec, "cannot create ", dir.string(), ": ", ec.message());
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    KIRI_CHECK_KIND(kIo, out.good(), "cannot write ", tmp);
    out << calibration_json(c);
    KIRI_CHECK_KIND(kIo, out.good(), "cannot write ", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

namespace {

// Versions 2-5's non-GEMM costs in version 6's terms, split by the bytes each moves (specs.h):
// their logit_s timed softmax_xent_forward then softmax_xent_backward over all rows, the
// vocab-parallel pair's passes (the one-pass loss moves 8 of its 16 bytes); their gradient_s
// a zeroing pass and the norm (4 + 4 bytes); AdamW's zeroing adds 4 to its 28.
void derive_non_gemm(Calibration& c) {
  c.logit_split_s = c.logit_s;
  c.logit_s *= kLogitBytes / kSplitLogitBytes;
  c.optimizer_zeroing_s = c.optimizer_s * kOptimizerZeroingBytes / kOptimizerBytes;
  c.zeroing_s = c.gradient_s * kZeroingBytes / (kGradientBytes + kZeroingBytes);
  c.gradient_s *= kGradientBytes / (kGradientBytes + kZeroingBytes);
  c.non_gemm_derived = true;
}

// The non-GEMM costs (version 2; version 6's split of the logits, the optimizer's zeroing and
// the gradients'): per-element seconds and the step they were measured on.
void read_non_gemm(const json& n, Calibration& c) {
  c.logit_s = n.at("logit_s").get<double>();
  c.optimizer_s = n.at("optimizer_s").get<double>();
  c.gradient_s = n.at("gradient_s").get<double>();
  c.activation_s = n.at("activation_s").get<double>();
  if (n.contains("zeroing_s")) {  // version 6
    c.logit_split_s = n.at("logit_split_s").get<double>();
    c.optimizer_zeroing_s = n.at("optimizer_zeroing_s").get<double>();
    c.zeroing_s = n.at("zeroing_s").get<double>();
  } else {
    derive_non_gemm(c);
  }
  const json& st = n.at("step");
  c.step_model = {st.at("n_layer").get<int64_t>(), st.at("n_embd").get<int64_t>(),
                  st.at("n_head").get<int64_t>(),  st.at("vocab").get<int64_t>(),
                  st.at("batch").get<int64_t>(),   st.at("seq").get<int64_t>()};
  c.step_s = st.at("seconds").get<double>();
}

// The disk measurement (version 4).
void read_disk(const json& d, Calibration::Disk& disk) {
  disk.path = d.at("path").get<std::string>();
  disk.engine = d.at("engine").get<std::string>();
  disk.block_size = d.at("block_size").get<int64_t>();
  disk.queue_depth = d.at("queue_depth").get<int>();
  disk.bytes = d.at("bytes").get<int64_t>();
  disk.direct = d.at("direct").get<bool>();
  disk.read_bytes_per_s = d.at("read_bytes_per_s").get<double>();
  disk.write_bytes_per_s = d.at("write_bytes_per_s").get<double>();
}

}  // namespace

namespace {

// The "link" object: the fitted link, its samples and, measured across hosts, the share
// of compute a transfer in flight took (absent from files made on one host or before).
void read_link(const json& l, const std::string& path, Calibration& c) {
  c.link_method = l.at("method").get<std::string>();
  c.link_ranks = l.at("ranks").get<int>();
  c.bandwidth = l.at("bandwidth").get<double>();
  c.latency = l.at("latency").is_null() ? 0.0 : l.at("latency").get<double>();
  c.link_hosts = l.value("hosts", 1);
  c.transfer_compute_share = l.value("transfer_compute_share", 0.0);
  KIRI_CHECK_KIND(kConfig, c.transfer_compute_share >= 0 && c.transfer_compute_share <= 1,
                  "the calibration file ", path, " has link.transfer_compute_share ",
                  c.transfer_compute_share, ", outside [0, 1]: rerun kiri plan --calibrate");
  for (const json& s : l.at("samples"))
    c.samples.push_back({s.at("bytes").get<double>(), s.at("seconds").get<double>()});
}

}  // namespace

std::optional<Calibration> load_calibration(const std::string& path) {
  if (path == "none" || !fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  KIRI_CHECK_KIND(kConfig, in.good(), "cannot read the calibration file ", path);
  Calibration c;
  try {
    const json j = json::parse(in);
    KIRI_CHECK_KIND(kConfig, j.value("kind", "") == "kiri-calibration", "the calibration file ",
                    path, " is not a kiri calibration (kind != kiri-calibration)");
    c.host = j.value("host", "");
    c.date = j.value("date", "");
    c.cores = j.at("cores").get<int>();
    c.memory_bytes = j.at("memory_bytes").get<double>();
    const json& g = j.at("gemm");
    c.gemm_n = g.at("n").get<int64_t>();
    c.threads = g.at("threads").get<int>();
    c.gemm_flops_1_thread = g.at("flops_1_thread").get<double>();
    c.gemm_flops_all_threads = g.at("flops_all_threads").get<double>();
    if (j.contains("gemm_bf16")) {  // version 5
      const json& h = j.at("gemm_bf16");
      c.gemm_bf16_flops_1_thread = h.at("flops_1_thread").get<double>();
      c.gemm_bf16_path = h.value("path", "");
      c.gemm_bf16_via_f32_flops_1_thread = h.value("via_f32_flops_1_thread", 0.0);
      c.gemm_bf16_onednn_flops_1_thread = h.value("onednn_flops_1_thread", 0.0);
      c.gemm_bf16_packed_flops_1_thread = h.value("packed_flops_1_thread", 0.0);
    }
    read_link(j.at("link"), path, c);
    if (j.contains("non_gemm")) read_non_gemm(j.at("non_gemm"), c);  // version 2
    if (j.contains("peak")) {                                        // version 3
      const json& p = j.at("peak");
      c.peak_fp32 = peak_of(p.at("fp32"));
      c.peak_bf16 = peak_of(p.at("bf16"));
      c.peak_fp16 = peak_of(p.at("fp16"));
    }
    if (j.contains("disk")) {  // version 4
      read_disk(j.at("disk"), c.disk);
      KIRI_CHECK_KIND(kConfig, c.disk.read_bytes_per_s > 0 && c.disk.write_bytes_per_s > 0,
                      "the calibration file ", path, " has a non-positive disk bandwidth (read ",
                      c.disk.read_bytes_per_s, ", write ", c.disk.write_bytes_per_s,
                      " bytes/s): rerun kiri plan --calibrate");
    }
  } catch (const json::exception& e) {
    KIRI_RAISE(kConfig, "the calibration file ", path, " is not valid: ", e.what(),
               " (rerun kiri plan --calibrate, or KIRI_CALIBRATION=none to ignore it)");
  }
  KIRI_CHECK_KIND(kConfig,
                  c.cores >= 1 && c.memory_bytes > 0 && c.gemm_flops_1_thread > 0 &&
                      c.bandwidth > 0 && c.latency >= 0,
                  "the calibration file ", path,
                  " has non-positive numbers (cores, memory_bytes, gemm.flops_1_thread, "
                  "link.bandwidth must be > 0)");
  KIRI_CHECK_KIND(kConfig,
                  c.logit_s >= 0 && c.optimizer_s >= 0 && c.gradient_s >= 0 &&
                      c.activation_s >= 0 && c.logit_split_s >= 0 && c.optimizer_zeroing_s >= 0 &&
                      c.zeroing_s >= 0,
                  "the calibration file ", path, " has negative non_gemm costs (logit_s ",
                  c.logit_s, ", logit_split_s ", c.logit_split_s, ", optimizer_s ", c.optimizer_s,
                  ", optimizer_zeroing_s ", c.optimizer_zeroing_s, ", gradient_s ", c.gradient_s,
                  ", zeroing_s ", c.zeroing_s, ", activation_s ", c.activation_s, ")");
  // The derived costs moved the logits' and gradients' share of the step: the activations
  // are what the step leaves of them now.
  if (c.non_gemm_derived && c.step_s > 0 && c.gemm_flops_1_thread > 0 && c.logit_s > 0)
    c.activation_s = activation_seconds_from_step(c, c.step_model, c.step_s);
  KIRI_CHECK_KIND(kConfig,
                  c.peak_fp32.flops >= 0 && c.peak_bf16.flops >= 0 && c.peak_fp16.flops >= 0,
                  "the calibration file ", path, " has negative peaks (fp32 ", c.peak_fp32.flops,
                  ", bf16 ", c.peak_bf16.flops, ", fp16 ", c.peak_fp16.flops, ")");
  KIRI_CHECK_KIND(kConfig, c.gemm_bf16_flops_1_thread >= 0, "the calibration file ", path,
                  " has a negative gemm_bf16.flops_1_thread (", c.gemm_bf16_flops_1_thread, ")");
  return c;
}

namespace {

// The share of compute a transfer in flight took (measured across hosts) and the disk, as
// measured or else assumed, said in `s.measured` / `s.assumed`.
void take_transfer_share_and_disk(const Calibration& c, ClusterSpec& s) {
  if (c.transfer_compute_share > 0) {
    s.transfer_compute_share = c.transfer_compute_share;
    s.measured.push_back(str("a transfer in flight takes ", c.transfer_compute_share,
                             " of a rank's compute (16 MiB all_reduce across ", c.link_hosts,
                             " hosts)"));
  }
  if (c.disk.read_bytes_per_s > 0) {
    s.disk = {c.disk.read_bytes_per_s, c.disk.write_bytes_per_s, true};
    s.measured.push_back(str("disk of ", c.disk.path, " (", c.disk.direct ? "O_DIRECT" : "buffered",
                             ", ", c.disk.engine, ", block ", c.disk.block_size, " B, queue depth ",
                             c.disk.queue_depth, ": read ", c.disk.read_bytes_per_s / 1e9,
                             " GB/s, write ", c.disk.write_bytes_per_s / 1e9, " GB/s)"));
  } else {
    s.assumed.push_back(str("offload disk ", kAssumedDisk.read_bandwidth / 1e9, " GB/s read, ",
                            kAssumedDisk.write_bandwidth / 1e9,
                            " GB/s write (not in the file: rerun kiri plan --calibrate)"));
  }
}

}  // namespace

ClusterSpec calibrated_cluster(const Calibration& c, const std::string& source) {
  ClusterSpec s;
  s.name = "this-machine";
  s.device = str("x86-64 core (1 thread, ", c.host.empty() ? "this machine" : c.host, ")");
  s.devices_per_node = std::max(1, c.cores);
  s.memory_bytes = c.memory_bytes / s.devices_per_node;
  const bool peak = c.peak_fp32.flops > 0;
  if (peak) {
    s.flops_fp32 = c.peak_fp32.flops;
    s.flops_16bit = c.peak_bf16.flops > 0 ? c.peak_bf16.flops : c.peak_fp32.flops;
    s.flops_fp16 = c.peak_fp16.flops;
    // A GEMM above the FMA peak is noise in one of them: MFU stays <= 1.
    s.efficiency = std::min(1.0, c.gemm_flops_1_thread / c.peak_fp32.flops);
    s.sustained_16bit =
        c.gemm_bf16_flops_1_thread > 0 ? c.gemm_bf16_flops_1_thread : c.gemm_flops_1_thread / 2;
  } else {
    s.flops_fp32 = c.gemm_flops_1_thread;
    s.flops_16bit = c.gemm_flops_1_thread / 2;
    s.efficiency = 1.0;
  }
  s.intra = {c.bandwidth, c.latency > 0 ? c.latency : 2e-6};
  s.inter = s.intra;
  const ClusterSpec assumed = this_machine_assumed();
  s.memory_bandwidth = assumed.memory_bandwidth;
  s.comm_overlaps_compute = assumed.comm_overlaps_compute;
  const bool non_gemm = c.logit_s > 0 && c.optimizer_s > 0 && c.gradient_s > 0;
  s.non_gemm =
      non_gemm ? NonGemmCosts{c.logit_s,       c.activation_s,        c.optimizer_s, c.gradient_s,
                              c.logit_split_s, c.optimizer_zeroing_s, c.zeroing_s}
               : assumed.non_gemm;
  s.source = source;
  s.measured = {"cores", "memory", "fp32 GEMM (1 thread)",
                c.link_method == "all_reduce"
                    ? str("intra bandwidth and latency (all_reduce over ", c.link_ranks, " ranks)")
                    : std::string("intra bandwidth (shared-memory copy)")};
  if (peak)
    s.measured.push_back(str("FMA peak (1 thread: fp32 ", c.peak_fp32.flops / 1e9, ", bf16 ",
                             s.flops_16bit / 1e9, ", fp16 ",
                             (c.peak_fp16.flops > 0 ? c.peak_fp16.flops : s.flops_16bit) / 1e9,
                             " GFLOP/s; efficiency = GEMM / fp32 peak)"));
  if (non_gemm)
    s.measured.push_back("non-GEMM work (logits, optimizer, gradients; activations from a step)");
  if (c.gemm_bf16_flops_1_thread > 0)
    s.measured.push_back(str("bf16 GEMM (1 thread, ", c.gemm_bf16_path, "; fp16 taken at it)"));
  if (peak && c.gemm_bf16_flops_1_thread > 0)
    s.assumed = {};
  else if (peak)
    s.assumed = {"16-bit GEMMs at fp32 GEMM / 2 (rerun kiri plan --calibrate to measure)"};
  else
    s.assumed = {
        "peak = the measured GEMM rate, efficiency 1 (no FMA peak in the file: rerun "
        "kiri plan --calibrate)",
        "bf16 = fp32 / 2 (docs/performance.md)"};
  s.assumed.insert(s.assumed.end(), {"inter = intra (one node)",
                                     "collectives run on the computing cores (not overlapped)"});
  if (!non_gemm) s.assumed.push_back("non-GEMM work at 10 GB/s (rerun kiri plan --calibrate)");
  if (non_gemm && c.non_gemm_derived)
    s.assumed.push_back(
        "the one-pass loss, AdamW's zeroing and the gradient norm and zeroing apart derived by "
        "their bytes from the file's two-kernel loss, AdamW and zeroing + norm, activations "
        "refitted to its step (a version 2-5 file: rerun kiri plan --calibrate)");
  if (c.latency <= 0) s.assumed.push_back("intra latency 2 us");
  take_transfer_share_and_disk(c, s);
  return s;
}

std::string describe_sources(const ClusterSpec& cluster) {
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  std::string out;
  if (!cluster.measured.empty())
    out += str("measured (", cluster.source, "): ", join(cluster.measured));
  if (!cluster.assumed.empty())
    out += str(out.empty() ? "" : "; ", "assumed: ", join(cluster.assumed));
  return out;
}

}  // namespace kiri::plan
