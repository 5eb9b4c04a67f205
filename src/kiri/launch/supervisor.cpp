// The supervisor of kiri launch --max-restarts (launch/supervisor.h). Each attempt's ranks
// leave their records in <run.dir>/launch/attempt_K/ (launch/status.h); the supervisor's own
// record of every attempt is one JSON line of <run.dir>/launch/attempts.jsonl.
#include "kiri/launch/supervisor.h"

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
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/config/config_schema.h"
#include "kiri/launch/attempt.h"
#include "kiri/launch/status.h"
#include "kiri/train/run_dir.h"

namespace kiri::launch {

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
int64_t config_global_batch(const kiri::RunConfig& c) {
  return c.parallel.dp > 0 ? kiri::global_batch(c) : 0;
}

// The last step the metrics file records, into p.
Progress read_metrics_progress(const kiri::RunConfig& run, Progress p) {
  if (!run.log.metrics.empty())
    if (const int64_t s = last_metrics_step(run.log.metrics); s >= 0) p.reached = s;
  return p;
}

Progress read_progress(const kiri::RunConfig& run) {
  Progress p;
  const std::string& root = run.checkpoint.dir;
  if (!root.empty()) {
    try {
      // `latest`'s, or the newest complete one when a save was killed before `latest`.
      std::string note;
      p.checkpoint = ckpt::find_resume_checkpoint(root, &note);
      if (!note.empty()) say(note);
      if (p.checkpoint.empty()) return read_metrics_progress(run, p);
      const ckpt::CheckpointState s = ckpt::read_checkpoint_state(p.checkpoint);
      p.checkpoint_step = s.step;
      if (s.layout.is_object()) {
        p.tp = s.layout.value("tp", 1);
        p.pp = s.layout.value("pp", 1);
      }
      // state.json's global_batch; a checkpoint written before it had one: its config's
      // batch over its layout's dp.
      const json raw = json::parse(read_file(p.checkpoint + "/state.json"));
      if (raw.contains("global_batch") && raw["global_batch"].is_number_integer()) {
        p.global_batch = raw["global_batch"].get<int64_t>();
      } else if (s.config.is_object()) {
        kiri::RunConfig c = config_from_json(s.config);
        if (s.layout.is_object()) c.parallel.dp = s.layout.value("dp", 0);
        p.global_batch = config_global_batch(c);
      }
    } catch (const std::exception& e) {
      say(str("cannot read the latest checkpoint of ", root, ": ", e.what()));
      p.checkpoint.clear();
    }
  }
  return read_metrics_progress(run, p);
}

// The resolved config the first attempt wrote (run.dir/config.json), for its global batch
// and layout when no checkpoint has them yet.
std::optional<kiri::RunConfig> run_folder_config(const kiri::RunConfig& run) {
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

// A communication timeout across hosts: ranks that did not answer are on a host that lost
// its link, or their host is fine and the reporter's is the one cut off. A reporter that
// could not reach the launcher's host either names its own host; one that could names the
// hosts of the ranks it missed. Without an answer either way (not mpirun), nobody is blamed.
template <typename Add>
void add_unreachable(const std::vector<RankOutcome>& ranks, const std::vector<std::string>& host_of,
                     Add add) {
  auto host = [&](int r) { return host_of[static_cast<size_t>(r)]; };
  std::set<std::string> reaching;  // hosts whose ranks reached the launcher
  for (const RankOutcome& o : ranks)
    if (o.reached_launcher == true) reaching.insert(host(o.rank));
  for (const RankOutcome& o : ranks)
    if (o.reached_launcher == false && !reaching.count(host(o.rank)))
      add(o.rank, "lost its link: it reached neither the other hosts' ranks nor the launcher",
          true);
  for (const RankOutcome& o : ranks) {
    if (o.reached_launcher != true) continue;
    for (int r : o.unreachable)
      if (r >= 0 && r < static_cast<int>(ranks.size()) && !reaching.count(host(r)))
        add(r,
            str("was unreachable from rank ", o.rank, " (", host(o.rank),
                "): its host is lost or its link is down"),
            true);
  }
}

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
  add_unreachable(ranks, host_of, add);
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

std::vector<Host> parse_hosts(const std::string& text) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    Host h{item.substr(0, colon), 1};
    KIRI_CHECK_KIND(kConfig, !h.name.empty(), "--hosts ", text,
                    ": an empty host name (the form is host:ranks,host:ranks, e.g. a:2,b:2)");
    if (colon != std::string::npos) {
      const std::string v = item.substr(colon + 1);
      KIRI_CHECK_KIND(kConfig,
                      !v.empty() && v.find_first_not_of("0123456789") == v.npos && v.size() < 7 &&
                          std::stoll(v) >= 1,
                      "--hosts ", text, ": host ", h.name, " has ", v.empty() ? "no" : v,
                      " ranks, not a count >= 1");
      h.slots = std::stoll(v);
    }
    for (const Host& x : hosts)
      KIRI_CHECK_KIND(kConfig, x.name != h.name, "--hosts ", text, ": host ", h.name,
                      " is named twice");
    hosts.push_back(h);
  }
  KIRI_CHECK_KIND(kConfig, !hosts.empty(), "--hosts names no host");
  return hosts;
}

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

