// `kiri plan`: the JSON parses and has the documented keys (docs/planner.md); bad input
// exits 2 with the rule named.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace {

using kiri::testing::Result;

Result run(const std::string& args) {
  return kiri::testing::run_kiri("plan " + args);
}

void expect_evaluation(const nlohmann::json& e) {
  for (const char* k :
       {"layout", "stage", "memory", "memory_capacity", "stages", "fits", "flops_per_step",
        "model_flops_per_step", "step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "time"})
    EXPECT_TRUE(e.contains(k)) << k;
  for (const char* k :
       {"parameters", "gradients", "optimizer_states", "activations", "buffers", "total"})
    EXPECT_TRUE(e["memory"].contains(k)) << k;
  for (const char* k : {"dp", "tp", "pp", "zero_stage", "dtype", "activation_checkpointing",
                        "schedule", "virtual_stages", "micro_batch", "global_batch", "microbatches",
                        "seq_len", "sequence_parallel", "activations"})
    EXPECT_TRUE(e["layout"].contains(k)) << k;
  const auto& m = e["memory"];
  EXPECT_DOUBLE_EQ(m["total"].get<double>(),
                   m["parameters"].get<double>() + m["gradients"].get<double>() +
                       m["optimizer_states"].get<double>() + m["activations"].get<double>() +
                       m["buffers"].get<double>());
}

TEST(PlanCommand, LayoutJson) {
  const Result r =
      run("--model gpt2-350M --dp 2 --tp 2 --pp 2 --zero-stage 1 --micro-batch 2 "
          "--global-batch 32 --activation-checkpointing full --schedule interleaved --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  expect_evaluation(j);
  EXPECT_EQ(j["world"], 8);
  EXPECT_EQ(j["layout"]["schedule"], "interleaved");
  EXPECT_EQ(j["layout"]["virtual_stages"], 2);
  EXPECT_EQ(j["layout"]["microbatches"], 8);
  EXPECT_EQ(j["stages"].size(), 2u);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_TRUE(j["model"].contains("params"));
  EXPECT_TRUE(j["cluster"].contains("memory_bytes"));
}

TEST(PlanCommand, PlanJson) {
  const Result r = run("--model gpt2-124M --cluster a100-80g-nvlink --gpus 8 --json --top 5");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* k : {"model", "cluster", "world", "count", "candidates", "recommendation"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["candidates"].size(), 5u);
  for (const auto& c : j["candidates"]) expect_evaluation(c);
  const auto& rec = j["recommendation"];
  EXPECT_EQ(rec["bottleneck"], "compute");
  EXPECT_EQ(rec["cut"], "data_parallel");
  for (const char* k : {"message", "reasons", "min_devices", "layout"})
    EXPECT_TRUE(rec.contains(k)) << k;
  expect_evaluation(rec["layout"]);
}

TEST(PlanCommand, ParamsOnlyHasNullTimes) {
  const Result r = run("--params 7.5e9 --gpus 64 --dp 64 --zero-stage 3 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_TRUE(j["step_time_s"].is_null());
  EXPECT_NEAR(j["memory"]["total"].get<double>() / 1e9, 1.9, 0.05);
}

TEST(PlanCommand, TableAndRecommendation) {
  // One A100 does not hold llama-7B's states: ZeRO would need 2; on one, offload.
  Result r = run("--model llama-7B --gpus 1 --no-offload");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("bottleneck: model_states -> cut: zero"), std::string::npos) << r.output;
  r = run("--model llama-7B --gpus 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("bottleneck: model_states -> cut: offload"), std::string::npos)
      << r.output;
}

// The example: GPT-2 1.5B on this machine's 2 ranks fits no layout without offload;
// the planner recommends the optimizer states on NVMe, with the RAM, the NVMe bytes and the
// predicted slowdown (the assumed disk without a calibration, said so).
TEST(PlanCommand, Gpt2XlOnThisMachineRecommendsOptimizerOffload) {
  const std::string args = "--model gpt2-1.5B --cluster this-machine";
  Result r = kiri::testing::run_kiri("plan " + args + " --no-offload", "KIRI_CALIBRATION=none");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("No layout of 2 devices fits"), std::string::npos) << r.output;
  r = kiri::testing::run_kiri("plan " + args, "KIRI_CALIBRATION=none");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* w :
       {"-> cut: offload", "fits without offload, so offload the optimizer states to NVMe",
        "predicted slowdown", "offload optimizer (step", "assumed: kiri plan --calibrate",
        "  - offload (the optimizer states to NVMe): "})
    EXPECT_NE(r.output.find(w), std::string::npos) << w << ": " << r.output;
  r = kiri::testing::run_kiri("plan " + args + " --json", "KIRI_CALIBRATION=none");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& rec = j["recommendation"];
  EXPECT_EQ(rec["cut"], "offload");
  const nlohmann::json& e = rec["layout"];
  expect_evaluation(e);
  EXPECT_EQ(e["layout"]["offload"]["optimizer"], "nvme");
  EXPECT_EQ(e["layout"]["offload"]["parameters"], "none");
  EXPECT_TRUE(e["fits"].get<bool>());
  EXPECT_LE(e["memory"]["total"].get<double>(), e["memory_capacity"].get<double>());
  EXPECT_EQ(e["memory"]["optimizer_states"].get<double>(), 0);
  // 12 bytes per parameter of the rank's shard (1.56e9 parameters, ZeRO over dp or not).
  const double nvme = e["memory"]["nvme"]["optimizer_states"].get<double>();
  const int shard = e["layout"]["zero_stage"].get<int>() >= 1 ? e["layout"]["dp"].get<int>() : 1;
  EXPECT_GT(nvme, 12 * 1.5e9 / shard / e["layout"]["tp"].get<int>() / e["layout"]["pp"].get<int>());
  EXPECT_EQ(e["time"]["disk_read_bytes"].get<double>(), nvme);
  EXPECT_EQ(e["time"]["disk_write_bytes"].get<double>(), nvme);
  EXPECT_GE(rec["offload_slowdown"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(rec["offload_slowdown"].get<double>(),
                   e["step_time_s"].get<double>() / rec["step_without_offload_s"].get<double>());
  EXPECT_FALSE(j["cluster"]["disk"]["measured"].get<bool>());
}

// Asked for in layout mode, and the disk options: the I/O is bytes over bandwidth.
TEST(PlanCommand, OffloadOptionsInLayoutMode) {
  Result r =
      run("--model gpt2-124M --dp 1 --global-batch 1 --offload-optimizer nvme --json "
          "--cluster this-machine --disk-read-bandwidth 1e9 --disk-write-bandwidth 5e8 "
          "--offload-buffer-count 2 --offload-buffer-mb 12 --offload-block-size 64KiB");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  expect_evaluation(j);
  EXPECT_EQ(j["layout"]["offload"]["buffer_count"], 2);
  EXPECT_EQ(j["layout"]["offload"]["block_size"], 65536);
  EXPECT_DOUBLE_EQ(j["cluster"]["disk"]["read_bandwidth"].get<double>(), 1e9);
  const double bytes = j["memory"]["nvme"]["optimizer_states"].get<double>();
  EXPECT_DOUBLE_EQ(bytes, 12.0 * 124439808);
  // this-machine has 2 devices per node, one of them used here: the whole disk.
  EXPECT_DOUBLE_EQ(j["time"]["disk_read_s"].get<double>(), bytes / 1e9);
  EXPECT_DOUBLE_EQ(j["time"]["disk_write_s"].get<double>(), bytes / 5e8);
  // The pool: 2 buffers of 12 MiB / 12 bytes = 1 Mi elements (whole 64 KiB blocks) x 12.
  r =
      run("--model gpt2-124M --dp 1 --global-batch 1 --json --cluster this-machine "
          "--offload-buffer-count 2 --offload-buffer-mb 12 --offload-block-size 64KiB");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json plain = nlohmann::json::parse(r.output);
  EXPECT_DOUBLE_EQ(j["memory"]["buffers"].get<double>() - plain["memory"]["buffers"].get<double>(),
                   2.0 * 1048576 * 12);
  r = run("--model gpt2-124M --dp 1 --offload-optimizer nvme --cluster this-machine");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(nvme "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offload I/O per step: "), std::string::npos) << r.output;
  for (const char* bad :
       {"--offload-optimizer cpu", "--offload-parameters nvme --zero-stage 2",
        "--offload-parameters nvme --zero-stage 3",
        "--offload-optimizer nvme --offload-buffer-count 1", "--offload-optimizer disk",
        "--offload-optimizer nvme --offload-block-size 1000", "--disk-read-bandwidth 0",
        "--offload-optimizer nvme --no-offload"}) {
    const Result e = run(std::string("--model gpt2-124M --dp 2 ") + bad);
    EXPECT_EQ(e.code, 2) << bad << ": " << e.output;
  }
  r = run("--model gpt2-124M --dp 1 --offload-optimizer cpu");
  EXPECT_NE(r.output.find("same RAM"), std::string::npos) << r.output;
}

// A cluster described by its numbers: the options replace the preset's, the JSON shows
// them (and says they were given), and they move the estimate the way they should.
TEST(PlanCommand, ClusterOptionsReplaceThePresetsNumbers) {
  const std::string layout =
      "--model gpt2-350M --dp 4 --tp 2 --micro-batch 2 --global-batch 64 --json "
      "--cluster a100-80g-nvlink ";
  const Result base = run(layout);
  const Result r = run(layout +
                       "--gpus-per-node 4 --flops 100e12 --flops-fp32 10e12 --efficiency 0.5 "
                       "--intra-bandwidth 50e9 --intra-latency 2e-5 --inter-bandwidth 5e9 "
                       "--inter-latency 3e-5 --memory-bandwidth 1e12 --memory 40GiB");
  ASSERT_EQ(base.code, 0) << base.output;
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json b = nlohmann::json::parse(base.output), j = nlohmann::json::parse(r.output);
  const auto& c = j["cluster"];
  EXPECT_EQ(c["devices_per_node"], 4);
  EXPECT_EQ(c["nodes"], 2);
  EXPECT_DOUBLE_EQ(c["flops_16bit"].get<double>(), 100e12);
  EXPECT_DOUBLE_EQ(c["flops_fp32"].get<double>(), 10e12);
  EXPECT_DOUBLE_EQ(c["efficiency"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(c["intra"]["bandwidth"].get<double>(), 50e9);
  EXPECT_DOUBLE_EQ(c["intra"]["latency"].get<double>(), 2e-5);
  EXPECT_DOUBLE_EQ(c["inter"]["bandwidth"].get<double>(), 5e9);
  EXPECT_DOUBLE_EQ(c["inter"]["latency"].get<double>(), 3e-5);
  EXPECT_DOUBLE_EQ(c["memory_bandwidth"].get<double>(), 1e12);
  EXPECT_DOUBLE_EQ(c["non_gemm"]["logit_s"].get<double>(), 8 / 1e12);  // one-pass loss, bytes
  EXPECT_DOUBLE_EQ(c["non_gemm"]["logit_split_s"].get<double>(), 16 / 1e12);
  EXPECT_DOUBLE_EQ(c["non_gemm"]["optimizer_zeroing_s"].get<double>(), 32 / 1e12);
  EXPECT_DOUBLE_EQ(c["non_gemm"]["gradient_s"].get<double>(), 4 / 1e12);
  EXPECT_DOUBLE_EQ(c["non_gemm"]["zeroing_s"].get<double>(), 4 / 1e12);
  EXPECT_DOUBLE_EQ(c["memory_bytes"].get<double>(), 40.0 * (1 << 30));
  EXPECT_EQ(c["assumed"].size(), b["cluster"]["assumed"].size() + 10);
  // Slower devices and links: slower steps; the dp group (dp·tp = 8) now spans two nodes.
  EXPECT_GT(j["time"]["compute_s"].get<double>(), 3 * b["time"]["compute_s"].get<double>());
  EXPECT_GT(j["time"]["dp_comm_total_s"].get<double>(),
            5 * b["time"]["dp_comm_total_s"].get<double>());
  for (const char* bad : {"--efficiency 1.5", "--flops 0", "--intra-bandwidth -1",
                          "--gpus-per-node 0", "--memory-bandwidth x"}) {
    const Result e = run(layout + bad);
    EXPECT_EQ(e.code, 2) << bad << ": " << e.output;
  }
}

// The LLaMA presets print their published parameter counts; --arch llama gives the same
// shapes by hand; the LLaMA options go only with --arch llama's dimensions.
TEST(PlanCommand, LlamaPresetsAndDimensions) {
  Result r = run("--model llama3-8B --gpus 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("llama3-8B (8.03B parameters) on 8 x a100-80g-nvlink"), std::string::npos)
      << r.output;
  struct Count {
    const char* args;
    double params;
  };
  for (const Count& c : std::vector<Count>{
           {"--model llama3-8B", 8030261248},
           {"--model smollm-135M", 134515008},
           {"--model tinyllama-1.1B", 1100048384},
           {"--model llama-7B", 6738415616},
           {"--model llama-13B", 13015864320},
           {"--model llama-tiny", 125248},
           {"--arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 "
            "--vocab 128256",
            8030261248},
           {"--arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 "
            "--vocab 128256 --tie-word-embeddings",
            8030261248.0 - 128256.0 * 4096},
           {"--arch llama --layers 32 --hidden 4096 --heads 32 --vocab 32000", 6738415616}}) {
    r = run(std::string(c.args) + " --dp 1 --json");
    ASSERT_EQ(r.code, 0) << c.args << ": " << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["model"]["params"].get<double>(), c.params) << c.args;
    EXPECT_EQ(j["model"]["arch"], "llama") << c.args;
  }
  r = run("--model smollm-135M --dp 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json s = nlohmann::json::parse(r.output);
  EXPECT_EQ(s["model"]["kv_heads"], 3);
  EXPECT_EQ(s["model"]["ffn"], 1536);
  EXPECT_EQ(s["model"]["tie_word_embeddings"], true);
  for (const char* bad : {"--model llama3-8B --kv-heads 8",
                          "--layers 2 --hidden 64 --heads 4 --vocab 256 --kv-heads 2",
                          "--layers 2 --hidden 64 --heads 4 --vocab 256 --tie-word-embeddings",
                          "--model llama3-8B --arch llama",
                          "--arch mamba --layers 2 --hidden 64 --heads 4 --vocab 256",
                          "--arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 3 --vocab 256",
                          "--model tinyllama-1.1B --tp 8"}) {
    r = run(bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
  }
  r = run("--model tinyllama-1.1B --tp 8");
  EXPECT_NE(r.output.find("--tp = 8 must divide --kv-heads = 4 (--heads = 32)"), std::string::npos)
      << r.output;
}

TEST(PlanCommand, BadInputIsAConfigError) {
  for (const char* args :
       {"--model gpt2-124M --tp 5", "--model nope", "--cluster tpu", "--dp 2 --global-batch 3",
        "--dtype fp8 --dp 1", "--gpus 0", "--model gpt2-124M --params 1e9",
        "--layers 4 --hidden 64", "--dp 2 --gpus 4", "--activation-checkpointing full",
        "--frobnicate 1"}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
  }
  const Result r = run("--model gpt2-124M --tp 5");
  EXPECT_NE(r.output.find("--tp = 5 must divide --heads = 12"), std::string::npos) << r.output;
}

// --recompute-modules: selective's modules (the config's parser and messages, in kiri plan's
// words); each module kept less than core_attn alone, all three least; refused without
// selective or with an unknown module.
TEST(PlanCommand, RecomputeModules) {
  const std::string layout =
      "--model gpt2-124M --dp 1 --tp 2 --micro-batch 2 --global-batch 2 "
      "--dtype fp32 --json --activation-checkpointing ";
  auto activations = [&](const std::string& rest) {
    const Result r = run(layout + rest);
    EXPECT_EQ(r.code, 0) << rest << ": " << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    return j["memory"]["activations"].get<double>();
  };
  const double none = activations("none"), selective = activations("selective");
  EXPECT_EQ(activations("selective --recompute-modules core_attn"), selective);
  const double ln = activations("selective --recompute-modules layernorm");
  const double all = activations("selective --recompute-modules core_attn,layernorm,mlp_act");
  EXPECT_LT(selective, none);
  EXPECT_LT(ln, none);
  EXPECT_LT(all, std::min(selective, ln));
  const Result j = run(layout + "selective --recompute-modules mlp_act,core_attn");
  EXPECT_EQ(nlohmann::json::parse(j.output)["layout"]["recompute_modules"], "core_attn,mlp_act");
  Result r = run(layout + "none --recompute-modules layernorm");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--recompute-modules (1 given) needs --activation-checkpointing = "
                          "selective"),
            std::string::npos)
      << r.output;
  r = run(layout + "selective --recompute-modules core_attn,mlp");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--recompute-modules: unknown module 'mlp' (valid: core_attn, "
                          "layernorm, mlp_act)"),
            std::string::npos)
      << r.output;
}

}  // namespace

// scripts/cluster.sh's namespace cluster in one line: hosts, ranks per host, one link per
// host at tc's rate, the machine's 2 cores shared by every rank (docs/planner.md, "A cluster
// of hosts"); and the new options' named errors.
TEST(PlanCommand, DescribesANamespaceClusterInOneLine) {
  const std::string tiny =
      "--set data.tokenizer=byte --set model.n_layer=4 --set model.n_head=4 "
      "--set model.n_embd=256 --set model.block_size=128 --set train.seq_len=128 "
      "--set train.micro_batch=2 --global-batch 8 --set parallel.dp=4 "
      "--set parallel.zero_stage=3 --cluster this-machine ";
  const std::string hosts =
      "--hosts 2 --ranks-per-host 2 --nics-per-node 1 --inter-bandwidth 1gbit "
      "--inter-latency 100us --shared-cores 2 --step-overhead 5ms ";
  const Result r = run(tiny + hosts + "--json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const auto& c = j["cluster"];
  EXPECT_EQ(c["devices_per_node"], 2);
  EXPECT_EQ(c["nodes"], 2);
  EXPECT_EQ(c["nics_per_node"], 1);
  EXPECT_EQ(c["shared_cores"], 2);
  EXPECT_DOUBLE_EQ(c["inter"]["bandwidth"].get<double>(), 125e6);
  EXPECT_DOUBLE_EQ(c["inter"]["latency"].get<double>(), 1e-4);
  EXPECT_DOUBLE_EQ(c["step_overhead_s"].get<double>(), 5e-3);
  EXPECT_DOUBLE_EQ(j["time"]["compute_slowdown"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(j["time"]["overhead_s"].get<double>(), 5e-3);
  EXPECT_EQ(j["layout"]["attention"], "flash");
  EXPECT_EQ(j["layout"]["grad_dtype"], "fp32");
  // The same with --nodes / --gpus-per-node; either pair, not both.
  const Result same = run(tiny +
                          "--nodes 2 --gpus-per-node 2 --nics-per-node 1 --inter-bandwidth 125e6 "
                          "--inter-latency 1e-4 --shared-cores 2 --step-overhead 0.005 --json");
  ASSERT_EQ(same.code, 0) << same.output;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(same.output)["step_time_s"].get<double>(),
                   j["step_time_s"].get<double>());
  for (const std::string bad :
       {"--hosts 2 --nodes 2", "--ranks-per-host 2 --gpus-per-node 2", "--inter-bandwidth 1gbits",
        "--inter-latency 5parsecs", "--nics-per-node 0", "--shared-cores 0", "--attention standard",
        "--grad-dtype bf16"}) {
    const Result e = run(tiny + bad);
    EXPECT_EQ(e.code, 2) << bad << ": " << e.output;
  }
  const Result e = run(tiny + "--inter-bandwidth 1gbits");
  EXPECT_NE(e.output.find("--inter-bandwidth"), std::string::npos) << e.output;
  // The paper form's attention is said in the output.
  const Result paper =
      run("--model gpt2-350M --dp 2 --micro-batch 2 --global-batch 8 --activations paper "
          "--attention flash --grad-dtype fp32");
  ASSERT_EQ(paper.code, 0) << paper.output;
  EXPECT_NE(paper.output.find("paper form, flash attention"), std::string::npos) << paper.output;
  const Result table = run("--model gpt2-124M --gpus 2 --activations paper --top 1");
  ASSERT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("paper activations, standard attention"), std::string::npos)
      << table.output;
}
