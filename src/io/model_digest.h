#pragma once
// The identity of a model's weights, independent of its file name and metadata: what a trained predictor records
// (config.json "model_digest") so that kvsieve finds the predictors trained for the loaded model (predict/
// bundled_predictors.h) and never applies one to a model it was not trained for.
#include <string>

namespace kvsieve {

class GGUFFile;

/// "sha256:" and 64 lowercase hexadecimal digits: the SHA-256 of, for every tensor in file order, its name, ggml
/// type id, dimensions (ne[0..3]) and a sample of its data bytes: all of them for a tensor of at most 64 KiB, else
/// the first and last 16 KiB and 32 slices of 512 bytes at evenly spaced offsets between them (about 48 KiB per
/// tensor, so a 98 MB file hashes in milliseconds). Metadata, tokenizer and file name do not enter it: the same
/// weights renamed or with edited metadata keep their digest; a fine-tune (every tensor moves) or another weight
/// type (other types and bytes) gets another one. Deterministic across machines (bytes only, fixed layout).
std::string model_digest(const GGUFFile& f);

}  // namespace kvsieve
