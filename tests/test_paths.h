#pragma once

// Where the tests find the checkout, its data folder and the kiri binary. The paths live in
// one generated source (test_paths.cpp.in, configured into the build folder), not in compile
// definitions: a definition naming the clone's path made every test object differ between
// two clones of the same sources, so that ccache missed them all (docs/ci.md).
namespace kiri::test_paths {
const char* source_dir();  // the checkout (CMAKE_SOURCE_DIR)
const char* data_dir();    // KIRI_DATA_DIR: the corpus and tokenizer files
const char* binary();      // the kiri executable of this build
}  // namespace kiri::test_paths

#define KIRI_SOURCE_DIR (::kiri::test_paths::source_dir())
#define KIRI_TEST_DATA_DIR (::kiri::test_paths::data_dir())
#define KIRI_BINARY (::kiri::test_paths::binary())
