#include "kiri/train/metric_sinks.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"

namespace kiri::train {

namespace fs = std::filesystem;

ScalarRow scalar_row(const StepMetrics& m) {
  ScalarRow r = {{"loss", m.loss},
                 {"val_loss", m.val_loss},
                 {"lr", m.lr},
                 {"grad_norm", m.grad_norm},
                 {"tokens_per_s", m.tokens_per_s},
                 {"step_s", m.step_s},
                 {"mfu", m.mfu}};
  for (int i = 0; i < kNumCategories; ++i)
    r.emplace_back(std::string("mem/") + category_name(static_cast<Category>(i)),
                   static_cast<double>(m.mem.current[i]));
  int64_t sent = 0, received = 0;
  for (const auto& [kind, s] : m.comm) {
    sent += s.bytes_sent;
    received += s.bytes_received;
  }
  r.emplace_back("comm/bytes_sent", static_cast<double>(sent));
  r.emplace_back("comm/bytes_received", static_cast<double>(received));
  return r;
}

std::string csv_header() {
  std::string s = "step";
  for (const auto& [name, value] : scalar_row(StepMetrics{})) s += "," + name;
  return s + "\n";
}

std::string csv_line(const StepMetrics& m) {
  std::string s = std::to_string(m.step);
  char buf[32];
  for (const auto& [name, value] : scalar_row(m)) {
    s += ",";
    if (!value) continue;
    std::snprintf(buf, sizeof buf, "%.17g", *value);
    s += buf;
  }
  return s + "\n";
}

std::string csv_path(const RunConfig& cfg) {
  return (fs::path(cfg.run.dir) / "metrics.csv").string();
}

std::string tensorboard_dir(const RunConfig& cfg) {
  return cfg.run.dir;
}

int64_t keep_csv_through(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return 0;
  std::ifstream in(path);
  KIRI_CHECK_KIND(kIo, in.good(), "cannot read the CSV metrics file '", path, "'");
  std::string header, line, kept;
  std::getline(in, header);
  if (header.empty() && in.eof()) return 0;  // empty: the run writes the header
  KIRI_CHECK_KIND(kConfig, header + "\n" == csv_header(), "the CSV metrics file '", path,
                  "' has other columns than this kiri writes (its header: '",
                  quote_bounded(header, 200), "'); move it away to continue the run");
  kept = header + "\n";
  const auto commas = [](const std::string& l) { return std::count(l.begin(), l.end(), ','); };
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    // A whole row ends with its newline (getline then stops before the end of the file) and
    // has the header's columns; its first is a step of this run.
    char* end = nullptr;
    const long long s = std::strtoll(line.c_str(), &end, 10);
    const bool whole = !in.eof() && commas(line) == commas(header) && *end == ',';
    if (whole && s >= 1 && s <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

MetricSinks::MetricSinks(const RunConfig& cfg, bool write, int64_t step)
    : jsonl_(write ? cfg.log.metrics : "", /*append=*/step > 0) {
  if (!write) return;
  if (cfg.log.csv) {
    const std::string path = csv_path(cfg);
    if (step > 0)
      if (const int64_t dropped = keep_csv_through(path, step); dropped > 0)
        log::info("metrics: dropped ", dropped, " row(s) of ", path, " past step ", step);
    std::error_code ec;
    const bool fresh = step == 0 || !fs::exists(path, ec) || fs::file_size(path, ec) == 0;
    csv_ = RecordFile(path, /*append=*/!fresh, "CSV metrics file");
    if (fresh) csv_.append(csv_header(), step, /*sync=*/false);
  }
  if (cfg.log.tensorboard) {
    events_.emplace(tensorboard_dir(cfg));
    if (step > 0) events_->start_session(step + 1);
  }
}

void MetricSinks::write(const StepMetrics& m) {
  jsonl_.write(m);
  const bool last = m.step >= m.total_steps;
  csv_.append(csv_line(m), m.step, last);
  if (events_) {
    std::vector<tensorboard::Scalar> scalars;
    for (const auto& [name, value] : scalar_row(m))
      if (value) scalars.emplace_back(name, *value);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    events_->add_scalars(m.step, now, scalars, last);
  }
}

void MetricSinks::close() {
  jsonl_.close();
  csv_.close();
  if (events_) events_->close();
}

}  // namespace kiri::train
