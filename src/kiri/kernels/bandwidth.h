#pragma once
// The machine's memory bandwidth: what the bandwidth-bound kernels (AdamW, the gradient's
// zeroing and sum of squares) are measured against (`kiri bench`'s memory_gbps,
// docs/performance.md). CPU-specific code stays behind this front.
#include <cstdint>

namespace kiri::kernels {

// The bytes each of measure_memory_bandwidth's two arrays spans by default: twice the
// last-level cache (both arrays together 4x it, as STREAM asks), at least 256 MiB, at
// most 1/8 of the physical memory.
int64_t default_bandwidth_array_bytes();

// Bytes/s of an in-place triad a[i] = a[i] + s * b[i] over two fp32 arrays of
// `array_bytes` each (0: the default above) on `threads` OpenMP threads, each thread
// touching first and then streaming its own static share: 12 bytes counted per element
// (two reads, one write of a line just read, so the hardware moves no more than is
// counted, as in AdamW's update). Each pass runs it in two forms, over the whole arrays
// (two streams read) and over their two halves at once (four streams read, as a core
// reaches more of the memory's rate with more streams); the best of `repeats` passes of
// either, after one warm-up pass.
double measure_memory_bandwidth(int threads, int64_t array_bytes = 0, int repeats = 5);

}  // namespace kiri::kernels
