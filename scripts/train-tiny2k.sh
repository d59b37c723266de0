#!/usr/bin/env bash
# Trains tests/data/models/kvsieve-tiny-2k.gguf from scratch with kvsieve's training stack, in fourteen phases (see
# tests/data/models/kvsieve-tiny-2k.md): language and task formats, induction on short copy examples, retrieval at
# 512–2304 tokens, then the tasks on short rows with code copying and associative recall, the tasks again
# at 1k–2.3k tokens, and chain following for variable tracking (attention supervision, short rows then
# 768–2304 tokens in five phases). About 7 hours on 2 cores. Each phase is resumable: rerun the script
# after an interruption and it continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/bin/kvsieve
export OMP_WAIT_POLICY=passive
phase() {  # config, run dir
    if [ -f "$2/done" ]; then return; fi
    if [ -f "$2/checkpoint.pt" ]; then $K train pretrain --config "$1" --resume; else $K train pretrain --config "$1"; fi
    touch "$2/done"
}
phase configs/kvsieve-tiny-2k.json runs/kvsieve-tiny-2k
phase configs/kvsieve-tiny-2k-copy1.json runs/tiny2k-copy1
phase configs/kvsieve-tiny-2k-copy2.json runs/tiny2k-copy2
phase configs/kvsieve-tiny-2k-retrieval.json runs/tiny2k-retrieval
$K quantize runs/tiny2k-retrieval/final.gguf runs/tiny2k-retrieval/final-f16.gguf --type f16
phase configs/kvsieve-tiny-2k-tasks1.json runs/tiny2k-tasks1
phase configs/kvsieve-tiny-2k-codes.json runs/tiny2k-codes
phase configs/kvsieve-tiny-2k-recall.json runs/tiny2k-recall
phase configs/kvsieve-tiny-2k-tasks2.json runs/tiny2k-tasks2
phase configs/kvsieve-tiny-2k-attnsup.json runs/tiny2k-attnsup
phase configs/kvsieve-tiny-2k-attnsup-long.json runs/tiny2k-attnsup-long
phase configs/kvsieve-tiny-2k-attnsup-c.json runs/tiny2k-attnsup-c
phase configs/kvsieve-tiny-2k-attnsup-d.json runs/tiny2k-attnsup-d
phase configs/kvsieve-tiny-2k-attnsup-e.json runs/tiny2k-attnsup-e
phase configs/kvsieve-tiny-2k-attnsup-f.json runs/tiny2k-attnsup-f
$K quantize runs/tiny2k-attnsup-f/final.gguf tests/data/models/kvsieve-tiny-2k.gguf --type f16
