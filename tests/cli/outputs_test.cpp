// No silent loss of a run's outputs, through the binary: every output (metrics, plot,
// trace, the config copy, checkpoints) on a full filesystem ends the run with a named
// I/O error within seconds and leaves the previous checkpoint whole; a second run in a
// folder in use fails at start naming the first, which completes; a lock file left by
// a killed run does not block the next. The full filesystems are tmpfs mounts of a few
// KiB in a private mount namespace (unshare -m: root only; skipped otherwise).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "kiri/train/run_dir.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;

struct Timed {
  Result r;
  double seconds = 0;
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A byte-level model of 2 layers of 32 (a checkpoint of ~420 KiB), checkpoints every 2 steps.
std::string model_args() {
  return " --set data.tokenizer=byte --set model.n_layer=2 --set model.n_embd=32"
         " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
         " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
         " --set checkpoint.every=2 --set checkpoint.keep_last=0";
}

Timed timed_kiri(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t{kiri::testing::run_kiri(args)};
  t.seconds = since(t0);
  return t;
}

// `sh -c script` in a private mount namespace where `mnt` is a fresh tmpfs of size_kb KiB;
// the script's exit status is the result's code. $KIRI is the binary.
Timed in_tmpfs(const std::string& mnt, int size_kb, const std::string& script) {
  fs::create_directories(mnt);
  const std::string cmd = "OMP_NUM_THREADS=1 KIRI=" + std::string(KIRI_BINARY) +
                          " unshare -m sh -c 'mount -t tmpfs -o size=" + std::to_string(size_kb) +
                          "k tmpfs " + mnt + " && " + script + "' 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  Timed t;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return t;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) t.r.output.append(buf, n);
  const int status = pclose(p);
  t.r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  t.seconds = since(t0);
  return t;
}

bool can_mount_tmpfs() {
  static const bool ok = [] {
    const std::string d = kiri::testing::temp_dir("probe");
    return std::system(
               ("unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs " + d + "' >/dev/null 2>&1")
                   .c_str()) == 0;
  }();
  return ok;
}

#define SKIP_WITHOUT_TMPFS() \
  if (!can_mount_tmpfs())    \
  GTEST_SKIP() << "making a full filesystem needs root and a mount namespace (unshare -m)"

// Runs kiri (args) in the full filesystem at mnt (filled first unless fill is false),
// then copies what it holds to out (the mount ends with the namespace).
Timed kiri_on_full(const std::string& mnt, int size_kb, bool fill, const std::string& args,
                   const std::string& out) {
  fs::create_directories(out);
  return in_tmpfs(
      mnt, size_kb,
      std::string(fill ? "dd if=/dev/zero of=" + mnt + "/fill bs=4k 2>/dev/null; " : "") +
          "$KIRI " + args + "; rc=$?; cp -a " + mnt + "/. " + out + "/; exit $rc");
}

bool has(const Result& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every committed step directory under root holds state.json, the model and the
// optimizer file; returns their steps.
std::vector<int64_t> complete_checkpoints(const std::string& root) {
  std::vector<int64_t> steps;
  for (const std::string& name : names_in(root)) {
    if (name.rfind("step_", 0) != 0) continue;
    const fs::path d = fs::path(root) / name;
    EXPECT_TRUE(fs::is_regular_file(d / "state.json")) << d;
    EXPECT_GT(fs::file_size(d / "model.safetensors"), 100000u) << d;
    EXPECT_GT(fs::file_size(d / "optimizer-00000-of-00001.safetensors"), 200000u) << d;
    steps.push_back(std::stoll(name.substr(5)));
  }
  return steps;
}

TEST(Outputs, MetricsOnDevFullStopTheRunAtTheFirstStep) {
  const std::string dir = kiri::testing::temp_dir("devfull");
  const Timed t = timed_kiri("train" + model_args() + " --set train.steps=5 --set run.dir=" + dir +
                             " --set log.metrics=/dev/full --set log.plot=" + dir + "/loss.png");
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_TRUE(has(t.r,
                  "kiri: I/O error: cannot write the metrics file '/dev/full' at step 1: No "
                  "space left on device"))
      << t.r.output;
  EXPECT_FALSE(has(t.r, "step      1/5")) << t.r.output;  // stopped before the progress line
  EXPECT_LT(t.seconds, 10);
}

TEST(Outputs, MetricsOnAFullFilesystemStopTheRunKeepingWholeRows) {
  SKIP_WITHOUT_TMPFS();
  const std::string base = kiri::testing::temp_dir("metrics");
  const std::string mnt = base + "/full", out = base + "/out";
  // One 4 KiB page: rows of ~480 bytes fit until one is cut short.
  const Timed t =
      kiri_on_full(mnt, 4, false,
                   "train" + model_args() + " --set train.steps=40 --set run.dir=" + base +
                       "/run --set log.metrics=" + mnt + "/metrics.jsonl",
                   out);
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  std::ifstream in(out + "/metrics.jsonl");
  int64_t rows = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);  // whole rows only: the cut one went
    EXPECT_EQ(j["step"].get<int64_t>(), ++rows);
  }
  EXPECT_GE(rows, 4);
  EXPECT_LT(rows, 40);
  EXPECT_TRUE(has(t.r, "kiri: I/O error: cannot write the metrics file '" + mnt +
                           "/metrics.jsonl' at step " + std::to_string(rows + 1) +
                           ": No space left on device"))
      << t.r.output;
  EXPECT_TRUE(has(t.r, "the run stops rather than train without a record")) << t.r.output;
}

