#include <gtest/gtest.h>
#include <stdlib.h>

#include "kernels/blas_core.h"
#include "kernels/parallel.h"

int main(int argc, char** argv) {
    kvsieve::ensure_blas_core(argv);  // the same OpenBLAS kernels as the kvsieve binary the tests run
    ::testing::InitGoogleTest(&argc, argv);
    // Predictors a user trained (~/.local/share/kvsieve/models, predict/data_dirs.h) are not the tests': only the
    // shipped ones are found, here and in the binaries the tests run (a test that trains sets its own folder).
    ::setenv("XDG_DATA_HOME", "/nonexistent/kvsieve-tests", 1);
    kvsieve::set_num_threads(2);
    return RUN_ALL_TESTS();
}
