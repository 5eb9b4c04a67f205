#include "kiri/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/base/units.h"
#include "kiri/kernels/gemm_rate.h"

namespace kiri::train {

namespace {
// Bytes per category on each tier, and each tier's total. The device tier is the memory
// the kernels compute on: on the CPU backend, host RAM (today's `mem` numbers).
nlohmann::json tiers_json(const MemoryStats& s) {
  nlohmann::json device = nlohmann::json::object(), nvme = nlohmann::json::object();
  for (int i = 0; i < kNumCategories; ++i) {
    device[category_name(static_cast<Category>(i))] = s.current[i];
    nvme[category_name(static_cast<Category>(i))] = s.nvme[i];
  }
  device["total"] = s.allocated;
  nvme["total"] = s.nvme_total();
  return {{tier_name(Tier::kDevice), device}, {tier_name(Tier::kNvme), nvme}};
}
}  // namespace

std::string metrics_json_line(const StepMetrics& m) {
  nlohmann::json mem = nlohmann::json::object();
  for (int i = 0; i < kNumCategories; ++i)
    mem[category_name(static_cast<Category>(i))] = m.mem.current[i];
  mem["peak"] = m.mem.peak_allocated;
  mem["reserved"] = m.mem.reserved;
  mem["peak_reserved"] = m.mem.peak_reserved;
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"tokens", m.tokens},
                      {"step_s", m.step_s},
                      {"tokens_per_s", m.tokens_per_s},
                      {"mfu", m.mfu},
                      {"mfu_gemm", m.mfu_gemm},
                      {"elapsed_s", m.elapsed_s},
                      {"mem", mem},
                      {"tiers", tiers_json(m.mem)}};
  if (!m.mfu_peak.empty()) j["mfu_peak"] = m.mfu_peak;
  if (!m.gemm_lowp.empty()) j["gemm_lowp"] = m.gemm_lowp;
  if (m.offload_read_bytes != 0 || m.offload_written_bytes != 0 || m.offload_wait_s != 0)
    j["offload"] = {{"read_bytes", m.offload_read_bytes},
                    {"written_bytes", m.offload_written_bytes},
                    {"wait_s", m.offload_wait_s}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.eta_s) j["eta_s"] = *m.eta_s;
  if (m.bubble) j["bubble"] = *m.bubble;
  if (m.skipped) j["skipped"] = true;
  if (m.loss_scale) {
    j["loss_scale"] = *m.loss_scale;
    j["skipped_steps"] = m.skipped_steps;
  }
  if (!m.link_bytes_per_s.empty()) {
    nlohmann::json links = nlohmann::json::object();
    for (const auto& [host, rate] : m.link_bytes_per_s) links[host] = rate;
    j["links"] = {{"bytes_per_s", links}, {"slow_hosts", m.slow_hosts}};
  }
  if (!m.comm.empty()) {
    nlohmann::json c = nlohmann::json::object();
    for (const auto& [kind, s] : m.comm)
      c[kind] = {{"calls", s.calls},
                 {"bytes_sent", s.bytes_sent},
                 {"bytes_received", s.bytes_received},
                 {"wait_s", s.wait_s}};
    j["comm"] = c;
  }
  return j.dump();
}

std::string progress_line(const StepMetrics& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | mfu %4.1f%% | "
                "mem %s (peak %s)",
                static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.loss, m.lr,
                m.grad_norm, m.tokens_per_s, 100.0 * m.mfu, format_bytes(m.mem.allocated).c_str(),
                format_bytes(m.mem.peak_allocated).c_str());
  std::string s = buf;
  // Offload: the NVMe tier beside the RAM, and the step's swap I/O.
  if (const int64_t nvme = m.mem.nvme_total(); nvme > 0) s += " | nvme " + format_bytes(nvme);
  if (m.offload_read_bytes != 0 || m.offload_written_bytes != 0) {
    std::snprintf(buf, sizeof buf, " | io r %s w %s wait %.2fs",
                  format_bytes(m.offload_read_bytes).c_str(),
                  format_bytes(m.offload_written_bytes).c_str(), m.offload_wait_s);
    s += buf;
  }
  s += " | elapsed " + format_duration(m.elapsed_s);
  if (m.eta_s) s += " | eta " + format_duration(*m.eta_s);
  if (m.bubble) {
    std::snprintf(buf, sizeof buf, " | bubble %.1f%%", 100.0 * *m.bubble);
    s += buf;
  }
  if (m.loss_scale) {
    std::snprintf(buf, sizeof buf, " | scale %g | skipped %lld", *m.loss_scale,
                  static_cast<long long>(m.skipped_steps));
    s += buf;
  }
  if (!m.slow_hosts.empty()) {
    double fastest = 0;
    for (const auto& [host, rate] : m.link_bytes_per_s) fastest = std::max(fastest, rate);
    s += " | slow link:";
    for (const std::string& h : m.slow_hosts)
      for (const auto& [host, rate] : m.link_bytes_per_s)
        if (host == h) s += " " + h + " " + format_bytes(static_cast<int64_t>(rate)) + "/s";
    s += " (fastest " + format_bytes(static_cast<int64_t>(fastest)) + "/s)";
  }
  if (m.skipped) s += " | step skipped (non-finite gradients)";
  if (m.val_loss) {
    std::snprintf(buf, sizeof buf, " | val %.4f", *m.val_loss);
    s += buf;
  }
  return s;
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_.enabled()) return;
  file_.append(metrics_json_line(m) + "\n", m.step, /*sync=*/m.step >= m.total_steps);
}

std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(std::max(0.0, seconds));
  const long long h = total / 3600, m = total / 60 % 60, s = total % 60;
  char buf[64];
  if (h > 0)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm%02llds", h, m, s);
  else if (m > 0)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", m, s);
  else
    std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

void StepClock::mark(StepMetrics& m, int64_t remaining_steps) {
  m.elapsed_s = timer_.seconds();
  add(m.elapsed_s - last_mark_);
  last_mark_ = m.elapsed_s;
  m.eta_s = eta(remaining_steps);
}

void StepClock::add(double seconds) {
  recent_.push_back(seconds);
  if (recent_.size() > window_) recent_.erase(recent_.begin());
}

std::optional<double> StepClock::eta(int64_t remaining_steps) const {
  if (recent_.empty()) return std::nullopt;
  double sum = 0;
  for (double s : recent_) sum += s;
  return sum / static_cast<double>(recent_.size()) *
         static_cast<double>(std::max<int64_t>(0, remaining_steps));
}

double check_peak_flops(double flops) {
  KIRI_CHECK_KIND(kConfig, flops > 0 && std::isfinite(flops),
                  "--peak-flops must be a positive FLOP/s per rank (e.g. 2.5e12), got ", flops);
  return flops;
}

double model_flops_utilization(double model_flops_per_s, double peak) {
  KIRI_CHECK_KIND(kConfig, peak > 0 && std::isfinite(peak),
                  "the peak FLOP/s must be positive and finite, got ", peak);
  return model_flops_per_s / peak;
}

double measure_gemm_flops_rate() {
  return kernels::measure_gemm_flops(1024, 3);
}

}  // namespace kiri::train
