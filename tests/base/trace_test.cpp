// The Tracer: Chrome trace JSON, spans, counters, busy() arithmetic.
#include "kiri/base/trace.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"

namespace kiri {
namespace {

using json = nlohmann::json;
using Lane = Tracer::Lane;

// The "X" and "C" events of a trace, in recorded order.
std::vector<json> events_of(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") != "M") out.push_back(e);
  return out;
}

TEST(Tracer, JsonIsAChromeTraceWithMetadataSpansAndCounters) {
  Tracer t(3);
  t.complete("forward", "compute", 10, 90);
  t.complete("all_reduce", "comm", 50, 100, R"({"bytes":4096,"group":"dp","seq":1})", Lane::kComm);
  t.counter("loss_scale", 120, 65536);
  t.complete("step 1", "step", 0, 200, "", Lane::kStep);
  EXPECT_EQ(t.size(), 4u);

  const json trace = json::parse(t.json());  // throws when malformed
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_EQ(trace.at("otherData").at("rank"), 3);

  // Metadata: the process is "rank 3", the lanes are named.
  std::map<int, std::string> lanes;
  std::string process;
  for (const json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("ph") != "M") continue;
    if (e.at("name") == "process_name") process = e.at("args").at("name");
    if (e.at("name") == "thread_name") lanes[e.at("tid")] = e.at("args").at("name");
  }
  EXPECT_EQ(process, "rank 3");
  EXPECT_EQ(lanes[0], "compute");
  EXPECT_EQ(lanes[1], "comm");
  EXPECT_EQ(lanes[2], "step");

  const std::vector<json> ev = events_of(trace);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].at("ph"), "X");
  EXPECT_EQ(ev[0].at("name"), "forward");
  EXPECT_EQ(ev[0].at("cat"), "compute");
  EXPECT_EQ(ev[0].at("tid"), 0);
  EXPECT_EQ(ev[0].at("ts"), 10);
  EXPECT_EQ(ev[0].at("dur"), 90);
  EXPECT_FALSE(ev[0].contains("args"));

  EXPECT_EQ(ev[1].at("name"), "all_reduce");
  EXPECT_EQ(ev[1].at("tid"), 1);
  EXPECT_EQ(ev[1].at("args").at("bytes"), 4096);
  EXPECT_EQ(ev[1].at("args").at("group"), "dp");
  EXPECT_EQ(ev[1].at("args").at("seq"), 1);

  EXPECT_EQ(ev[2].at("ph"), "C");
  EXPECT_EQ(ev[2].at("ts"), 120);
  EXPECT_EQ(ev[2].at("args").at("loss_scale"), 65536.0);

  EXPECT_EQ(ev[3].at("tid"), 2);
  EXPECT_EQ(ev[3].at("dur"), 200);
}

TEST(Tracer, EmptyTraceIsValidJson) {
  Tracer t(0);
  const json trace = json::parse(t.json());
  EXPECT_TRUE(events_of(trace).empty());
  EXPECT_FALSE(trace.at("traceEvents").empty());  // the metadata
}

TEST(Tracer, NamesAreEscapedAndCountersOfNanAreNull) {
  Tracer t(0);
  t.complete("say \"hi\"\\\n\t\x01 é", "c\"at", 0, 1);
  t.counter("nan", 5, std::nan(""));
  const std::vector<json> ev = events_of(json::parse(t.json()));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].at("name"), "say \"hi\"\\\n\t\x01 é");
  EXPECT_EQ(ev[0].at("cat"), "c\"at");
  EXPECT_TRUE(ev[1].at("args").at("nan").is_null());
  EXPECT_EQ(Tracer::quote("a\"b"), "\"a\\\"b\"");
}

TEST(Tracer, NegativeDurationsAreClampedToZero) {
  Tracer t(0);
  t.complete("x", "compute", 10, -5);
  EXPECT_EQ(events_of(json::parse(t.json()))[0].at("dur"), 0);
}

TEST(TracerSpan, RecordsItsLifetimeOnDestruction) {
  Tracer t(1);
  const int64_t before = t.now_us();
  {
    Tracer::Span s(&t, "backward", "compute");
    s.set_args(R"({"layer":2})");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(t.size(), 0u);  // not until the span ends
  }
  { Tracer::Span s(&t, "recv", "comm", Lane::kComm); }
  const int64_t after = t.now_us();
  const std::vector<json> ev = events_of(json::parse(t.json()));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].at("name"), "backward");
  EXPECT_EQ(ev[0].at("tid"), 0);
  EXPECT_EQ(ev[0].at("args").at("layer"), 2);
  EXPECT_GE(ev[0].at("ts").get<int64_t>(), before);
  EXPECT_GE(ev[0].at("dur").get<int64_t>(), 2000);
  EXPECT_LE(ev[0].at("ts").get<int64_t>() + ev[0].at("dur").get<int64_t>(), after);
  EXPECT_EQ(ev[1].at("name"), "recv");
  EXPECT_EQ(ev[1].at("tid"), 1);
}

