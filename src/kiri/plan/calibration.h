#pragma once
// Calibration: what `kiri plan --calibrate` measured on this machine (FMA peaks and fp32 GEMM
// rate per process, the intra-node link), stored as JSON, and how the `this-machine` cluster preset
// takes it. Numbers only: the measuring is src/kiri/bench/calibrate.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiri/plan/specs.h"

namespace kiri::plan {

// One timed message size: `seconds` for `bytes` (median of the repetitions).
struct LinkSample {
  double bytes = 0;
  double seconds = 0;
};

struct Calibration {
  std::string host, date;
  int cores = 0;            // hardware threads of the machine
  double memory_bytes = 0;  // physical memory of the machine
  // fp32 GEMM (n x n x n, oneDNN sgemm), FLOP/s of one process: on 1 thread and on `threads`.
  int64_t gemm_n = 0;
  int threads = 0;
  double gemm_flops_1_thread = 0, gemm_flops_all_threads = 0;
  // Version 5: the same n x n x n GEMM in bf16 (fp32 C) on the path kiri trains with
  // (`gemm_bf16_path`: "via_f32", "packed" or "onednn (<kernel>)"), 1 thread per rank, every rank
  // at once; 0 = not measured (versions 1-4: 16-bit GEMMs assumed at fp32 / 2).
  double gemm_bf16_flops_1_thread = 0;
  std::string gemm_bf16_path;
  // The paths' rates on that GEMM (0: not measured, no oneDNN kernel, no packed kernel in this
  // build, or a file written before the packed path); under KIRI_GEMM_LOWP=auto
  // gemm_bf16_flops_1_thread is the fastest one's, the path kiri trains with (kernels/ops.h:
  // kAuto is chosen by measurement).
  double gemm_bf16_via_f32_flops_1_thread = 0, gemm_bf16_onednn_flops_1_thread = 0;
  double gemm_bf16_packed_flops_1_thread = 0;
  // The intra-node link: "all_reduce" (kiri's all_reduce over `ranks` MPI ranks) or "memcpy"
  // (one process's shared-memory copy bandwidth; the latency is not measured then).
  std::string link_method;
  int link_ranks = 1;
  std::vector<LinkSample> samples;
  double bandwidth = 0;  // bytes/s (α–β β)
  double latency = 0;    // seconds (α); 0 = not measured
  // When the ranks spanned hosts (link_hosts > 1): the share of a rank's compute that a 16 MiB
  // all-reduce in flight took from it (bench::measure_transfer_compute_share,
  // ClusterSpec::transfer_compute_share); 0 = not measured (one host, or an older file).
  int link_hosts = 1;
  double transfer_compute_share = 0;
  // Version 2: kiri's non-GEMM work on one thread per rank, every rank at once (seconds per
  // element, ClusterSpec::non_gemm); 0 = not measured (a version 1 file). Version 6: logit_s
  // times the one-pass loss (tp 1), logit_split_s the vocab-parallel pair's kernels (tp > 1),
  // optimizer_s AdamW alone and optimizer_zeroing_s AdamW zeroing the gradients it reads,
  // gradient_s the norm's sum of squares alone and zeroing_s a gradient's zeroing pass.
  double logit_s = 0, optimizer_s = 0, gradient_s = 0;
  double logit_split_s = 0, optimizer_zeroing_s = 0, zeroing_s = 0;
  // Versions 2-5 timed the two-kernel loss (logit_s) and zeroing + norm in one (gradient_s):
  // load_calibration derives the version 6 costs from them by the bytes each moves (specs.h)
  // and recomputes activation_s from the step, and says so (true; never written).
  bool non_gemm_derived = false;
  // What is left of a one-process kiri step of the calibration model (below) once its GEMMs
  // at gemm_flops_1_thread and its logits, optimizer and gradients are taken out, per token
  // × hidden × layer (activation_seconds_from_step).
  double activation_s = 0;
  struct StepModel {
    int64_t n_layer = 0, n_embd = 0, n_head = 0, vocab = 0, batch = 0, seq = 0;
  } step_model;
  double step_s = 0;  // its measured step (median)
  // Version 3: one core's FMA peak per dtype (kernels::peak_flops on 1 thread, every rank at
  // once) and the instruction that reached it; 0 = not measured (versions 1 and 2).
  struct Peak {
    double flops = 0;
    std::string instruction;
  };
  Peak peak_fp32, peak_bf16, peak_fp16;
  // Version 4: the disk under offload.path (offload::measure_disk_bandwidth: O_DIRECT
  // transfers of block_size with queue_depth in flight through `engine`, one process);
  // bandwidths 0 = not measured (versions 1-3).
  struct Disk {
    std::string path, engine;
    int64_t block_size = 0, bytes = 0;
    int queue_depth = 0;
    bool direct = true;
    double read_bytes_per_s = 0, write_bytes_per_s = 0;
  } disk;
};

// The model one `kiri plan --calibrate` step trains: not the docs' tiny table's shape (3
// layers of 256, 4 heads, V 8192, 8 × 64 tokens), so that table checks the fit.
Calibration::StepModel calibration_step_model();
// The activation_s that makes the time model's step of `m` on one rank (estimate_time with
// this machine's measured GEMM rate and the other non-GEMM costs) equal `step_s`; 0 when the
// rest already exceeds it.
double activation_seconds_from_step(const Calibration& c, const Calibration::StepModel& m,
                                    double step_s);

// An α–β fit of ring all-reduce times over n ranks: t = 2(n−1)α + 2(n−1)/n·bytes/β (least
// squares of t = a + c·bytes; α = a/(2(n−1)), β = 2(n−1)/(n·c)); a negative intercept is
// clamped to 0. Copies (n = 1): t = α + bytes/β. Needs two distinct sizes (kConfig).
Link fit_link(const std::vector<LinkSample>& samples, int n);

// $KIRI_CALIBRATION, else runs/calibration/this-machine.json (relative to the working
// directory). KIRI_CALIBRATION=none: no file (the preset's assumptions).
std::string default_calibration_path();
// The stored calibration, or nullopt when there is no file; kConfig naming the file when it
// is not valid calibration JSON.
std::optional<Calibration> load_calibration(const std::string& path);
// Writes the JSON (creating the folder); kIo on failure.
void save_calibration(const Calibration& c, const std::string& path);
std::string calibration_json(const Calibration& c);

// The `this-machine` cluster from a calibration: one device per core (a rank of one thread)
// whose peaks are the measured FMA peaks (fp32, bf16, fp16) and whose efficiency is the
// measured 1-thread fp32 GEMM rate over the fp32 peak, 16-bit GEMMs at the measured bf16 GEMM
// rate (fp16 too; versions 1-4: assumed at half the fp32 GEMM rate); the memory split over the
// cores, the intra (and inter: one node) link as measured (a copy's latency assumed 2 µs), the
// non-GEMM costs as measured (version 1 files: this_machine_assumed()'s; versions 2-5: derived,
// Calibration::non_gemm_derived). Files without a peak
// (versions 1 and 2) take the GEMM rate as the peak with efficiency 1, bf16 at half of it, as they
// always did. The disk as measured (version 4), else kAssumedDisk. `measured` names the fields that
// came from the file, `source` is its path.
ClusterSpec calibrated_cluster(const Calibration& c, const std::string& source);

// "measured (FILE, DATE): ...; assumed: ..." for `kiri plan`'s output; "" for presets that
// are all datasheet values.
std::string describe_sources(const ClusterSpec& cluster);

}  // namespace kiri::plan