TEST(Outputs, APlotOnAFullFilesystemIsANamedErrorAfterTheRun) {
  SKIP_WITHOUT_TMPFS();
  const std::string base = kiri::testing::temp_dir("plot");
  const std::string mnt = base + "/full", out = base + "/out";
  const Timed t =
      kiri_on_full(mnt, 64, true,
                   "train" + model_args() + " --set train.steps=3 --set run.dir=" + base +
                       "/run --set log.plot=" + mnt + "/loss.png",
                   out);
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  EXPECT_TRUE(has(t.r, "kiri: I/O error: cannot write " + mnt + "/loss.png: ")) << t.r.output;
  EXPECT_TRUE(has(t.r, "No space left on device")) << t.r.output;
  EXPECT_EQ(names_in(out), std::vector<std::string>{"fill"});  // no temporary file left
  EXPECT_EQ(complete_checkpoints(base + "/run/checkpoints"), (std::vector<int64_t>{2, 3}));
}

TEST(Outputs, ATraceOnAFullFilesystemIsANamedError) {
  SKIP_WITHOUT_TMPFS();
  const std::string base = kiri::testing::temp_dir("trace");
  const std::string mnt = base + "/full", out = base + "/out";
  const Timed t =
      kiri_on_full(mnt, 64, true,
                   "train" + model_args() + " --set train.steps=2 --set run.dir=" + base +
                       "/run --set log.trace=" + mnt + "/trace.json",
                   out);
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  EXPECT_TRUE(has(t.r, "kiri: I/O error: cannot write " + mnt + "/trace.json: ")) << t.r.output;
  EXPECT_EQ(names_in(out), std::vector<std::string>{"fill"});
}

TEST(Outputs, TheConfigCopyOnAFullFilesystemStopsTheRunBeforeItsFirstStep) {
  SKIP_WITHOUT_TMPFS();
  const std::string base = kiri::testing::temp_dir("config");
  const std::string mnt = base + "/full", out = base + "/out";
  const Timed t = kiri_on_full(
      mnt, 64, true, "train" + model_args() + " --set train.steps=2 --set run.dir=" + mnt + "/run",
      out);
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  EXPECT_TRUE(has(t.r, "kiri: I/O error: cannot write " + mnt + "/run/config.json: "))
      << t.r.output;
  EXPECT_FALSE(has(t.r, "step      1/")) << t.r.output;
  EXPECT_FALSE(fs::exists(out + "/run/config.json"));
}

TEST(Outputs, ACheckpointOnAFullFilesystemIsANamedErrorAndThePreviousOneStays) {
  SKIP_WITHOUT_TMPFS();
  const std::string base = kiri::testing::temp_dir("ckpt");
  const std::string mnt = base + "/full", out = base + "/out";
  // Room for the step-2 checkpoint (~424 KiB), not for a second one.
  const Timed t =
      kiri_on_full(mnt, 600, false,
                   "train" + model_args() + " --set train.steps=4 --set run.dir=" + base +
                       "/run --set checkpoint.dir=" + mnt + "/ckpt",
                   out);
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  EXPECT_TRUE(has(t.r, "saved checkpoint " + mnt + "/ckpt/step_00000002")) << t.r.output;
  EXPECT_TRUE(has(t.r, "kiri: I/O error: cannot write " + mnt + "/ckpt/.step_00000004.tmp/"))
      << t.r.output;
  EXPECT_TRUE(has(t.r, "No space left on device")) << t.r.output;
  EXPECT_EQ(complete_checkpoints(out + "/ckpt"), std::vector<int64_t>{2});
  std::ifstream latest(out + "/ckpt/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_00000002");
  const Timed e = timed_kiri("eval " + out + "/ckpt --batches 1");
  EXPECT_EQ(e.r.code, 0) << e.r.output;
  EXPECT_TRUE(has(e.r, "(step 2)")) << e.r.output;
}

