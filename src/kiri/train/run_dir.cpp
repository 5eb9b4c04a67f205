#include "kiri/train/run_dir.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/checkpoint_dir.h"

namespace kiri::train {

namespace fs = std::filesystem;

namespace {

// The metrics rows by step (a step written twice: the later row), and how many
// lines did not parse (a torn last line after a crash).
struct MetricsRows {
  std::map<int64_t, std::string> lines;
  std::map<int64_t, nlohmann::json> rows;
  int64_t total = 0, unreadable = 0;
};

MetricsRows read_metrics(const std::string& path, bool keep_json) {
  MetricsRows out;
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return out;
  std::ifstream in(path);
  KIRI_CHECK_KIND(kIo, in.good(), "cannot read the metrics file '", path, "'");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++out.total;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      ++out.unreadable;
      continue;
    }
    const int64_t step = j["step"].get<int64_t>();
    out.lines[step] = line;
    if (keep_json) out.rows[step] = j;
  }
  return out;
}

// Whether `path` lies inside `dir` (both made absolute, `..` resolved).
bool inside(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return false;
  const fs::path p = fs::weakly_canonical(fs::absolute(path));
  const fs::path d = fs::weakly_canonical(fs::absolute(dir));
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

bool remove_path(const fs::path& p, std::vector<std::string>& removed) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return false;
  fs::remove_all(p, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot remove ", p.string(), ": ", ec.message());
  removed.push_back(p.string());
  return true;
}

}  // namespace

std::string RunDirContents::describe() const {
  std::string s;
  if (!checkpoints.empty())
    s = str("checkpoints up to step ", checkpoints.back());
  else if (latest)
    s = "a checkpoint root";
  if (metrics_rows > 0)
    s += str(s.empty() ? "" : ", ", "metrics up to step ", metrics_last_step,
             checkpoints.empty() && !latest ? ", no checkpoint" : "");
  return s;
}

RunDirContents inspect_run_dir(const RunConfig& cfg) {
  RunDirContents c;
  if (!cfg.checkpoint.dir.empty()) {
    c.checkpoints = ckpt::list_checkpoints(cfg.checkpoint.dir);
    std::error_code ec;
    c.latest = fs::exists(fs::path(cfg.checkpoint.dir) / "latest", ec);
  }
  const MetricsRows m = read_metrics(cfg.log.metrics, false);
  c.metrics_rows = static_cast<int64_t>(m.lines.size());
  if (!m.lines.empty()) c.metrics_last_step = m.lines.rbegin()->first;
  return c;
}

void refuse_used_run_dir(const RunConfig& cfg) {
  const RunDirContents c = inspect_run_dir(cfg);
  if (!c.holds_a_run()) return;
  std::string where = cfg.run.dir;
  if (!inside(cfg.checkpoint.dir, cfg.run.dir) && !cfg.checkpoint.dir.empty() &&
      (c.latest || !c.checkpoints.empty()))
    where = cfg.checkpoint.dir;
  else if (c.checkpoints.empty() && !c.latest && !inside(cfg.log.metrics, cfg.run.dir))
    where = cfg.log.metrics;
  KIRI_RAISE(kConfig, where, " already holds a run (", c.describe(),
             "); continue it with --resume auto, or start over with --overwrite");
}

std::vector<std::string> clear_run_dir(const RunConfig& cfg) {
  const std::string& root = cfg.checkpoint.dir;
  std::vector<std::string> removed =
      root.empty() ? std::vector<std::string>{} : ckpt::remove_checkpoints(root);
  for (const std::string& file :
       {cfg.log.metrics, plot_path(cfg.log), (fs::path(cfg.run.dir) / "config.json").string()})
    if (inside(file, cfg.run.dir) || inside(file, root)) remove_path(file, removed);
  return removed;
}

std::string write_run_config(const RunConfig& cfg, const std::string& json) {
  std::error_code ec;
  fs::create_directories(cfg.run.dir, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the run folder ", cfg.run.dir, ": ", ec.message());
  const std::string path = (fs::path(cfg.run.dir) / "config.json").string();
  write_file_atomic(path, json + "\n");
  return path;
}

int64_t keep_metrics_through(const std::string& path, int64_t step) {
  const MetricsRows m = read_metrics(path, false);
  std::string kept;
  int64_t rows = 0;
  for (const auto& [s, line] : m.lines)
    if (s >= 1 && s <= step) {
      kept += line + "\n";
      ++rows;
    }
  const int64_t dropped = m.total - rows;
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

LossHistory read_loss_history(const std::string& metrics_path) {
  LossHistory h;
  for (const auto& [step, j] : read_metrics(metrics_path, true).rows) {
    if (j.contains("loss") && j["loss"].is_number()) {
      h.steps.push_back(static_cast<double>(step));
      h.loss.push_back(j["loss"].get<double>());
    }
    if (j.contains("val_loss") && j["val_loss"].is_number()) {
      h.val_steps.push_back(static_cast<double>(step));
      h.val_loss.push_back(j["val_loss"].get<double>());
    }
  }
  return h;
}

std::vector<Series> loss_plot_series(const LossHistory& h) {
  return {{"train", h.steps, h.loss, 0x1f77b4}, {"validation", h.val_steps, h.val_loss, 0xd62728}};
}

}  // namespace kiri::train