namespace {

// The supervisor's state across attempts.
class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, const kiri::RunConfig& run);
  int run();

 private:
  // One attempt: runs it, and returns the exit code to end with, or nullopt to restart.
  std::optional<int> attempt(int k);
  // After a failure: leaves out what failed (--exclude-failed) and returns the next world.
  int64_t exclude_and_resize(const Verdict& v, const Progress& p, json& rec,
                             std::vector<std::string>& excluded);
  std::string lost_text(const Progress& p) const;
  void record_failure(int k, const AttemptResult& a, const Verdict& v, const Progress& p, json& rec,
                      bool quiet) const;
  int stopped(int k, const AttemptResult& a, const Progress& p, json& rec) const;

  const LaunchPlan& plan_;
  const kiri::RunConfig run_;
  const bool auto_layout_;
  const std::string folder_;
  train::RunLock lock_;
  std::vector<Host> hosts_;
  std::map<std::string, int> failures_of_;
  int64_t world_;
  std::vector<std::string> command_;
};

Supervisor::Supervisor(const LaunchPlan& plan, const kiri::RunConfig& run)
    : plan_(plan),
      run_(run),
      auto_layout_(has_flag(plan.command, "--auto")),
      folder_(run_.run.dir + "/launch"),
      world_(plan.n),
      command_(plan.command) {
  fs::create_directories(folder_);
  lock_.acquire(folder_);  // one supervisor per run folder
  for (const auto& e : fs::directory_iterator(folder_))
    if (e.path().filename().string().rfind("attempt_", 0) == 0) fs::remove_all(e.path());
  if (has_flag(plan.command, "--overwrite")) fs::remove(folder_ + "/attempts.jsonl");
  if (run_.checkpoint.dir.empty())
    say("checkpoint.dir is empty: a restart starts the run over from step 0");
  hosts_ = plan.hostfile ? parse_hostfile(*plan.hostfile)
           : plan.hosts  ? parse_hosts(*plan.hosts)
                         : std::vector<Host>{{"localhost", plan.n}};
  int64_t slots = 0;
  for (const Host& h : hosts_) slots += h.slots;
  KIRI_CHECK_KIND(
      kConfig, !(plan.hostfile || plan.hosts) || slots >= plan.n,
      plan.hostfile ? "the hostfile " + *plan.hostfile : "--hosts " + plan.hosts.value_or(""),
      " has ", slots, " slots for -n ", plan.n,
      ": a supervised job maps one rank per slot, so that a failed rank names its host");
}

int Supervisor::run() {
  for (int k = 1;; ++k) {
    if (stop_requested()) {
      say(str("stopped by a signal before attempt ", k));
      return 1;
    }
    if (const std::optional<int> code = attempt(k)) return *code;
  }
}

std::string Supervisor::lost_text(const Progress& p) const {
  if (run_.log.metrics.empty()) return "steps lost: unknown (log.metrics is off)";
  if (!p.reached) return "no step finished";
  return str(std::max<int64_t>(0, *p.reached - p.checkpoint_step), " step(s) lost (", *p.reached,
             " reached, ",
             p.checkpoint.empty() ? std::string("no checkpoint yet")
                                  : str("the checkpoint is step ", p.checkpoint_step),
             ")");
}

