// The metrics line's tier view (docs/metrics.md): every category's bytes on the device tier
// (RAM on the CPU backend: the `mem` numbers) and on NVMe, each tier's total, and the
// offload I/O of the step when there was any; the progress line shows the NVMe total and
// the step's swap I/O only when nonzero. The existing keys stay as they were.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/train/metrics.h"

namespace kiri::train {
namespace {

StepMetrics offloaded_step() {
  StepMetrics m;
  m.step = 3;
  m.total_steps = 10;
  m.elapsed_s = 12;
  // RAM: parameters, gradients, staging buffers; NVMe: the optimizer's master, m and v.
  m.mem.current = {1000, 2000, 0, 0, 4096, 8};
  m.mem.allocated = 1000 + 2000 + 4096 + 8;
  m.mem.peak_allocated = 9000;
  m.mem.reserved = 12000;
  m.mem.peak_reserved = 15000;
  m.mem.nvme = {0, 0, int64_t{3} << 30, 0, 0, 0};
  m.offload_read_bytes = int64_t{10} << 20;
  m.offload_written_bytes = int64_t{20} << 20;
  m.offload_wait_s = 0.25;
  return m;
}

TEST(MetricsTiers, EveryCategoryOnEachTierAndTheTotals) {
  const StepMetrics m = offloaded_step();
  const nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  const nlohmann::json& device = j.at("tiers").at("device");
  const nlohmann::json& nvme = j.at("tiers").at("nvme");
  const char* cats[] = {"parameters",  "gradients", "optimizer_states",
                        "activations", "buffers",   "other"};
  for (int i = 0; i < kNumCategories; ++i) {
    EXPECT_EQ(device.at(cats[i]).get<int64_t>(), m.mem.current[i]) << cats[i];
    EXPECT_EQ(nvme.at(cats[i]).get<int64_t>(), m.mem.nvme[i]) << cats[i];
    EXPECT_EQ(j.at("mem").at(cats[i]).get<int64_t>(), m.mem.current[i]) << cats[i];
  }
  EXPECT_EQ(device.at("total").get<int64_t>(), 7104);
  EXPECT_EQ(nvme.at("total").get<int64_t>(), int64_t{3} << 30);
  EXPECT_EQ(device.size(), 7u);  // 6 categories and the total
  EXPECT_EQ(nvme.size(), 7u);
  EXPECT_EQ(j.at("tiers").size(), 2u);
  // The step's swap I/O.
  EXPECT_EQ(j.at("offload").at("read_bytes").get<int64_t>(), 10485760);
  EXPECT_EQ(j.at("offload").at("written_bytes").get<int64_t>(), 20971520);
  EXPECT_DOUBLE_EQ(j.at("offload").at("wait_s").get<double>(), 0.25);
  // `mem` keeps exactly its keys (plot and tests read them).
  std::set<std::string> mem_keys;
  for (auto it = j.at("mem").begin(); it != j.at("mem").end(); ++it) mem_keys.insert(it.key());
  EXPECT_EQ(mem_keys,
            (std::set<std::string>{"activations", "buffers", "gradients", "optimizer_states",
                                   "other", "parameters", "peak", "peak_reserved", "reserved"}));
  EXPECT_EQ(j.at("mem").at("peak").get<int64_t>(), 9000);
  EXPECT_EQ(j.at("mem").at("reserved").get<int64_t>(), 12000);
  EXPECT_EQ(j.at("mem").at("peak_reserved").get<int64_t>(), 15000);
}

TEST(MetricsTiers, WithoutOffloadTheNvmeTierIsZeroAndNoIoIsWritten) {
  StepMetrics m;
  m.mem.current = {64, 64, 128, 0, 16, 0};
  m.mem.allocated = 272;
  const nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j.at("tiers").at("device").at("total").get<int64_t>(), 272);
  EXPECT_EQ(j.at("tiers").at("nvme").at("total").get<int64_t>(), 0);
  EXPECT_EQ(j.at("tiers").at("nvme").at("optimizer_states").get<int64_t>(), 0);
  EXPECT_FALSE(j.contains("offload"));
  const std::string line = progress_line(m);
  EXPECT_EQ(line.find("nvme"), std::string::npos) << line;
  EXPECT_EQ(line.find("| io "), std::string::npos) << line;
}

TEST(MetricsTiers, ProgressLineShowsTheNvmeTotalAndTheStepsIo) {
  const std::string line = progress_line(offloaded_step(), /*verbose=*/true);
  EXPECT_NE(line.find("| mem 6.94 KiB (peak 8.79 KiB) | nvme 3.00 GiB | io r 10.00 MiB w "
                      "20.00 MiB wait 0.25s | elapsed 12s"),
            std::string::npos)
      << line;
  // The short line: the peak and the NVMe total, the I/O left to --verbose and the metrics.
  const std::string short_line = progress_line(offloaded_step());
  EXPECT_NE(short_line.find("| mem 8.79 KiB | nvme 3.00 GiB"), std::string::npos) << short_line;
  EXPECT_EQ(short_line.find("io r"), std::string::npos) << short_line;
  // Any nonzero field writes the offload object.
  StepMetrics w;
  w.offload_wait_s = 0.5;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(metrics_json_line(w)).at("offload").at("wait_s"), 0.5);
}

}  // namespace
}  // namespace kiri::train
