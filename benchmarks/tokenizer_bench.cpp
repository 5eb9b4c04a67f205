// Tokenizer throughput: encodes a file of NUL-separated documents with one of
// kiri's tokenizers, each document on its own (`docs`, THREADS documents at a
// time) or all joined into one text (`whole`, split by encode()), and prints one JSON line: bytes,
// tokens, the best of REPEAT runs (each from a cold cache), MB/s and MB/s per thread.
// benchmarks/tokenizer_throughput.sh runs it beside the JavaScript encoders.
//   tokenizer_bench TOKENIZER ASSETS_DIR DOCS_FILE THREADS docs|whole [REPEAT]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"
#include "kiri/data/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: tokenizer_bench TOKENIZER ASSETS_DIR DOCS_FILE THREADS docs|whole "
                 "[REPEAT]\n");
    return 2;
  }
  try {
    const std::string mode = argv[5];
    const int threads = std::atoi(argv[4]), repeat = argc > 6 ? std::atoi(argv[6]) : 3;
    if (threads < 1 || repeat < 1 || (mode != "docs" && mode != "whole"))
      KIRI_RAISE(kInvalidArgument, "bad THREADS, REPEAT or mode");
    omp_set_num_threads(threads);
    std::ifstream in(argv[3], std::ios::binary);
    if (!in) KIRI_RAISE(kIo, "cannot read ", argv[3]);
    const std::string all((std::istreambuf_iterator<char>(in)), {});
    std::vector<std::string> docs;
    if (mode == "whole") {
      docs.push_back(all);
      for (char& c : docs[0])
        if (c == '\0') c = '\n';  // one byte for one: the same size as the documents
    } else {
      for (size_t pos = 0; pos <= all.size();) {
        size_t end = all.find('\0', pos);
        if (end == std::string::npos) end = all.size();
        docs.push_back(all.substr(pos, end - pos));
        pos = end + 1;
      }
    }
    double best = 1e30;
    size_t tokens = 0;
    std::string name;
    for (int r = 0; r < repeat; ++r) {
      // Loaded afresh each run (not timed), so no run starts with a warm cache.
      const auto tok = kiri::data::make_tokenizer(argv[1], argv[2]);
      name = tok->name();
      kiri::Timer timer;
      size_t n = 0;
      // Documents are encoded side by side, one a thread (as a corpus is prepared);
      // one whole text is split by encode() itself.
      const auto count = static_cast<int64_t>(docs.size());
#pragma omp parallel for schedule(dynamic) reduction(+ : n) if (count > 1)
      for (int64_t d = 0; d < count; ++d) n += tok->encode(docs[d]).size();
      best = std::min(best, timer.seconds());
      tokens = n;
    }
    const double mb = static_cast<double>(all.size()) / 1e6;
    std::printf(
        "{\"encoder\": \"kiri\", \"tokenizer\": \"%s\", \"mode\": \"%s\", \"threads\": %d, "
        "\"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, "
        "\"mb_per_s_per_thread\": %.2f}\n",
        name.c_str(), mode.c_str(), threads, docs.size(), all.size(), tokens, best, mb / best,
        mb / best / threads);
    return 0;
  } catch (const kiri::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
