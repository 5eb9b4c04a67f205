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

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The slow links a link probe found (rank 0), or "".
std::string slow_link_text(const StepMetrics& m) {
  if (m.slow_hosts.empty()) return "";
  double fastest = 0;
  for (const auto& [host, rate] : m.link_bytes_per_s) fastest = std::max(fastest, rate);
  std::string s = "slow link:";
  for (const std::string& h : m.slow_hosts)
    for (const auto& [host, rate] : m.link_bytes_per_s)
      if (host == h) s += " " + h + " " + format_bytes(static_cast<int64_t>(rate)) + "/s";
  return s + " (fastest " + format_bytes(static_cast<int64_t>(fastest)) + "/s)";
}

// The progress line's fields in display order, each with its priority on the short line (0 is
// always shown; a larger number is dropped first when the line would pass its width) and the
// lines that show it.
enum class Show { kBoth, kShort, kVerbose };
struct Field {
  std::string text;
  int priority;
  Show show = Show::kBoth;
};

std::vector<Field> progress_fields(const StepMetrics& m) {
  std::vector<Field> f;
  char step[48];
  std::snprintf(step, sizeof step, "step %6lld/%lld", static_cast<long long>(m.step),
                static_cast<long long>(m.total_steps));
  f.push_back({step, 0});
  f.push_back({fmt("loss %.4f", m.loss), 0});
  if (m.val_loss) f.push_back({fmt("val %.4f", *m.val_loss), 0});
  f.push_back({fmt("lr %.2e", m.lr), 1});
  f.push_back({fmt("norm %.3f", m.grad_norm), 4});
  f.push_back({fmt("%.0f tok/s", m.tokens_per_s), 1});
  f.push_back({fmt("mfu %4.1f%%", 100.0 * m.mfu), 2});
  f.push_back({"mem " + format_bytes(m.mem.allocated) + " (peak " +
                   format_bytes(m.mem.peak_allocated) + ")",
               0, Show::kVerbose});
  f.push_back({"mem " + format_bytes(m.mem.peak_allocated), 3, Show::kShort});
  // Offload: the NVMe tier beside the RAM, and the step's swap I/O.
  if (const int64_t nvme = m.mem.nvme_total(); nvme > 0)
    f.push_back({"nvme " + format_bytes(nvme), 6});
  if (m.offload_read_bytes != 0 || m.offload_written_bytes != 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "io r %s w %s wait %.2fs",
                  format_bytes(m.offload_read_bytes).c_str(),
                  format_bytes(m.offload_written_bytes).c_str(), m.offload_wait_s);
    f.push_back({buf, 0, Show::kVerbose});
  }
  f.push_back({"elapsed " + format_duration(m.elapsed_s), 0, Show::kVerbose});
  if (m.eta_s) f.push_back({"eta " + format_duration(*m.eta_s), 5});
  if (m.bubble) f.push_back({fmt("bubble %.1f%%", 100.0 * *m.bubble), 7});
  if (m.loss_scale) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "scale %g | skipped %lld", *m.loss_scale,
                  static_cast<long long>(m.skipped_steps));
    f.push_back({buf, 0, Show::kVerbose});
    f.push_back({fmt("scale %g", *m.loss_scale), 6, Show::kShort});
  }
  if (m.skipped) f.push_back({"step skipped (non-finite gradients)", 0});
  return f;
}

}  // namespace

std::string progress_line(const StepMetrics& m, bool verbose) {
  const std::vector<Field> fields = progress_fields(m);
  // The short line: the verbose-only fields out, then the least important ones until it fits.
  std::vector<Field> shown;
  for (const Field& f : fields)
    if (f.show == Show::kBoth || f.show == (verbose ? Show::kVerbose : Show::kShort))
      shown.push_back(f);
  auto join = [&] {
    std::string s;
    for (const Field& f : shown) s += (s.empty() ? "" : " | ") + f.text;
    return s;
  };
  while (!verbose && join().size() > kProgressColumns) {
    auto worst = std::max_element(shown.begin(), shown.end(), [](const Field& a, const Field& b) {
      return a.priority < b.priority;
    });
    if (worst == shown.end() || worst->priority == 0) break;
    shown.erase(worst);
  }
  std::string s = join();
  // A slow link is news, not a field: on a line of its own below, always.
  if (const std::string slow = slow_link_text(m); !slow.empty())
    s += verbose ? " | " + slow : "\n  " + slow;
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
