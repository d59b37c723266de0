// The safetensors reader (learned scorers' checkpoints): any bytes give tensors or one Error.
#include "fuzz_input.h"
#include "io/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kvsieve::fuzz::MemFile f(data, size);
    try {
        kvsieve::read_safetensors(f.path());
    } catch (const kvsieve::Error&) {}
    return 0;
}
