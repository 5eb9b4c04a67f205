// kiri plan: the memory and time model of a layout, or the layouts of a cluster ranked
// with a recommendation (docs/planner.md).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/units.h"
#include "kiri/bench/calibrate.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/plan_config.h"
#include "kiri/cli/plan_json.h"
#include "kiri/cli/verbs.h"
#include "kiri/kernels/bandwidth.h"
#include "kiri/kernels/ops.h"
#include "kiri/launch/world.h"
#include "kiri/offload/disk_bench.h"
#include "kiri/parallel/dims.h"
#include "kiri/plan/calibration.h"
#include "kiri/plan/planner.h"

namespace kiri::cli {

namespace {

using nlohmann::json;

// "a,b" -> {"a", "b"}; "" -> {}.
std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; !s.empty() && at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

int positive_int(const Args& a, const std::string& opt, int64_t fallback) {
  const int64_t v = a.get_int(opt, fallback);
  KIRI_CHECK_KIND(kConfig, v >= 1 && v <= (int64_t{1} << 30), "--", opt,
                  " must be a positive integer, got ", v);
  return static_cast<int>(v);
}

// The cluster options that replace a preset's numbers (docs/planner.md, "Options"); each
// one given is listed in the cluster's `assumed` as given.
void override_cluster(const Args& a, plan::ClusterSpec& c) {
  if (auto m = a.get("memory")) {
    int64_t bytes = 0;
    try {
      bytes = parse_bytes(*m);
    } catch (const Error& e) {
      KIRI_RAISE(kConfig, "--memory: ", e.message());
    }
    KIRI_CHECK_KIND(kConfig, bytes > 0, "--memory must be positive, got ", *m);
    c.memory_bytes = static_cast<double>(bytes);
    c.assumed.push_back(str("--memory ", *m, " (given)"));
  }
  KIRI_CHECK_KIND(kConfig, !(a.get("gpus-per-node") && a.get("ranks-per-host")),
                  "--ranks-per-host is --gpus-per-node: give one of them");
  KIRI_CHECK_KIND(kConfig, !(a.get("nodes") && a.get("hosts")),
                  "--hosts is --nodes: give one of them");
  for (const char* opt : {"gpus-per-node", "ranks-per-host"}) {
    if (!a.get(opt)) continue;
    c.devices_per_node = positive_int(a, opt, 1);
    c.assumed.push_back(str("--", opt, " ", c.devices_per_node, " (given)"));
  }
  if (a.get("nics-per-node")) {
    c.nics_per_node = positive_int(a, "nics-per-node", 1);
    c.assumed.push_back(str("--nics-per-node ", c.nics_per_node, " (given)"));
  }
  if (a.get("shared-cores")) {
    c.shared_cores = positive_int(a, "shared-cores", 1);
    c.assumed.push_back(str("--shared-cores ", c.shared_cores, " (given)"));
  }
  // Link rates and times also as tc writes them (1gbit, 200mbit; 5ms, 20us).
  auto link = [&](const char* opt, double& field, bool rate) {
    if (!a.get(opt)) return;
    field = rate ? plan::parse_link_rate(*a.get(opt), opt) : plan::parse_seconds(*a.get(opt), opt);
    c.assumed.push_back(str("--", opt, " ", *a.get(opt), " (given)"));
  };
  link("intra-bandwidth", c.intra.bandwidth, true);
  link("intra-latency", c.intra.latency, false);
  link("inter-bandwidth", c.inter.bandwidth, true);
  link("inter-latency", c.inter.latency, false);
  link("step-overhead", c.step_overhead_s, false);
  auto number = [&](const char* opt, double& field, double max) {
    if (!a.get(opt)) return;
    const double v = a.get_double(opt, 0);
    KIRI_CHECK_KIND(kConfig, v > 0 && v <= max, "--", opt, " must be in (0, ", max, "], got ",
                    *a.get(opt));
    field = v;
    c.assumed.push_back(str("--", opt, " ", *a.get(opt), " (given)"));
  };
  constexpr double kHuge = 1e30;
  number("flops", c.flops_16bit, kHuge);
  number("flops-fp32", c.flops_fp32, kHuge);
  number("efficiency", c.efficiency, 1.0);
  number("disk-read-bandwidth", c.disk.read_bandwidth, kHuge);
  number("disk-write-bandwidth", c.disk.write_bandwidth, kHuge);
  if (a.get("disk-read-bandwidth") || a.get("disk-write-bandwidth")) c.disk.measured = false;
  if (a.get("transfer-compute-share")) {
    const double v = a.get_double("transfer-compute-share", 0);
    KIRI_CHECK_KIND(kConfig, v >= 0 && v <= 1, "--transfer-compute-share must be in [0, 1], got ",
                    *a.get("transfer-compute-share"));
    c.transfer_compute_share = v;
    c.assumed.push_back(str("--transfer-compute-share ", v, " (given)"));
  }
  if (a.get("memory-bandwidth")) {
    number("memory-bandwidth", c.memory_bandwidth, kHuge);
    c.non_gemm = plan::non_gemm_from_bandwidth(c.memory_bandwidth);
  }
}

// A preset, explicit dimensions (GPT-2's, or LLaMA's with --arch llama), or a parameter count.
plan::ModelSpec model_of(const Args& a) {
  const bool dims = a.get("layers") || a.get("hidden") || a.get("heads") || a.get("vocab");
  const int given = (a.get("model") ? 1 : 0) + (dims ? 1 : 0) + (a.get("params") ? 1 : 0);
  KIRI_CHECK_KIND(kConfig, given <= 1,
                  "give one model: --model NAME, --layers/--hidden/--heads/--vocab, or --params");
  const std::string arch = a.get("arch").value_or("gpt2");
  KIRI_CHECK_KIND(kConfig, arch == "gpt2" || arch == "llama", "--arch must be gpt2 or llama, got '",
                  arch, "'");
  for (const char* o : {"ffn", "arch"})
    KIRI_CHECK_KIND(kConfig, dims || !a.get(o), "--", o,
                    " goes with --layers/--hidden/--heads/--vocab");
  const bool llama_options = a.get("kv-heads") || a.flag("tie-word-embeddings");
  KIRI_CHECK_KIND(kConfig, (dims && arch == "llama") || !llama_options,
                  "--kv-heads and --tie-word-embeddings go with --arch llama and "
                  "--layers/--hidden/--heads/--vocab");
  if (a.get("params")) return plan::model_from_params(a.get_double("params", 0));
  if (!dims) return plan::model_preset(a.get("model").value_or("gpt2-124M"));
  for (const char* o : {"layers", "hidden", "heads", "vocab"})
    KIRI_CHECK_KIND(kConfig, a.get(o).has_value(), "explicit dimensions need --", o,
                    " (--layers --hidden --heads --vocab)");
  const int64_t context = std::max<int64_t>(1024, a.get_int("seq-len", 1024));
  if (arch == "llama") {
    const int64_t hidden = a.get_int("hidden", 0), heads = a.get_int("heads", 0);
    return plan::llama_from_dims(a.get_int("layers", 0), hidden, heads,
                                 a.get_int("kv-heads", heads),
                                 a.get_int("ffn", plan::llama_default_ffn(hidden)),
                                 a.get_int("vocab", 0), a.flag("tie-word-embeddings"), context);
  }
  plan::ModelSpec m = plan::model_from_dims(a.get_int("layers", 0), a.get_int("hidden", 0),
                                            a.get_int("heads", 0), a.get_int("vocab", 0), context);
  m.ffn = a.get_int("ffn", 0);
  KIRI_CHECK_KIND(kConfig, m.ffn >= 0, "--ffn must not be negative, got ", m.ffn);
  return m;
}

int64_t bytes_option(const Args& a, const std::string& opt, const std::string& fallback) {
  const std::string v = a.get(opt).value_or(fallback);
  int64_t b = 0;
  try {
    b = parse_bytes(v);
  } catch (const Error& e) {
    KIRI_RAISE(kConfig, "--", opt, ": ", e.message());
  }
  KIRI_CHECK_KIND(kConfig, b > 0, "--", opt, " must be positive, got ", v);
  return b;
}

// The offload settings of the layout (train's offload.* keys; docs/planner.md, "Offload").
plan::OffloadSpec offload_of(const Args& a) {
  plan::OffloadSpec o;
  o.optimizer =
      plan::parse_offload(a.get("offload-optimizer").value_or("none"), "--offload-optimizer");
  o.parameters =
      plan::parse_offload(a.get("offload-parameters").value_or("none"), "--offload-parameters");
  // auto: with the parameters, as offload.gradients' auto does in kiri train.
  const std::string grads = a.get("offload-gradients").value_or("auto");
  o.gradients = grads == "auto" ? o.parameters : plan::parse_offload(grads, "--offload-gradients");
  o.buffer_count = positive_int(a, "offload-buffer-count", o.buffer_count);
  const double mb = a.get_double("offload-buffer-mb", 64);
  KIRI_CHECK_KIND(kConfig, mb > 0 && mb <= 1 << 20,
                  "--offload-buffer-mb must be in (0, 1048576], got ", mb);
  o.buffer_bytes = static_cast<int64_t>(mb * 1024 * 1024);
  o.block_size = bytes_option(a, "offload-block-size", "1MiB");
  o.queue_depth = positive_int(a, "offload-queue-depth", o.queue_depth);
  return o;
}

std::string si(double x, const char* unit) {
  char buf[64];
  const char* prefix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (x >= 1000 && i < 4) x /= 1000, ++i;
  std::snprintf(buf, sizeof buf, "%.3g %s%s", x, prefix[i], unit);
  return buf;
}

// What --calibrate measures the disk with (the options checked before any measuring).
offload::IoOptions disk_io(const Args& a, plan::Calibration& c) {
  const plan::OffloadSpec o = offload_of(a);
  offload::IoOptions io;
  io.block_size = o.block_size;
  io.queue_depth = o.queue_depth;
  const std::string engine = a.get("offload-engine").value_or("auto");
  if (engine == "io_uring")
    io.engine = kiri::IoEngine::kIoUring;
  else if (engine == "threads")
    io.engine = kiri::IoEngine::kThreads;
  else
    KIRI_CHECK_KIND(kConfig, engine == "auto",
                    "--offload-engine must be auto, io_uring or threads, got '", engine, "'");
  c.disk.path = a.get("offload-path").value_or("runs/calibration");
  c.disk.bytes = bytes_option(a, "disk-bytes", "256MiB");
  c.disk.block_size = io.block_size;
  c.disk.queue_depth = io.queue_depth;
  return io;
}

// The disk under --offload-path as the offload engine uses it (O_DIRECT, the configured block
// size and queue depth): one process, since the ranks of a node share the disk.
void measure_disk(const offload::IoOptions& io, plan::Calibration& c) {
  std::error_code ec;  // the default offload.path's folder may not exist yet
  std::filesystem::create_directories(c.disk.path, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the folder to measure the disk under, ", c.disk.path,
                  ": ", ec.message());
  const offload::DiskBandwidth d = offload::measure_disk_bandwidth(c.disk.path, c.disk.bytes, io);
  c.disk.engine = d.engine;
  c.disk.direct = d.direct;
  c.disk.read_bytes_per_s = d.read_bytes_per_s;
  c.disk.write_bytes_per_s = d.write_bytes_per_s;
}

// Every measurement of kiri plan --calibrate, on every rank of w at once (the disk on rank 0).
// The bf16 GEMM on every path, all ranks at once, and the one kiri trains with: the fastest
// under KIRI_GEMM_LOWP=auto (kernels/ops.h's kAuto chooses by measurement), else the forced one.
void measure_gemm_bf16_paths(comm::Communicator& w, plan::Calibration& c) {
  using kernels::LowpGemmImpl;
  const LowpGemmImpl setting = kernels::gemm_lowp_impl();
  const std::pair<LowpGemmImpl, double*> paths[] = {
      {LowpGemmImpl::kViaF32, &c.gemm_bf16_via_f32_flops_1_thread},
      {LowpGemmImpl::kOneDnnMatmul, &c.gemm_bf16_onednn_flops_1_thread},
      {LowpGemmImpl::kPacked, &c.gemm_bf16_packed_flops_1_thread}};
  for (const auto& [impl, flops] : paths) {
    w.barrier();
    if (!kernels::gemm_lowp_available(impl, DType::kBF16)) continue;
    kernels::set_gemm_lowp_impl(impl);
    *flops = bench::measure_gemm_bf16_flops(c.gemm_n, 1);
  }
  w.barrier();
  kernels::set_gemm_lowp_impl(setting);
  const auto* chosen = &paths[0];
  for (const auto& p : paths)
    if (setting == LowpGemmImpl::kAuto ? *p.second > *chosen->second
                                       : p.first == kernels::gemm_lowp_path(DType::kBF16))
      chosen = &p;
  c.gemm_bf16_flops_1_thread = *chosen->second;
  c.gemm_bf16_path = chosen->first == LowpGemmImpl::kOneDnnMatmul
                         ? "onednn (" + kernels::gemm_lowp_onednn_kernel(DType::kBF16) + ")"
                         : std::string(kernels::gemm_lowp_impl_name(chosen->first));
}

// Elements per rank of the bandwidth-bound kernels' arrays (AdamW's four: 16 bytes each):
// together past the last-level cache, which the ranks timing at once share. A fixed 8 Mi
// fitted a VM's 260 MiB L3 and timed AdamW at 1.10 ns an element (1.19 over 32.5 Mi, one
// process), where a gpt2-124M step's AdamW took 1.59.
int64_t stream_elements(int ranks) {
  const int64_t bytes = kernels::default_bandwidth_array_bytes();  // 2 x the LLC, >= 256 MiB
  return std::max<int64_t>(int64_t{8} << 20, bytes / (16 * std::max(1, ranks)));
}

plan::Calibration measure_calibration(const Args& a, comm::Communicator& w) {
  const bool rank0 = w.rank() == 0;
  plan::Calibration c;
  const offload::IoOptions io = disk_io(a, c);
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) c.host = host;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  c.date = date;
  c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.memory_bytes =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  c.gemm_n = 1024;
  // One thread on every rank at once (a rank per core, as kiri launch runs them), then all of
  // the machine's threads in rank 0 alone (the others wait in a sleeping barrier).
  w.barrier();
  c.gemm_flops_1_thread = bench::measure_gemm_flops(c.gemm_n, 1);
  w.barrier();
  measure_gemm_bf16_paths(w, c);
  w.barrier();
  c.threads = c.cores;
  if (rank0) c.gemm_flops_all_threads = bench::measure_gemm_flops(c.gemm_n, c.threads);
  w.barrier();
  // The FMA peaks, on every rank at once as the GEMM above: MFU's denominators.
  const bench::CorePeaks peaks = bench::measure_core_peaks();
  c.peak_fp32 = {peaks.fp32.flops, peaks.fp32.instruction};
  c.peak_bf16 = {peaks.bf16.flops, peaks.bf16.instruction};
  c.peak_fp16 = {peaks.fp16.flops, peaks.fp16.instruction};
  w.barrier();
  // kiri's non-GEMM kernels and a one-process step, on every rank at once (one per core).
  c.logit_s = bench::measure_logit_seconds(256, 50257);
  c.logit_split_s = bench::measure_split_logit_seconds(256, 50257);
  const int64_t n = stream_elements(w.size());
  c.optimizer_s = bench::measure_optimizer_seconds(n);
  c.optimizer_zeroing_s = bench::measure_optimizer_seconds(n, true);
  c.gradient_s = bench::measure_gradient_seconds(n);
  c.zeroing_s = bench::measure_zeroing_seconds(n);
  c.step_model = plan::calibration_step_model();
  bench::BenchSpec step;
  step.name = "calibration";
  step.model.n_layer = static_cast<int>(c.step_model.n_layer);
  step.model.n_embd = static_cast<int>(c.step_model.n_embd);
  step.model.n_head = static_cast<int>(c.step_model.n_head);
  step.model.vocab_size = static_cast<int>(c.step_model.vocab);
  step.model.block_size = 1024;
  step.batch = c.step_model.batch;
  step.seq = c.step_model.seq;
  w.barrier();
  c.step_s = bench::measure_step_seconds(step);
  c.activation_s = plan::activation_seconds_from_step(c, c.step_model, c.step_s);
  w.barrier();
  std::vector<bench::TimedSize> timed;
  if (w.size() > 1) {
    c.link_method = "all_reduce";
    c.link_ranks = w.size();
    timed = bench::measure_all_reduce(w, {4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20});
  } else {
    c.link_method = "memcpy";
    timed = bench::measure_memcpy({64 << 10, 1 << 20, 8 << 20, 64 << 20});
  }
  for (const auto& t : timed) c.samples.push_back({t.bytes, t.seconds});
  const plan::Link link = plan::fit_link(c.samples, c.link_ranks);
  c.bandwidth = link.bandwidth;
  c.latency = c.link_method == "all_reduce" ? std::max(link.latency, 1e-9) : 0.0;
  if (w.size() > 1) {
    // Across hosts a collective can hide behind compute, but the cores still carry it.
    c.link_hosts = parallel::gather_host_map(w).hosts;
    if (c.link_hosts > 1)
      c.transfer_compute_share = bench::measure_transfer_compute_share(w, 16 << 20);
  }
  if (rank0) measure_disk(io, c);
  w.barrier();
  return c;
}

// What kiri plan --calibrate measured, as it prints it after writing `out`.
void print_gemm_bf16(const plan::Calibration& c) {
  std::printf("  bf16 GEMM %lld^3 (%s): %s on 1 thread, %.2fx fp32's",
              static_cast<long long>(c.gemm_n), c.gemm_bf16_path.c_str(),
              si(c.gemm_bf16_flops_1_thread, "FLOP/s").c_str(),
              c.gemm_bf16_flops_1_thread / c.gemm_flops_1_thread);
  if (c.gemm_bf16_onednn_flops_1_thread > 0 || c.gemm_bf16_packed_flops_1_thread > 0)
    std::printf(" (via_f32 %s, onednn %s, packed %s)",
                si(c.gemm_bf16_via_f32_flops_1_thread, "FLOP/s").c_str(),
                si(c.gemm_bf16_onednn_flops_1_thread, "FLOP/s").c_str(),
                si(c.gemm_bf16_packed_flops_1_thread, "FLOP/s").c_str());
  std::printf("\n");
}

void print_calibration(const plan::Calibration& c, int ranks, const std::string& out) {
  std::printf("calibration of %s (%d hardware threads, %s of memory)\n", c.host.c_str(), c.cores,
              plan::gib(c.memory_bytes).c_str());
  std::printf("  fp32 GEMM %lld^3: %s on 1 thread%s, %s on %d threads\n",
              static_cast<long long>(c.gemm_n), si(c.gemm_flops_1_thread, "FLOP/s").c_str(),
              ranks > 1 ? str(" (per rank, ", ranks, " ranks at once)").c_str() : "",
              si(c.gemm_flops_all_threads, "FLOP/s").c_str(), c.threads);
  print_gemm_bf16(c);
  std::printf(
      "  FMA peak per core: fp32 %s (%s), bf16 %s (%s), fp16 %s (%s); the 1-thread GEMM "
      "is %.1f%% of the fp32 peak\n",
      si(c.peak_fp32.flops, "FLOP/s").c_str(), c.peak_fp32.instruction.c_str(),
      si(c.peak_bf16.flops, "FLOP/s").c_str(), c.peak_bf16.instruction.c_str(),
      si(c.peak_fp16.flops, "FLOP/s").c_str(), c.peak_fp16.instruction.c_str(),
      100 * c.gemm_flops_1_thread / c.peak_fp32.flops);
  std::printf(
      "  non-GEMM per element: logits %.3g ns (one pass; tp's pair %.3g ns), AdamW %.3g ns "
      "(zeroing the gradient %.3g ns), gradient norm %.3g ns, zeroing %.3g ns; "
      "a %lld x %lld step (V %lld, %lld x %lld tokens) %.1f ms -> activations %.3g ns per "
      "token x hidden x layer\n",
      c.logit_s * 1e9, c.logit_split_s * 1e9, c.optimizer_s * 1e9, c.optimizer_zeroing_s * 1e9,
      c.gradient_s * 1e9, c.zeroing_s * 1e9, static_cast<long long>(c.step_model.n_layer),
      static_cast<long long>(c.step_model.n_embd), static_cast<long long>(c.step_model.vocab),
      static_cast<long long>(c.step_model.batch), static_cast<long long>(c.step_model.seq),
      c.step_s * 1e3, c.activation_s * 1e9);
  std::printf("  %s:", c.link_method == "all_reduce"
                           ? str("all_reduce over ", c.link_ranks, " ranks").c_str()
                           : "memcpy (one process; kiri launch -n 2 -- plan --calibrate measures "
                             "all_reduce)");
  for (const auto& s : c.samples)
    std::printf(" %s %.1f us;", si(s.bytes, "B").c_str(), s.seconds * 1e6);
  std::printf("\n  fit: bandwidth %s, latency %s\n", si(c.bandwidth, "B/s").c_str(),
              c.latency > 0 ? str(c.latency * 1e6, " us").c_str() : "not measured (2 us assumed)");
  if (c.link_hosts > 1)
    std::printf(
        "  across %d hosts: a 16 MiB all_reduce in flight took %.0f%% of a rank's compute\n",
        c.link_hosts, 100 * c.transfer_compute_share);
  std::printf("  disk of %s (%s, %s, block %lld B, queue depth %d, %s): write %s, read %s\n",
              c.disk.path.c_str(), c.disk.direct ? "O_DIRECT" : "buffered: no O_DIRECT there",
              c.disk.engine.c_str(), static_cast<long long>(c.disk.block_size), c.disk.queue_depth,
              plan::gib(static_cast<double>(c.disk.bytes)).c_str(),
              si(c.disk.write_bytes_per_s, "B/s").c_str(),
              si(c.disk.read_bytes_per_s, "B/s").c_str());
  std::printf("wrote %s (the this-machine cluster preset reads %s)\n", out.c_str(),
              plan::default_calibration_path().c_str());
}

// kiri plan --calibrate [--out FILE]: measure, fit, store (docs/planner.md, "Calibration").
int calibrate(const Args& a) {
  launch::World world = launch::make_world();
  const plan::Calibration c = measure_calibration(a, *world.comm);
  if (world.comm->rank() != 0) return 0;
  const std::string out = a.get("out").value_or(plan::default_calibration_path());
  plan::save_calibration(c, out);
  print_calibration(c, world.comm->size(), out);
  return 0;
}

// --global-batch, else 512 sequences rounded up to a multiple of `unit` (b x dp).
int64_t global_batch_of(const Args& a, int64_t unit) {
  return a.get_int("global-batch", (512 + unit - 1) / unit * unit);
}

// Layout mode's output: one evaluation, as text or JSON.
int print_layout(const Args& a, const plan::ModelSpec& model, const plan::ClusterSpec& cluster,
                 const plan::Evaluation& e) {
  if (a.flag("json")) {
    json j = evaluation_json(e);
    j["model"] = model_json(model);
    j["cluster"] = cluster_json(cluster);
    j["world"] = e.layout.world();
    std::cout << j.dump(2) << "\n";
  } else {
    if (const std::string src = plan::describe_sources(cluster); !src.empty())
      std::cout << cluster.name << ": " << src << "\n";
    std::cout << plan::format_evaluation(model, cluster, e);
  }
  return 0;
}

// The options that are the planner's alone: the activation form and its attention, the
// gradient buffers' type, overlap.
void planner_options(const Args& a, plan::Layout& l) {
  l.form = plan::parse_form(a.get("activations").value_or("kiri"));
  l.overlap_dp = !a.flag("no-overlap");
  if (auto att = a.get("attention")) {
    l.paper_attention = plan::parse_attention(*att);
    KIRI_CHECK_KIND(kConfig, l.form == plan::ActivationForm::kPaper || *att == "flash",
                    "--attention ", *att,
                    " goes with --activations paper: kiri's own attention keeps only the "
                    "log-sum-exp (flash)");
  }
  if (auto g = a.get("grad-dtype")) {
    const plan::Precision p = plan::parse_precision(*g);
    KIRI_CHECK_KIND(kConfig, p == plan::Precision::kFp32 || p == l.dtype, "--grad-dtype ", *g,
                    " must be fp32 or the dtype (", plan::name(l.dtype), ")");
    l.fp32_grads = p == plan::Precision::kFp32;
  }
}

// kiri plan CONFIG / --set: the config's layout (plan_config.h), with the options that are
// the planner's alone (planner_options, --global-batch) on top.
int plan_config_layout(const Args& a, plan::ClusterSpec cluster) {
  const ConfigPlan p = plan_of_config(a, cluster, [&] { return model_of(a); });
  plan::Layout base = p.layout;
  planner_options(a, base);
  if (a.get("global-batch") || !p.batch_given)
    base.global_batch = global_batch_of(a, base.micro_batch * base.dp);
  cluster.nodes = (p.world + cluster.devices_per_node - 1) / cluster.devices_per_node;
  return print_layout(a, p.model, cluster, plan::evaluate(p.model, base, cluster));
}

// The one layout that kiri plan's flags describe, but for its degrees and global batch.
plan::Layout flags_layout(const Args& a, const plan::ModelSpec& model) {
  plan::Layout base;
  // --dtype or --bf16/--fp16 (plan_flag_value refuses two of them).
  base.dtype = plan::parse_precision(plan_flag_value(a, "train.dtype").value_or("bf16"));
  base.activation_checkpointing =
      plan::parse_recompute(a.get("activation-checkpointing").value_or("none"));
  base.modules = kiri::recompute_modules_of(base.activation_checkpointing,
                                            comma_list(a.get("recompute-modules").value_or("")),
                                            kiri::LayoutWords::kPlan);
  base.schedule = plan::parse_schedule(a.get("schedule").value_or("1f1b"));
  planner_options(a, base);
  base.sequence_parallel = a.flag("sequence-parallel");
  plan_flag_value(a, "train.micro_batch");  // --micro-batch and --batch-size: one of them
  base.micro_batch = positive_int(a, a.get("batch-size") ? "batch-size" : "micro-batch", 1);
  base.seq_len = positive_int(a, "seq-len", model.params_only() ? 1024 : model.max_seq);
  base.wrap_blocks = positive_int(a, "wrap-blocks", 1);
  base.virtual_stages =
      positive_int(a, "virtual-stages", base.schedule == plan::Schedule::kInterleaved ? 2 : 1);
  base.shard_group_size = static_cast<int>(a.get_int("shard-group-size", 0));
  base.offload = offload_of(a);
  KIRI_CHECK_KIND(kConfig, !a.flag("no-offload") || !base.offload.any(),
                  "--no-offload contradicts --offload-optimizer/--offload-parameters nvme");
  return base;
}

// Table mode's output: the best `top` layouts and the recommendation, as text or JSON.
int print_table(const Args& a, const plan::PlanRequest& request, size_t top) {
  const plan::ModelSpec& model = request.model;
  const plan::ClusterSpec& cluster = request.cluster;
  const plan::Layout& base = request.base;
  const int world = request.world;
  const std::vector<plan::Evaluation> candidates = plan::enumerate_layouts(request);
  const plan::Recommendation rec = plan::recommend(request, candidates);
  if (a.flag("json")) {
    json cs = json::array();
    for (size_t i = 0; i < candidates.size() && i < top; ++i)
      cs.push_back(evaluation_json(candidates[i]));
    json r = {
        {"bottleneck", rec.bottleneck},
        {"cut", rec.cut},
        {"message", rec.message},
        {"reasons", rec.reasons},
        {"min_devices", rec.min_devices},
        {"offload_slowdown", rec.offload_slowdown > 0 ? json(rec.offload_slowdown) : json(nullptr)},
        {"step_without_offload_s",
         rec.step_without_offload_s > 0 ? json(rec.step_without_offload_s) : json(nullptr)},
        {"layout", rec.best ? evaluation_json(*rec.best) : json(nullptr)}};
    json j = {{"model", model_json(model)},
              {"cluster", cluster_json(cluster)},
              {"world", world},
              {"count", candidates.size()},
              {"candidates", cs},
              {"recommendation", r}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "%s (%.3gB parameters) on %d x %s (%s of memory each), %s, b %lld, B %lld, s %lld, "
      "%s activations, %s attention\n\n",
      model.name.c_str(), model.total_params() / 1e9, world, cluster.name.c_str(),
      plan::gib(cluster.memory_bytes).c_str(), plan::name(base.dtype),
      static_cast<long long>(base.micro_batch), static_cast<long long>(base.global_batch),
      static_cast<long long>(base.seq_len), plan::name(base.form), plan::name(base.attention()));
  if (const std::string src = plan::describe_sources(cluster); !src.empty())
    std::cout << cluster.name << ": " << src << "\n\n";
  std::cout << plan::format_table(candidates, top) << "\n";
  std::cout << "bottleneck: " << rec.bottleneck << " -> cut: " << rec.cut << "\n"
            << rec.message << "\n";
  for (const std::string& r : rec.reasons) std::cout << "  - " << r << "\n";
  return 0;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("plan"));
  if (a.flag("calibrate")) {
    KIRI_CHECK_KIND(kConfig, a.positional().empty(),
                    "kiri plan --calibrate takes only options (--out, --offload-path, ...)");
    return calibrate(a);
  }
  KIRI_CHECK_KIND(kConfig, !a.get("out"), "--out goes with --calibrate");
  plan::ClusterSpec cluster = plan::cluster_preset(a.get("cluster").value_or("a100-80g-nvlink"));
  override_cluster(a, cluster);
  if (plan_has_config(a)) return plan_config_layout(a, cluster);
  const plan::ModelSpec model = model_of(a);

  plan::Layout base = flags_layout(a, model);

  const bool layout_mode = a.get("dp") || a.get("tp") || a.get("pp") || a.get("zero-stage");
  int world = 0;
  if (layout_mode) {
    base.dp = positive_int(a, "dp", 1);
    base.tp = positive_int(a, "tp", 1);
    base.pp = positive_int(a, "pp", 1);
    base.zero_stage = static_cast<int>(a.get_int("zero-stage", 0));
    world = base.world();
    KIRI_CHECK_KIND(kConfig, !a.get("gpus") || a.get_int("gpus", 0) == world, "--gpus ",
                    a.get_int("gpus", 0), " is not dp x tp x pp = ", world);
  } else {
    const int nodes = positive_int(a, a.get("hosts") ? "hosts" : "nodes", 1);
    world = positive_int(a, "gpus", int64_t{nodes} * cluster.devices_per_node);
  }
  cluster.nodes = (world + cluster.devices_per_node - 1) / cluster.devices_per_node;
  base.global_batch = global_batch_of(a, base.micro_batch * (layout_mode ? base.dp : world));
  const size_t top = static_cast<size_t>(positive_int(a, "top", 10));

  if (layout_mode) return print_layout(a, model, cluster, plan::evaluate(model, base, cluster));

  // The table mode enumerates dp/tp/pp/ZeRO/recomputation itself.
  KIRI_CHECK_KIND(
      kConfig, !a.get("activation-checkpointing") && !a.get("schedule") && !a.get("virtual-stages"),
      "--activation-checkpointing, --schedule and --virtual-stages describe one "
      "layout: give "
      "--dp/--tp/--pp/--zero-stage too (without them kiri plan enumerates them)");
  plan::PlanRequest request{model, cluster, world, base};
  request.offload_if_needed = !a.flag("no-offload");
  return print_table(a, request, top);
}

}  // namespace kiri::cli
