#pragma once
// CTest labels from the tests' own declarations (tests/CMakeLists.txt reads them at configure time, so a test keeps
// its label when it is renamed or moved):
//   - a test file whose first lines hold the comment "// CTest label: server" (or "model") gives that label to every
//     suite it declares, wherever else the suite has tests (a suite may carry one label only);
//   - a test declared with KVSIEVE_SLOW_TEST instead of TEST is labelled slow: a test of the engine through the
//     command line that takes more than about 5 s on 2 cores;
//   - every other test is labelled unit.
#include <gtest/gtest.h>

/// TEST(suite, name), labelled slow by CTest.
#define KVSIEVE_SLOW_TEST(suite, name) TEST(suite, name)