std::optional<int> Supervisor::attempt(int k) {
  const std::string dir = str(folder_, "/attempt_", k);
  fs::create_directories(dir);
  std::optional<std::string> hostfile;
  if (plan_.hostfile || plan_.hosts) {  // the hosts that remain, one line each
    std::string text;
    for (const Host& h : hosts_) text += str(h.name, " slots=", h.slots, "\n");
    write_file_atomic(dir + "/hostfile", text);
    hostfile = dir + "/hostfile";
  }
  const std::vector<std::string> host_of = rank_hosts(hosts_, world_);
  const std::vector<std::string> cmd = launcher_command(plan_, world_, hostfile, dir, command_);
  if (plan_.max_restarts == 0)  // a plain kiri launch, watched (cmd_launch says why)
    say(join(cmd));
  else
    say(str("attempt ", k, " of ", plan_.max_restarts + 1, ": ", world_, " rank(s): ", join(cmd)));
  std::map<std::string, std::string> env;
  if (plan_.launcher)  // mpirun passes these with -x
    env = {{kLaunchStatusEnv, dir},
           {"OMP_NUM_THREADS", std::to_string(launch_threads(plan_, world_))}};
  const double started = unix_now();
  const AttemptResult a = run_attempt(cmd, env, dir, static_cast<int>(world_), plan_.verbose);
  json rec = {{"attempt", k},           {"ranks", world_},
              {"hosts", host_of},       {"started_at", started},
              {"ended_at", unix_now()}, {"exit_code", a.exit_code},
              {"seconds", a.seconds},   {"wait_gone_s", a.wait_gone_s}};
  const std::string log = folder_ + "/attempts.jsonl";
  if (a.exit_code == 0 && !a.interrupted) {
    say(str("attempt ", k, " finished the run",
            k > 1 ? str(" after ", k - 1, " restart(s)") : std::string()));
    append_line(log, rec);
    return 0;
  }
  const Progress p = read_progress(run_);
  if (a.interrupted) return stopped(k, a, p, rec);
  const Verdict v = judge(a, read_launch_status(dir, static_cast<int>(world_)), host_of);
  // A plain kiri launch whose rank printed an error that is not retried: that line says it all
  // (the summary would print it a second time); attempts.jsonl still has the record.
  const bool quiet = plan_.max_restarts == 0 && !v.retryable;
  record_failure(k, a, v, p, rec, quiet);
  auto stop = [&](const std::string& why, int code) {
    if (!quiet) say(why);
    rec["decision"] = why;
    append_line(log, rec);
    return code;
  };
  if (!v.retryable)
    return stop(str("not retried: the job ended with ", v.kind.empty() ? "an error" : "a " + v.kind,
                    " (exit code ", v.code, "), which a restart would repeat"),
                v.code);
  if (k > plan_.max_restarts)
    return stop(plan_.max_restarts == 0
                    ? std::string("not restarted: no --max-restarts")
                    : str("giving up: ", plan_.max_restarts, " restart(s) used (--max-restarts)"),
                a.exit_code == 0 ? 1 : a.exit_code);
  std::vector<std::string> excluded;
  const int64_t next = exclude_and_resize(v, p, rec, excluded);
  if (next < plan_.min_ranks || next == 0) return stop(rec["decision"].get<std::string>(), 1);
  // The global batch to keep on a smaller world: the checkpoint's, else the first attempt's.
  int64_t global = p.global_batch;
  if (const auto first = run_folder_config(run_); global == 0 && first)
    global = config_global_batch(*first);
  const std::vector<std::string> args =
      restart_command(std::vector<std::string>(plan_.command.begin() + 1, plan_.command.end()),
                      p.checkpoint, next != plan_.n, global);
  command_.assign(plan_.command.begin(), plan_.command.begin() + 1);
  command_.insert(command_.end(), args.begin(), args.end());
  rec["next_ranks"] = next;
  rec["decision"] = str("restart on ", next, " rank(s)");
  append_line(log, rec);
  say(str("restarting on ", next, " rank(s)",
          excluded.empty() ? "" : " without " + join(excluded, ", "),
          p.checkpoint.empty() ? std::string(" from the start (no checkpoint yet)")
                               : str(" from ", p.checkpoint, " (step ", p.checkpoint_step, ")"),
          next != world_ && global > 0 ? str(", keeping the global batch of ", global) : ""));
  world_ = next;
  return std::nullopt;
}

