// The sinks beside metrics.jsonl: scalar_row (the one place a step's record becomes
// scalars), metrics.csv's header and rows, and what a resumed run keeps of metrics.csv.
// tests/cli/loggers_test.cpp trains and reads the files back (TensorBoard with its own reader).
#include "kiri/train/metric_sinks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kiri/base/error.h"
#include "temp_dir.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

StepMetrics step_record(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.total_steps = 9;
  m.loss = 5.25 + 0.1;  // not a short decimal: %.17g must read back to the same double
  m.lr = 3e-4;
  m.grad_norm = 1.5;
  m.tokens_per_s = 1000;
  m.step_s = 0.25;
  m.mfu = 0.125;
  m.mem.current[static_cast<int>(Category::kParameters)] = 4096;
  m.mem.current[static_cast<int>(Category::kActivations)] = 123;
  comm::OpStats a, b;
  a.bytes_sent = 100, a.bytes_received = 40;
  b.bytes_sent = 5, b.bytes_received = 6;
  m.comm = {{"all_reduce", a}, {"broadcast", b}};
  return m;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ScalarRow, NamesAndValuesInTheirFixedOrder) {
  StepMetrics m = step_record(3);
  m.val_loss = 4.5;
  const ScalarRow r = scalar_row(m);
  ASSERT_EQ(r.size(), 7u + kNumCategories + 2);
  EXPECT_EQ(r[0], (ScalarRow::value_type{"loss", 5.25 + 0.1}));
  EXPECT_EQ(r[1], (ScalarRow::value_type{"val_loss", 4.5}));
  EXPECT_EQ(r[7], (ScalarRow::value_type{"mem/parameters", 4096.0}));
  EXPECT_EQ(r[7 + 3], (ScalarRow::value_type{"mem/activations", 123.0}));
  EXPECT_EQ(r[r.size() - 2], (ScalarRow::value_type{"comm/bytes_sent", 105.0}));
  EXPECT_EQ(r[r.size() - 1], (ScalarRow::value_type{"comm/bytes_received", 46.0}));
  EXPECT_FALSE(scalar_row(step_record(1))[1].second.has_value());  // no evaluation: no val_loss
}

TEST(Csv, HeaderThenRowsThatReadBackExactly) {
  EXPECT_EQ(csv_header(),
            "step,loss,val_loss,lr,grad_norm,tokens_per_s,step_s,mfu,mem/parameters,"
            "mem/gradients,mem/optimizer_states,mem/activations,mem/buffers,mem/other,"
            "comm/bytes_sent,comm/bytes_received\n");
  const std::string line = csv_line(step_record(3));
  EXPECT_EQ(line,
            "3,5.3499999999999996,,0.00029999999999999997,1.5,1000,0.25,0.125,4096,0,0,"
            "123,0,0,105,46\n");
  EXPECT_EQ(std::stod("5.3499999999999996"), 5.25 + 0.1);
}

TEST(Csv, AResumeKeepsTheHeaderAndTheRowsThroughItsStep) {
  const std::string path = kiri::testing::temp_dir("csv") + "/metrics.csv";
  std::string whole = csv_header();
  for (int s = 1; s <= 5; ++s) whole += csv_line(step_record(s));
  std::ofstream(path) << whole << "6,5.3";  // a torn last row
  EXPECT_EQ(keep_csv_through(path, 3), 3);  // steps 4, 5 and the torn one
  std::string expect = csv_header();
  for (int s = 1; s <= 3; ++s) expect += csv_line(step_record(s));
  EXPECT_EQ(read(path), expect);
  EXPECT_EQ(keep_csv_through(path, 3), 0);
  EXPECT_EQ(keep_csv_through(path + ".missing", 3), 0);
  EXPECT_FALSE(fs::exists(path + ".missing"));
}

TEST(Csv, AnotherHeaderIsAConfigErrorNamingTheFile) {
  const std::string path = kiri::testing::temp_dir("csvhdr") + "/metrics.csv";
  std::ofstream(path) << "step,loss\n1,5\n";
  ErrorKind kind = ErrorKind::kInternal;
  const std::string msg = kiri::testing::error_of([&] { keep_csv_through(path, 1); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_NE(msg.find("the CSV metrics file '" + path +
                     "' has other columns than this kiri writes (its header: 'step,loss')"),
            std::string::npos)
      << msg;
}

TEST(MetricSinks, RankZeroWritesEveryFileOthersNone) {
  const std::string dir = kiri::testing::temp_dir("sinks");
  RunConfig c = default_run_config();
  c.run.dir = dir + "/run";
  c.log.metrics = c.run.dir + "/metrics.jsonl";
  c.log.csv = true;
  c.log.tensorboard = true;
  {
    MetricSinks other(c, /*write=*/false, 0);
    other.write(step_record(1));
  }
  EXPECT_FALSE(fs::exists(c.run.dir));
  {
    MetricSinks sinks(c, /*write=*/true, 0);
    sinks.write(step_record(1));
    sinks.write(step_record(2));
    sinks.close();
  }
  EXPECT_EQ(read(csv_path(c)), csv_header() + csv_line(step_record(1)) + csv_line(step_record(2)));
  int events = 0;
  for (const auto& e : fs::directory_iterator(c.run.dir))
    events += e.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_EQ(events, 1);
  // A resume at step 1 keeps row 1, appends, and adds a second event file.
  {
    MetricSinks sinks(c, /*write=*/true, 1);
    sinks.write(step_record(2));
  }
  EXPECT_EQ(read(csv_path(c)), csv_header() + csv_line(step_record(1)) + csv_line(step_record(2)));
  events = 0;
  for (const auto& e : fs::directory_iterator(c.run.dir))
    events += e.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_EQ(events, 2);
}

}  // namespace
}  // namespace kiri::train