TEST(TracerSpan, NullOrPausedTracerRecordsNothing) {
  {
    Tracer::Span s(nullptr, "forward", "compute");
    s.set_args("{}");
  }
  Tracer t(0);
  t.set_enabled(false);
  EXPECT_FALSE(t.enabled());
  { Tracer::Span s(&t, "forward", "compute"); }
  t.complete("x", "compute", 0, 1);
  t.counter("c", 0, 1);
  EXPECT_EQ(t.size(), 0u);
  t.set_enabled(true);
  { Tracer::Span s(&t, "forward", "compute"); }
  EXPECT_EQ(t.size(), 1u);
  t.clear();
  EXPECT_EQ(t.size(), 0u);
}

TEST(Tracer, SharedEpochSharesTheClock) {
  const auto epoch = Tracer::Clock::now();
  Tracer a(0, epoch), b(1, epoch);
  const int64_t ta = a.now_us(), tb = b.now_us();
  EXPECT_GE(tb, ta);
  EXPECT_LT(tb - ta, 1'000'000);
  EXPECT_EQ(a.epoch(), b.epoch());
  EXPECT_GE(Tracer(2).now_us(), 0);
}

TEST(TracerBusy, ComputeCommAndIdleOverAWindow) {
  Tracer t(0);
  // compute [0,30) and [20,50) overlap: 50 of compute.
  t.complete("forward", "compute", 0, 30);
  t.complete("forward", "compute", 20, 30);
  // comm [40,70): 10 under compute, 20 exposed.
  t.complete("all_reduce", "comm", 40, 30, "", Lane::kComm);
  // gap [70,80) idle; compute [80,90).
  t.complete("optimizer", "compute", 80, 10);
  // comm [85,95) and [90,100): 5 under compute, 10 exposed.
  t.complete("send", "comm", 85, 10, "", Lane::kComm);
  t.complete("recv", "comm", 90, 10, "", Lane::kComm);
  // A step span and a counter do not count.
  t.complete("step", "step", 0, 120, "", Lane::kStep);
  t.counter("mem", 10, 1);

  const Tracer::BusyStats s = t.busy(0, 120);
  EXPECT_DOUBLE_EQ(s.span_us, 120);
  EXPECT_DOUBLE_EQ(s.compute_us, 60);
  EXPECT_DOUBLE_EQ(s.comm_us, 30);
  EXPECT_DOUBLE_EQ(s.idle_us, 30);  // [70,80) and [100,120)
  EXPECT_DOUBLE_EQ(s.compute_us + s.comm_us + s.idle_us, s.span_us);
}

TEST(TracerBusy, SpansAreClippedToTheWindow) {
  Tracer t(0);
  t.complete("forward", "compute", 0, 100);
  t.complete("all_reduce", "comm", 90, 40, "", Lane::kComm);
  t.complete("backward", "compute", 200, 50);
  // [95,205): compute [95,100) and [200,205), comm [100,130), idle [130,200).
  const Tracer::BusyStats s = t.busy(95, 205);
  EXPECT_DOUBLE_EQ(s.span_us, 110);
  EXPECT_DOUBLE_EQ(s.compute_us, 10);
  EXPECT_DOUBLE_EQ(s.comm_us, 30);
  EXPECT_DOUBLE_EQ(s.idle_us, 70);
}

TEST(TracerBusy, EmptyAndInvertedWindows) {
  Tracer t(0);
  Tracer::BusyStats s = t.busy(0, 50);
  EXPECT_DOUBLE_EQ(s.idle_us, 50);
  EXPECT_DOUBLE_EQ(s.span_us, 50);
  t.complete("forward", "compute", 0, 10);
  s = t.busy(20, 10);
  EXPECT_DOUBLE_EQ(s.span_us, 0);
  EXPECT_DOUBLE_EQ(s.compute_us, 0);
  EXPECT_DOUBLE_EQ(s.idle_us, 0);
  // Zero-length spans and spans touching the window's edge add nothing.
  t.complete("tick", "compute", 15, 0);
  s = t.busy(10, 20);
  EXPECT_DOUBLE_EQ(s.compute_us, 0);
  EXPECT_DOUBLE_EQ(s.idle_us, 10);
}

TEST(Tracer, WriteIsAtomicAndReadsBack) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiri_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Tracer t(5);
  t.complete("forward", "compute", 1, 2);
  const std::string path = (dir / "trace.rank5.json").string();
  t.write(path);
  const json trace = json::parse(read_file(path));
  EXPECT_EQ(events_of(trace).size(), 1u);
  EXPECT_EQ(trace.at("otherData").at("rank"), 5);
  // Only the file: no temporary left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  EXPECT_THROW(t.write((dir / "missing" / "trace.json").string()), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiri
