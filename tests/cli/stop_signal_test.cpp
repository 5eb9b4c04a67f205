// Stopping as schedulers ask (base/stop_signal.h, docs/cli.md "Stopping"): a SIGTERM, SIGINT
// or SIGUSR1 saves a checkpoint at the next step boundary and exits 128 + the signal, naming
// the checkpoint; --resume auto then finishes the run with the uninterrupted run's model bit
// for bit, and says so (exit 0) when the run has finished. Under kiri launch, a Ctrl-C (SIGINT
// to the terminal's process group) reaches the supervisor alone, which relays it to every rank.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "cli/background_job.h"
#include "cli/run_kiri.h"

namespace {

using kiri::testing::Background;
using kiri::testing::committed_step;
using kiri::testing::kiri_cmd;
using kiri::testing::last_step;
using kiri::testing::read_text;
using kiri::testing::Result;
using kiri::testing::run_kiri;
using kiri::testing::temp_dir;
using kiri::testing::wait_until;

constexpr int kSteps = 400;
// Rank 0 waits before step 11 until the signal arrives (train/faults.h): a tiny step takes a
// millisecond, and on a loaded machine a signal sent on seeing step 10 landed after step 400.
// Sent on its line, the signal cannot land inside step 10's own check.
const std::string kWaitAtStep10 = "KIRI_FAULT=stopwait:0:10 ";
const std::string kWaiting = "KIRI_FAULT: rank 0 waits for a stop signal before step 11";

// A tiny byte-level run in `dir`: 2 heads, a synchronous checkpoint every 100 steps.
std::string tiny_run(const std::string& dir) {
  return " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
         " --set model.n_head=2 --set model.block_size=32 --set train.seq_len=32"
         " --set train.micro_batch=2 --set train.warmup=1 --set train.eval_every=0"
         " --set train.eval_batches=1 --set checkpoint.every=100 --set checkpoint.keep_last=0"
         " --set log.every=1000 --set train.steps=" +
         std::to_string(kSteps) + " --set run.dir=" + dir;
}

std::string step_dir(const std::string& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return run + "/checkpoints/" + name;
}

// The final checkpoints of `run` and `ref` hold the same model, optimizer and data position.
void expect_same_final_model(const std::string& run, const std::string& ref) {
  for (const std::string f : {"model.safetensors", "optimizer-00000-of-00001.safetensors"})
    EXPECT_EQ(read_text(step_dir(run, kSteps) + "/" + f),
              read_text(step_dir(ref, kSteps) + "/" + f))
        << f;
  const auto a = nlohmann::json::parse(read_text(step_dir(ref, kSteps) + "/state.json"));
  const auto b = nlohmann::json::parse(read_text(step_dir(run, kSteps) + "/state.json"));
  EXPECT_EQ(a["data"], b["data"]);
}

// The step the stop line names ("stopped by SIG... after step N of ..."), or -1.
int64_t stopped_step(const std::string& out, const std::string& signal) {
  const std::string key = "stopped by " + signal + " after step ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::stoll(out.substr(at + key.size()));
}

TEST(StopSignal, SigtermSavesAtTheNextStepAndResumesToTheUninterruptedModel) {
  const std::string base = temp_dir("sigterm"), ref = base + "/ref", run = base + "/run";
  const Result r = run_kiri("train" + tiny_run(ref));
  ASSERT_EQ(r.code, 0) << r.output;
  Background job(kWaitAtStep10 + kiri_cmd("train" + tiny_run(run)), base + "/run.log");
  ASSERT_TRUE(wait_until([&] { return job.output().find(kWaiting) != std::string::npos; }, 60))
      << job.output();
  ASSERT_EQ(::kill(job.pid, SIGTERM), 0);
  const int code = job.wait(60);
  const std::string out = job.output();
  ASSERT_EQ(code, 128 + SIGTERM) << out;
  const int64_t step = stopped_step(out, "SIGTERM");
  ASSERT_EQ(step, 11) << out;  // the step it waited before, finished
  EXPECT_NE(out.find("stop requested: saving a checkpoint at the next step boundary"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" of " + std::to_string(kSteps) + ": saved " + step_dir(run, step) +
                     "; continue with the same command and --resume auto"),
            std::string::npos)
      << out;
  EXPECT_EQ(committed_step(run + "/checkpoints"), step);
  EXPECT_EQ(last_step(run + "/metrics.jsonl"), step);
  // Resumed, it finishes with the uninterrupted run's model.
  const Result resumed = run_kiri("train --resume auto" + tiny_run(run));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + step_dir(run, step) + " at step " +
                                std::to_string(step)),
            std::string::npos)
      << resumed.output;
  expect_same_final_model(run, ref);
  // Once more: the run has finished, which --resume auto says, exiting 0.
  const Result again = run_kiri("train --resume auto" + tiny_run(run));
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(
      again.output.find("the run has finished: " + step_dir(run, kSteps) + " is step " +
                        std::to_string(kSteps) + " and train.steps is " + std::to_string(kSteps)),
      std::string::npos)
      << again.output;
}