// kiri train args..., stdout and stderr to `log`; returns its pid.
pid_t spawn_kiri(const std::string& args, const std::string& log) {
  std::vector<std::string> words;
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> argv{const_cast<char*>(KIRI_BINARY)};
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv(KIRI_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits (up to 30 s) until `ready` holds; false when it never did.
template <typename F>
bool wait_for(F&& ready) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!ready()) {
    if (since(t0) > 30) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int64_t lock_holder(const std::string& dir) {
  std::ifstream in(dir + "/.kiri.lock");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.contains("pid") ? j["pid"].get<int64_t>() : 0;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(RunFolderLock, ASecondRunInAFolderInUseFailsAtStartAndTheFirstCompletes) {
  const std::string dir = kiri::testing::temp_dir("two_runs") + "/run";
  const std::string args = "train" + model_args() + " --set train.steps=60 --set run.dir=" + dir;
  const pid_t first = spawn_kiri(args, dir + ".first.log");
  ASSERT_TRUE(wait_for([&] { return lock_holder(dir) == first; }));
  ::kill(first, SIGSTOP);  // it holds the folder for as long as the second one runs
  const Timed second = timed_kiri(args);
  ::kill(first, SIGCONT);
  EXPECT_EQ(second.r.code, 2) << second.r.output;
  EXPECT_LT(second.seconds, 10);
  EXPECT_TRUE(has(second.r, "kiri: config error: " + dir + " is in use by pid " +
                                std::to_string(first) + " on host "))
      << second.r.output;
  EXPECT_TRUE(has(second.r, "(lock file " + dir + "/.kiri.lock); wait for that run to end"))
      << second.r.output;
  EXPECT_FALSE(has(second.r, "step ")) << second.r.output;

  EXPECT_EQ(exit_code_of(first), 0);
  std::vector<int64_t> expect;
  for (int64_t s = 2; s <= 60; s += 2) expect.push_back(s);
  EXPECT_EQ(complete_checkpoints(dir + "/checkpoints"), expect);
  std::ifstream metrics(dir + "/metrics.jsonl");
  int64_t rows = 0;
  for (std::string line; std::getline(metrics, line);)
    EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int64_t>(), ++rows);
  EXPECT_EQ(rows, 60);
  EXPECT_FALSE(fs::exists(dir + "/.kiri.lock"));  // released on exit
}

TEST(RunFolderLock, ALockFileLeftByAKilledRunDoesNotBlockItsResume) {
  const std::string dir = kiri::testing::temp_dir("killed") + "/run";
  const pid_t killed = spawn_kiri(
      "train" + model_args() + " --set train.steps=100000 --set run.dir=" + dir, dir + ".log");
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir + "/checkpoints/latest"); }));
  ::kill(killed, SIGKILL);
  EXPECT_EQ(exit_code_of(killed), 128 + SIGKILL);
  ASSERT_EQ(lock_holder(dir), killed);  // the file stays; the flock went with the process
  // The newest committed step: the kill can land between a save's commit and its `latest`,
  // and --resume auto then takes the newer one (saying so).
  const std::vector<int64_t> saved = complete_checkpoints(dir + "/checkpoints");
  ASSERT_FALSE(saved.empty());
  const int64_t step = saved.back();

  const Timed t = timed_kiri("train" + model_args() + " --resume auto --set run.dir=" + dir +
                             " --set train.steps=" + std::to_string(step + 2));
  EXPECT_EQ(t.r.code, 0) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  EXPECT_TRUE(has(t.r, "the lock file left by pid " + std::to_string(killed) + " on host "))
      << t.r.output;
  EXPECT_TRUE(has(t.r, "is stale (that process holds no lock): taking it over")) << t.r.output;
  EXPECT_TRUE(has(t.r, "at step " + std::to_string(step))) << t.r.output;
  EXPECT_FALSE(fs::exists(dir + "/.kiri.lock"));
}

TEST(RunFolderLock, OverwriteTakesTheLockBeforeRemovingAnything) {
  const std::string dir = kiri::testing::temp_dir("overwrite") + "/run";
  ASSERT_EQ(timed_kiri("train" + model_args() + " --set train.steps=2 --set run.dir=" + dir).r.code,
            0);
  kiri::train::RunLock held;
  held.acquire(dir);
  const Timed t =
      timed_kiri("train" + model_args() + " --set train.steps=2 --overwrite --set run.dir=" + dir);
  EXPECT_EQ(t.r.code, 2) << t.r.output;
  EXPECT_TRUE(has(t.r, dir + " is in use by pid " + std::to_string(::getpid()))) << t.r.output;
  EXPECT_FALSE(has(t.r, "--overwrite: removed")) << t.r.output;
  EXPECT_EQ(complete_checkpoints(dir + "/checkpoints"), std::vector<int64_t>{2});
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
}

TEST(RunFolderLock, EveryRankStopsAtOnceWhenRankZeroCannotLock) {
  const std::string dir = kiri::testing::temp_dir("ranks") + "/run";
  kiri::train::RunLock held;
  held.acquire(dir);
  const Timed t = timed_kiri("launch -n 2 -- train" + model_args() +
                             " --set train.steps=2 --set run.dir=" + dir);
  EXPECT_NE(t.r.code, 0) << t.r.output;
  EXPECT_LT(t.seconds, 10);
  const std::string error = dir + " is in use by pid " + std::to_string(::getpid());
  const size_t first = t.r.output.find(error);
  ASSERT_NE(first, std::string::npos) << t.r.output;
  EXPECT_EQ(t.r.output.find(error, first + 1), std::string::npos) << t.r.output;  // printed once
}

}  // namespace
