// Non-finite values never reach a checkpoint: a save of non-finite weights is refused, and
// check_finite names the tensor, the element and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kiri/train/trainer.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

TEST(NonFinite, CheckFiniteNamesTheFirstBadElement) {
  Allocator a;
  Tensor t = Tensor::zeros({5}, DType::kF32, Category::kBuffers, a);
  EXPECT_NO_THROW(check_finite(t, "w"));
  t.data<float>()[3] = -INFINITY;
  t.data<float>()[4] = NAN;
  try {
    check_finite(t, "file: tensor w");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint);
    EXPECT_EQ(
        e.message().rfind("file: tensor w holds a non-finite value (-inf) at element 3 of 5", 0),
        0u)
        << e.message();
  }
}

// Synchronous and asynchronous (the staged model is checked) alike.
TEST(NonFinite, ASaveOfNonFiniteWeightsIsRefusedAndWritesNothing) {
  for (const bool async : {false, true}) {
    RunConfig c = byte_test_config(1, 2, 16, 2);
    const fs::path dir = fs::temp_directory_path() / ("kiri_nonfinite_" + std::to_string(getpid()));
    fs::remove_all(dir);
    c.checkpoint.dir = dir.string();
    c.checkpoint.async = async;
    c.train.steps = 1;
    Trainer t(c);
    t.train_step();
    const std::string name = t.optimizer().segments()[1].param->name;
    t.optimizer().weights(1).data<float>()[2] = NAN;
    try {
      t.save_checkpoint();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint);
      EXPECT_EQ(e.message().rfind("refusing to save the checkpoint of step 1: parameter " + name +
                                      " holds a non-finite value (nan) at element 2",
                                  0),
                0u)
          << async << ": " << e.message();
    }
    EXPECT_FALSE(fs::exists(dir / "step_00000001"));
    EXPECT_FALSE(fs::exists(dir / ".step_00000001.tmp"));
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace kiri::train