// A second signal stops at once: two SIGTERMs 20 ms apart inside one step of a model whose
// step takes a few hundred milliseconds. The process dies of the signal, saying so, and saves
// nothing (the last checkpoint is the one before).
TEST(StopSignal, ASecondSignalStopsAtOnce) {
  const std::string base = temp_dir("sigterm2"), run = base + "/run";
  Background job(kiri_cmd("train" + tiny_run(run) +
                          " --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4"
                          " --set model.block_size=128 --set train.seq_len=128"
                          " --set train.micro_batch=16 --set log.every=1"),
                 base + "/run.log");
  ASSERT_TRUE(wait_until([&] { return last_step(run + "/metrics.jsonl") >= 2; }, 120))
      << job.output();
  ASSERT_EQ(::kill(job.pid, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(job.pid, SIGTERM), 0);
  const int code = job.wait(60);
  const std::string out = job.output();
  EXPECT_EQ(code, 128 + SIGTERM) << out;
  EXPECT_NE(out.find("a second stop signal: stopping at once"), std::string::npos) << out;
  EXPECT_EQ(out.find("stopped by SIGTERM after step"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/latest")) << out;  // none: every 100
}

// A Ctrl-C at the terminal: SIGINT to the whole foreground process group, here the test's
// group of the launcher. The supervisor relays it once, as SIGUSR1 that mpirun forwards; the
// two ranks save the same step together and stop; resumed, the run ends with the model of an
// uninterrupted one.
TEST(StopSignal, CtrlCUnderLaunchStopsEveryRankAtOneCheckpoint) {
  const std::string base = temp_dir("sigint"), ref = base + "/ref", run = base + "/run";
  const std::string layout = " --set parallel.dp=2";
  const Result r = run_kiri("launch -n 2 --threads 1 -- train" + tiny_run(ref) + layout);
  ASSERT_EQ(r.code, 0) << r.output;
  Background job(
      kWaitAtStep10 + kiri_cmd("launch -n 2 --threads 1 -- train" + tiny_run(run) + layout),
      base + "/run.log");
  ASSERT_TRUE(wait_until([&] { return job.output().find(kWaiting) != std::string::npos; }, 60))
      << job.output();
  ASSERT_EQ(::kill(-job.pid, SIGINT), 0);
  const int code = job.wait(60);
  const std::string out = job.output();
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("[kiri] launch: stop requested"), std::string::npos) << out;
  const int64_t step = stopped_step(out, "SIGUSR1");
  ASSERT_EQ(step, 11) << out;
  EXPECT_EQ(committed_step(run + "/checkpoints"), step);
  const Result resumed =
      run_kiri("launch -n 2 --threads 1 -- train --resume auto" + tiny_run(run) + layout);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  expect_same_final_model(run, ref);
}

}  // namespace

namespace {

// kiri launch checks a train command's config before any rank starts: a config error (an
// unknown key, a layout the world cannot hold) is kiri's one line and exit 2, with no line of
// mpirun's (its MPI_ABORT banner, "Primary job terminated") and no rank started.
TEST(LaunchConfigError, IsOneLineAndExitTwoBeforeAnyRankStarts) {
  const std::string base = temp_dir("launch-config-error");
  struct Case {
    std::string sets, says;
  };
  for (const Case& c :
       {Case{" --set model.n_layr=2", "unknown key 'model.n_layr'; did you mean model.n_layer?"},
        Case{" --set parallel.tp=2 --set parallel.pp=2 --set model.n_layer=2",
             "cannot infer parallel.dp: world 2 is not a multiple of tp 2 x pp 2"}}) {
    const Result r =
        run_kiri("launch -n 2 --threads 1 -- train" + tiny_run(base + "/run") + c.sets);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("kiri: config error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    for (const char* mpi : {"MPI_ABORT", "mpirun", "Primary job", "attempt 1"})
      EXPECT_EQ(r.output.find(mpi), std::string::npos) << mpi << " in:\n" << r.output;
    size_t lines = 0;
    for (char ch : r.output) lines += ch == '\n';
    EXPECT_EQ(lines, 1u) << r.output;
    EXPECT_FALSE(std::filesystem::exists(base + "/run/launch")) << "a rank was started";
  }
}

}  // namespace