// An attempt whose ranks were asked to save and stop (run_attempt): not a failure, no restart.
int Supervisor::stopped(int k, const AttemptResult& a, const Progress& p, json& rec) const {
  const std::string why = str(
      "attempt ", k, " stopped by a signal after ", secs(a.seconds), " (exit code ", a.exit_code,
      "); latest checkpoint: ", p.checkpoint.empty() ? std::string("none") : p.checkpoint,
      "; not restarted");
  say(why);
  rec.update({{"decision", why}, {"checkpoint", p.checkpoint}});
  append_line(folder_ + "/attempts.jsonl", rec);
  return a.exit_code == 0 ? 1 : a.exit_code;
}

// Logs a failed attempt (what failed, the checkpoint, the steps lost) and adds it to rec.
void Supervisor::record_failure(int k, const AttemptResult& a, const Verdict& v, const Progress& p,
                                json& rec, bool quiet) const {
  json failures = json::array();
  std::vector<std::string> causes;
  for (const RankFailure& f : v.failures) {
    failures.push_back({{"rank", f.rank}, {"host", f.host}, {"cause", f.cause}});
    causes.push_back(str("rank ", f.rank, " (", f.host, ") ", f.cause));
  }
  rec.update({{"failures", failures},
              {"error", v.why},
              {"retryable", v.retryable && !a.interrupted},
              {"checkpoint", p.checkpoint},
              {"checkpoint_step", p.checkpoint_step}});
  if (p.reached) {
    rec["reached_step"] = *p.reached;
    rec["steps_lost"] = std::max<int64_t>(0, *p.reached - p.checkpoint_step);
  }
  if (!quiet)
    say(str("attempt ", k, " failed after ", secs(a.seconds), " (exit code ", a.exit_code,
            "): ", causes.empty() ? v.why : join(causes, "; "), "; ", lost_text(p),
            a.killed_leftovers
                ? str("; ", a.killed_leftovers, " rank(s) outlived the launcher and were killed")
                : std::string()));
}

// A host (with a hostfile) after --max-host-failures failures, a slot (without one) at once;
// then the remaining slots (at most -n) in multiples of tp x pp, unless --auto re-plans.
int64_t Supervisor::exclude_and_resize(const Verdict& v, const Progress& p, json& rec,
                                       std::vector<std::string>& excluded) {
  if (plan_.exclude_failed) {
    std::set<std::string> failed_hosts;
    int failed_slots = 0;
    for (const RankFailure& f : v.failures)
      if (f.host_fault) {
        failed_hosts.insert(f.host);
        ++failed_slots;
      }
    if (plan_.hostfile || plan_.hosts) {
      for (const std::string& h : failed_hosts)
        if (++failures_of_[h] >= plan_.max_host_failures) excluded.push_back(h);
      std::erase_if(hosts_, [&](const Host& h) {
        return std::find(excluded.begin(), excluded.end(), h.name) != excluded.end();
      });
    } else if (failed_slots > 0) {
      hosts_[0].slots -= failed_slots;
      excluded.push_back(str(failed_slots, " slot(s)"));
    }
  }
  rec["excluded"] = excluded;
  int64_t available = 0;
  for (const Host& h : hosts_) available += std::max<int64_t>(h.slots, 0);
  const std::optional<kiri::RunConfig> first = run_folder_config(run_);
  const int64_t unit = auto_layout_            ? 1
                       : !p.checkpoint.empty() ? p.tp * p.pp
                       : first                 ? first->parallel.tp * first->parallel.pp
                                               : run_.parallel.tp * run_.parallel.pp;
  const int64_t next = std::min(available, plan_.n) / unit * unit;
  if (next < plan_.min_ranks || next == 0)
    rec["decision"] =
        str("cannot restart: ", available, " slot(s) remain",
            excluded.empty() ? "" : " (" + join(excluded, ", ") + " excluded)", ", room for ", next,
            " rank(s) in multiples of tp x pp = ", unit, ", below --min-ranks ", plan_.min_ranks);
  return next;
}

}  // namespace

int supervise(const LaunchPlan& plan, const kiri::RunConfig& run) {
  Supervisor s(plan, run);
  return s.run();
}

}  // namespace kiri::launch
