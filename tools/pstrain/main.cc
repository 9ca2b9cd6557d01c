// pstrain: trains a LeNet or ResNet through the parameter servers (run it under psrun), or in
// one process with --no-ps. `pstrain --help` lists the flags.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "psrt/error.h"
#include "psrt/version.h"
#include "pstrain/options.h"
#include "pstrain/trainer.h"

int main(int argc, char** argv) {
  psrt::pstrain::TrainOptions options;
  CLI::App app{
      "pstrain: data-parallel training through psrt's parameter servers.\n"
      "Run it under psrun (psrun -n 2 -- pstrain --model lenet), or alone with --no-ps.\n"
      "Prints a JSON summary line on rank 0 at the end."};
  psrt::pstrain::add_train_options(app, options);
  app.set_version_flag("--version", PSRT_VERSION, "print psrt's version and exit");
  CLI11_PARSE(app, argc, argv);
  try {
    psrt::pstrain::train(options);
  } catch (const psrt::Error& e) {
    std::fprintf(stderr, "pstrain: error: %s\n", e.what());
    return e.code() == psrt::ErrorCode::kInvalidArgument || e.code() == psrt::ErrorCode::kNotFound
               ? 2
               : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstrain: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
