// kiri's entry point: the only place where an error becomes an exit code.
#include <string>
#include <vector>

#include "kiri/cli/commands.h"

int main(int argc, char** argv) {
  return kiri::cli::run_cli(std::vector<std::string>(argv + 1, argv + argc));
}
