// The supervisor of kiri launch --max-restarts (launch_supervisor.h). Each attempt's ranks
// leave their records in <run.dir>/launch/attempt_K/ (launch_status.h); the supervisor's own
// record of every attempt is one JSON line of <run.dir>/launch/attempts.jsonl.
#include "kiri/cli/launch_supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/config_schema.h"
#include "kiri/cli/launch_attempt.h"
#include "kiri/cli/launch_status.h"
#include "kiri/train/checkpoint_state.h"
#include "kiri/train/run_dir.h"

namespace kiri::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void say(const std::string& text) {
  std::fprintf(stderr, "[kiri] launch: %s\n", text.c_str());
  std::fflush(stderr);
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* signal_name(int sig) {
  switch (sig) {
    case 9:
      return "SIGKILL";
    case 15:
      return "SIGTERM";
    case 6:
      return "SIGABRT";
    case 11:
      return "SIGSEGV";
    case 7:
      return "SIGBUS";
    default:
      return "a signal";
  }
}

// What the run folder says about progress: the latest complete checkpoint and the last step
// the metrics file recorded.
struct Progress {
  std::string checkpoint;  // step directory, "" for none
  int64_t checkpoint_step = 0;
  int64_t global_batch = 0;        // the checkpoint's sequences per step; 0 unknown
  int tp = 1, pp = 1;              // its layout's
  std::optional<int64_t> reached;  // the last step in log.metrics
};

int64_t last_metrics_step(const std::string& path) {
  std::ifstream in(path);
  int64_t step = -1;
  for (std::string l; std::getline(in, l);) {
    try {
      const json j = json::parse(l);
      if (j.contains("step") && j["step"].is_number_integer()) step = j["step"].get<int64_t>();
    } catch (const std::exception&) {
    }  // a torn last line
  }
  return step;
}

// Sequences per step of a config whose dp is resolved (run.dir/config.json's).
int64_t config_global_batch(const train::RunConfig& c) {
  return c.parallel.dp > 0 ? train::global_batch(c) : 0;
}

Progress read_progress(const train::RunConfig& run) {
  Progress p;
  const std::string& root = run.checkpoint.dir;
  std::error_code ec;
  if (!root.empty() && fs::exists(fs::path(root) / "latest", ec)) {
    try {
      p.checkpoint = ckpt::resolve_checkpoint(root);
      const train::CheckpointState s = train::read_checkpoint_state(p.checkpoint);
      p.checkpoint_step = s.step;
      if (s.layout.is_object()) {
        p.tp = s.layout.value("tp", 1);
        p.pp = s.layout.value("pp", 1);
      }
      if (s.config.is_object()) {
        train::RunConfig c = config_from_json(s.config);
        if (s.layout.is_object()) c.parallel.dp = s.layout.value("dp", 0);
        p.global_batch = config_global_batch(c);
      }
    } catch (const Error& e) {
      say(str("cannot read the latest checkpoint of ", root, ": ", e.what()));
      p.checkpoint.clear();
    }
  }
  if (!run.log.metrics.empty())
    if (const int64_t s = last_metrics_step(run.log.metrics); s >= 0) p.reached = s;
  return p;
}

// The resolved config the first attempt wrote (run.dir/config.json), for its global batch
// and layout when no checkpoint has them yet.
std::optional<train::RunConfig> run_folder_config(const train::RunConfig& run) {
  try {
    return config_from_json(json::parse(read_file(run.run.dir + "/config.json")));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A failure attributed to one rank: killed, stopped, lost; or the error it reported.
struct RankFailure {
  int rank = 0;
  std::string host;
  std::string cause;
  bool host_fault = false;  // counts against its host (--exclude-failed)
};

struct Verdict {
  std::vector<RankFailure> failures;
  bool retryable = true;
  std::string why;   // the first error line a rank printed, or the launcher's failure
  std::string kind;  // the kind of the error that is not retried
  int code = 1;
};

Verdict judge(const AttemptResult& a, const std::vector<RankOutcome>& ranks,
              const std::vector<std::string>& host_of) {
  Verdict v;
  v.code = a.exit_code == 0 ? 1 : a.exit_code;
  std::set<int> named;
  auto add = [&](int r, const std::string& cause, bool fault) {
    if (r < 0 || r >= static_cast<int>(ranks.size()) || !named.insert(r).second) return;
    v.failures.push_back({r, host_of[static_cast<size_t>(r)], cause, fault});
  };
  for (const RankOutcome& o : ranks)
    if (o.error_kind && !retryable_error(*o.error_kind) && v.retryable) {
      v.retryable = false;
      v.why = o.error_text;
      v.kind = *o.error_kind;
      v.code = o.error_code;
      add(o.rank, "reported: " + o.error_text, false);
    }
  for (int r : a.stopped)
    add(r, "was stopped (state T: SIGSTOP or a debugger), so the others timed out", true);
  if (a.noticed)
    add(a.noticed->first,
        str("was killed by signal ", a.noticed->second, " (", signal_name(a.noticed->second), ")"),
        true);
  for (const RankOutcome& o : ranks)
    if (o.vanished()) add(o.rank, "ended without a record: killed, or lost with its host", true);
  bool any_started = false;
  for (const RankOutcome& o : ranks) any_started = any_started || o.started;
  for (const RankOutcome& o : ranks)
    if (o.error_kind && v.why.empty()) {
      v.why = o.error_text;
      if (v.failures.empty()) add(o.rank, "reported: " + o.error_text, false);
    }
  if (!any_started)
    v.why = str("the launcher exited with code ", a.exit_code, " before any rank started");
  return v;
}

// The hosts a launch uses, in order, and their slots; ranks fill them slot by slot.
std::vector<std::string> rank_hosts(const std::vector<Host>& hosts, int64_t ranks) {
  std::vector<std::string> out;
  for (const Host& h : hosts)
    for (int64_t s = 0; s < h.slots && static_cast<int64_t>(out.size()) < ranks; ++s)
      out.push_back(h.name);
  while (static_cast<int64_t>(out.size()) < ranks) out.push_back(hosts.back().name);
  return out;
}

void append_line(const std::string& path, const json& j) {
  std::ofstream out(path, std::ios::app);
  out << j.dump() << "\n";
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == flag) return true;
  }
  return false;
}

}  // namespace

