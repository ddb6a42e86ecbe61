// hami-scheduler (also installed as `scheduler`, HAMi's entry point): the composition root. Everything is
// built in cmd/app.cc; main only hands over argv.
#include <iostream>
#include <string>
#include <vector>

#include "cmd/app.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return hami::cmd::RunProgram(argc > 0 ? argv[0] : "", args, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "hami-scheduler: stopped: " << e.what() << "\n";
    return hami::cmd::kExitFailure;
  }
}
