// A property the fuzz targets assert beyond "no crash, no sanitizer report": on failure print
// what broke and abort, so libFuzzer saves the input as a crash artifact.
#pragma once

#include <cstdio>
#include <cstdlib>

#define GFSHIM_FUZZ_CHECK(condition, ...)                                                    \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "GFSHIM_FUZZ_CHECK failed: %s (%s:%d)\n  ", #condition, __FILE__, \
                   __LINE__);                                                                \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fprintf(stderr, "\n");                                                            \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