std::vector<Host> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  KIRI_CHECK_KIND(kConfig, in.good(), "cannot read the hostfile ", path);
  std::vector<Host> hosts;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    Host h;
    if (!(words >> h.name)) continue;
    for (std::string w; words >> w;)
      if (w.rfind("slots=", 0) == 0) {
        const std::string v = w.substr(6);
        KIRI_CHECK_KIND(kConfig,
                        !v.empty() && v.find_first_not_of("0123456789") == v.npos && v.size() < 7 &&
                            std::stoll(v) >= 1,
                        path, ": host ", h.name, " has slots=", v, ", not a count >= 1");
        h.slots = std::stoll(v);
      }
    auto same =
        std::find_if(hosts.begin(), hosts.end(), [&](const Host& x) { return x.name == h.name; });
    if (same != hosts.end())
      same->slots += h.slots;  // a host listed once per slot
    else
      hosts.push_back(h);
  }
  KIRI_CHECK_KIND(kConfig, !hosts.empty(), "the hostfile ", path, " names no host");
  return hosts;
}

std::vector<std::string> restart_command(const std::vector<std::string>& command,
                                         const std::string& checkpoint, bool resized,
                                         int64_t global_batch) {
  std::vector<std::string> out;
  bool init = false;
  std::optional<std::string> resume;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& a = command[i];
    const bool valued = a == "--resume" || a == "--init-from" || a == "--global-batch";
    if (a == "--overwrite") continue;
    if (valued || a.rfind("--resume=", 0) == 0 || a.rfind("--init-from=", 0) == 0 ||
        a.rfind("--global-batch=", 0) == 0) {
      std::string value =
          valued ? (i + 1 < command.size() ? command[i + 1] : "") : a.substr(a.find('=') + 1);
      if (a.rfind("--resume", 0) == 0) resume = value;
      if (a.rfind("--init-from", 0) == 0) init = true;
      if (valued) ++i;
      if (a.rfind("--init-from", 0) == 0 && checkpoint.empty()) {
        out.insert(out.end(), {"--init-from", value});  // no checkpoint yet: start it again
      }
      continue;
    }
    out.push_back(a);
  }
  if (!checkpoint.empty())
    out.insert(out.end(), {"--resume", checkpoint});
  else if (init)
    out.push_back("--overwrite");  // the first attempt's partial output goes
  else if (resume && *resume != "auto")
    out.insert(out.end(), {"--resume", *resume});  // still the checkpoint it was given
  else
    out.insert(out.end(), {"--resume", "auto"});  // none yet: starts fresh, metrics over
  if (resized) {
    if (!has_flag(out, "--auto")) out.insert(out.end(), {"--set", "parallel.dp=0"});
    if (global_batch > 0) out.insert(out.end(), {"--global-batch", std::to_string(global_batch)});
  }
  return out;
}

