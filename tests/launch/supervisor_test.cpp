// The supervisor's pure parts (launch/supervisor.h): the command of a restart and the
// hostfile's hosts. The supervised runs themselves are kiri's (tests/cli/restart_test.cpp).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kiri/launch/launcher.h"
#include "kiri/launch/status.h"
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

// Across hosts the mpirun command keeps Open MPI's one TCP socket per pair of ranks (four hung
// a run whose link was reshaped mid-run, docs/cluster.md); the user's own setting passes
// through the environment.
TEST(Launch, AcrossHostsLeavesTcpLinksToOpenMpi) {
  using kiri::launch::launcher_command;
  const auto has_links = [](const std::vector<std::string>& w) {
    for (const std::string& s : w)
      if (s.find("btl_tcp_links") != std::string::npos) return true;
    return false;
  };
  kiri::launch::LaunchPlan plan;
  plan.n = 4;
  EXPECT_FALSE(has_links(launcher_command(plan, 4, std::string("hosts.txt"), "", {"train"})));
  plan.hosts = "a:2,b:2";
  EXPECT_FALSE(has_links(launcher_command(plan, 4, std::nullopt, "", {"train"})));
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

// A rank that timed out asks whether it still reaches the launcher: a TCP connect to the
// address mpirun gave it. Here a listening socket stands for mpirun; once closed, the port
// refuses; without the variable (not mpirun) the answer is unknown.
TEST(Restart, ARankTellsWhetherItReachesTheLauncher) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string uri =
      "123.0;tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + ";tcp6://[::1]:1";
  ::setenv("OMPI_MCA_orte_hnp_uri", uri.c_str(), 1);
  EXPECT_EQ(kiri::launch::reaches_launcher(2), std::optional<bool>(true));
  ::close(fd);
  EXPECT_EQ(kiri::launch::reaches_launcher(2), std::optional<bool>(false));
  ::unsetenv("OMPI_MCA_orte_hnp_uri");
  EXPECT_EQ(kiri::launch::reaches_launcher(2), std::nullopt);
}

}  // namespace
