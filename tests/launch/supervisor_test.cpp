// The supervisor's pure parts (launch/supervisor.h): the command of a restart and the
// hostfile's hosts. The supervised runs themselves are kiri's (tests/cli/restart_test.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "kiri/launch/supervisor.h"
#include "temp_dir.h"

namespace {

// The restart's command: --overwrite, --resume and --init-from give way to the checkpoint;
// a smaller world infers dp again and keeps the global batch.
TEST(Restart, TheRestartCommandResumesTheLatestCheckpoint) {
  using kiri::launch::restart_command;
  using V = std::vector<std::string>;
  EXPECT_EQ(restart_command({"c.json", "--overwrite", "--set", "a=1"}, "/r/step_5", false, 0),
            (V{"c.json", "--set", "a=1", "--resume", "/r/step_5"}));
  EXPECT_EQ(restart_command({"--resume", "auto"}, "", false, 0), (V{"--resume", "auto"}));
  EXPECT_EQ(restart_command({"--resume=/x/step_9"}, "", false, 0), (V{"--resume", "/x/step_9"}));
  EXPECT_EQ(restart_command({"--init-from", "m"}, "", false, 0),
            (V{"--init-from", "m", "--overwrite"}));
  EXPECT_EQ(restart_command({"--init-from", "m"}, "/r/step_5", true, 8),
            (V{"--resume", "/r/step_5", "--set", "parallel.dp=0", "--global-batch", "8"}));
  EXPECT_EQ(restart_command({"--auto", "--global-batch", "4"}, "/r/s", true, 8),
            (V{"--auto", "--resume", "/r/s", "--global-batch", "8"}));
}

// Open MPI's form: "name slots=N", '#' comments, a host named once per slot adds up.
TEST(Restart, TheHostfileGivesEachHostItsSlots) {
  const std::string dir = kiri::testing::temp_dir("hostfile");
  std::ofstream(dir + "/h") << "# two hosts\na slots=2\nb\nb\n";
  const auto hosts = kiri::launch::parse_hostfile(dir + "/h");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].slots, 2);  // once per slot
}

}  // namespace