int supervise(const LaunchPlan& plan) {
  const std::vector<std::string> train_args(plan.command.begin() + 1, plan.command.end());
  const train::RunConfig run = train_command_paths(train_args);
  const bool auto_layout = has_flag(train_args, "--auto");
  const std::string folder = run.run.dir + "/launch";
  fs::create_directories(folder);
  train::RunLock lock;
  lock.acquire(folder);  // one supervisor per run folder
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().rfind("attempt_", 0) == 0) fs::remove_all(e.path());
  if (has_flag(train_args, "--overwrite")) fs::remove(folder + "/attempts.jsonl");
  if (run.checkpoint.dir.empty())
    say("checkpoint.dir is empty: a restart starts the run over from step 0");
  const bool hostfile = plan.hostfile.has_value();
  std::vector<Host> hosts =
      hostfile ? parse_hostfile(*plan.hostfile) : std::vector<Host>{{"localhost", plan.n}};
  int64_t slots = 0;
  for (const Host& h : hosts) slots += h.slots;
  KIRI_CHECK_KIND(
      kConfig, !hostfile || slots >= plan.n, "the hostfile ", *plan.hostfile, " has ", slots,
      " slots for -n ", plan.n,
      ": a supervised job maps one rank per slot, so that a failed rank names its host");
  std::map<std::string, int> failures_of;
  int64_t world = plan.n;
  std::vector<std::string> command = plan.command;
  for (int attempt = 1;; ++attempt) {
    if (stop_requested()) {
      say("stopped by a signal before attempt " + std::to_string(attempt));
      return 1;
    }
    const std::string dir = str(folder, "/attempt_", attempt);
    fs::create_directories(dir);
    std::optional<std::string> hf;
    if (hostfile) {
      std::string text;
      for (const Host& h : hosts) text += str(h.name, " slots=", h.slots, "\n");
      write_file_atomic(dir + "/hostfile", text);
      hf = dir + "/hostfile";
    }
    const std::vector<std::string> host_of = rank_hosts(hosts, world);
    const std::vector<std::string> cmd = launcher_command(plan, world, hf, dir, command);
    say(str("attempt ", attempt, " of ", plan.max_restarts + 1, ": ", world,
            " rank(s): ", join(cmd)));
    std::map<std::string, std::string> env;
    if (plan.launcher)  // mpirun passes these with -x
      env = {{kLaunchStatusEnv, dir},
             {"OMP_NUM_THREADS", std::to_string(launch_threads(plan, world))}};
    const double started = unix_now();
    const AttemptResult a = run_attempt(cmd, env, dir, static_cast<int>(world));
    json rec = {{"attempt", attempt},     {"ranks", world},
                {"hosts", host_of},       {"started_at", started},
                {"ended_at", unix_now()}, {"exit_code", a.exit_code},
                {"seconds", a.seconds},   {"wait_gone_s", a.wait_gone_s}};
    if (a.exit_code == 0 && !a.interrupted) {
      say(str("attempt ", attempt, " finished the run",
              attempt > 1 ? str(" after ", attempt - 1, " restart(s)") : ""));
      append_line(folder + "/attempts.jsonl", rec);
      return 0;
    }
    const Verdict v = judge(a, read_launch_status(dir, static_cast<int>(world)), host_of);
    const Progress p = read_progress(run);
    json failures = json::array();
    std::vector<std::string> causes;
    for (const RankFailure& f : v.failures) {
      failures.push_back({{"rank", f.rank}, {"host", f.host}, {"cause", f.cause}});
      causes.push_back(str("rank ", f.rank, " (", f.host, ") ", f.cause));
    }
    rec["failures"] = failures;
    rec["error"] = v.why;
    rec["retryable"] = v.retryable && !a.interrupted;
    rec["checkpoint"] = p.checkpoint;
    rec["checkpoint_step"] = p.checkpoint_step;
    if (p.reached) rec["reached_step"] = *p.reached;
    const std::string lost =
        run.log.metrics.empty() ? std::string("steps lost: unknown (log.metrics is off)")
        : !p.reached            ? std::string("no step finished")
                     : str(std::max<int64_t>(0, *p.reached - p.checkpoint_step), " step(s) lost (",
                           *p.reached, " reached, ",
                           p.checkpoint.empty() ? std::string("no checkpoint yet")
                                                : str("the checkpoint is step ", p.checkpoint_step),
                           ")");
    if (p.reached) rec["steps_lost"] = std::max<int64_t>(0, *p.reached - p.checkpoint_step);
    say(str("attempt ", attempt, " failed after ", secs(a.seconds), " (exit code ", a.exit_code,
            "): ", causes.empty() ? v.why : join(causes, "; "), "; ", lost,
            a.killed_leftovers
                ? str("; ", a.killed_leftovers, " rank(s) outlived the launcher and were killed")
                : ""));
    auto stop = [&](const std::string& why, int code) {
      say(why);
      rec["decision"] = why;
      append_line(folder + "/attempts.jsonl", rec);
      return code;
    };
    if (a.interrupted) return stop("stopped by a signal: no restart", a.exit_code);
    if (!v.retryable)
      return stop(
          str("not retried: the job ended with ", v.kind.empty() ? "an error" : "a " + v.kind,
              " (exit code ", v.code, "), which a restart would repeat"),
          v.code);
    if (attempt > plan.max_restarts)
      return stop(str("giving up: ", plan.max_restarts, " restart(s) used (--max-restarts)"),
                  a.exit_code == 0 ? 1 : a.exit_code);
    // Leave out what failed: a host (with a hostfile) after --max-host-failures failures, a
    // slot (without one) at once.
    std::vector<std::string> excluded;
    if (plan.exclude_failed) {
      std::set<std::string> failed_hosts;
      int failed_slots = 0;
      for (const RankFailure& f : v.failures)
        if (f.host_fault) {
          failed_hosts.insert(f.host);
          ++failed_slots;
        }
      if (hostfile) {
        for (const std::string& h : failed_hosts)
          if (++failures_of[h] >= plan.max_host_failures) excluded.push_back(h);
        std::erase_if(hosts, [&](const Host& h) {
          return std::find(excluded.begin(), excluded.end(), h.name) != excluded.end();
        });
      } else if (failed_slots > 0) {
        hosts[0].slots -= failed_slots;
        excluded.push_back(str(failed_slots, " slot(s)"));
      }
    }
    int64_t available = 0;
    for (const Host& h : hosts) available += std::max<int64_t>(h.slots, 0);
    // tp x pp must divide the world unless --auto plans it anew.
    std::optional<train::RunConfig> first = run_folder_config(run);
    const int64_t unit = auto_layout ? 1
                                     : (!p.checkpoint.empty() ? p.tp * p.pp
                                        : first ? first->parallel.tp * first->parallel.pp
                                                : run.parallel.tp * run.parallel.pp);
    const int64_t next = std::min(available, plan.n) / unit * unit;
    rec["excluded"] = excluded;
    if (next < plan.min_ranks || next == 0)
      return stop(str("cannot restart: ", available, " slot(s) remain",
                      excluded.empty() ? "" : " (" + join(excluded, ", ") + " excluded)",
                      ", room for ", next, " rank(s) in multiples of tp x pp = ", unit,
                      ", below --min-ranks ", plan.min_ranks),
                  1);
    int64_t global = p.global_batch;
    if (global == 0 && first) global = config_global_batch(*first);
    command = plan.command;
    const std::vector<std::string> args =
        restart_command(std::vector<std::string>(plan.command.begin() + 1, plan.command.end()),
                        p.checkpoint, next != plan.n, global);
    command.resize(1);
    command.insert(command.end(), args.begin(), args.end());
    rec["next_ranks"] = next;
    rec["decision"] = str("restart on ", next, " rank(s)");
    append_line(folder + "/attempts.jsonl", rec);
    say(str("restarting on ", next, " rank(s)",
            excluded.empty() ? "" : " without " + join(excluded, ", "),
            p.checkpoint.empty() ? std::string(" from the start (no checkpoint yet)")
                                 : str(" from ", p.checkpoint, " (step ", p.checkpoint_step, ")"),
            next != world && global > 0 ? str(", keeping the global batch of ", global) : ""));
    world = next;
  }
}

}  // namespace kiri::cli
