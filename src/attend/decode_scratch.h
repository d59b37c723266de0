#pragma once
// The buffers a decode step's attention works in, kept from step to step so that a decode step allocates nothing.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attend/page_plan.h"
#include "cache/head_cache.h"
#include "policy/scorer.h"

namespace kvsieve {

/// Scratch of attend_decode (attend/decode_attention.h) and of the write-time scores before it, owned by the
/// cache's attention view (PagedAttention) and reused by every layer of every decode step. Each buffer is sized on
/// first use with assign/resize and keeps its capacity, so it grows only when the step needs more than any step
/// before it (more KV heads, more pages or entries per head: the context grew); once the context stops growing a
/// decode step allocates nothing here. Holds no state between steps: every field is rewritten before it is read.
struct DecodeScratch {
    /// Write-time scores of the step's new entries, [T][Hkv] (EntryScorer::on_write).
    std::vector<float> write_scores;
    /// Where each KV head's new entry went, [Hkv].
    std::vector<HeadCache::Slot> slots;
    /// Each KV head's page plan, [Hkv][pages] (head_pages, then Quest's selection).
    std::vector<std::vector<PageRef>> pages;
    /// The attention statistic the step scorer asked for, [Hkv][G × entries] (empty without one).
    std::vector<std::vector<float>> probs;
    /// The query rotated into a rotated pool's space, [Hq × d] (unused without a rotation).
    std::vector<float> q_rot;
    /// First flash-decoding span of each KV head, [Hkv + 1].
    std::vector<int> span0;
    /// Each span's partial softmax state: running max and sum [spans × G], output [spans × G × d].
    std::vector<float> part_m, part_l, part_o;
    /// A step scorer's inputs and outputs: per KV head its entries' positions, statistic and scores in the scorer's
    /// order (new entry last), where each came from (region and index), and the output pointers, [Hkv] each.
    std::vector<std::vector<int32_t>> positions;
    std::vector<std::vector<float>> stat, scores;
    std::vector<std::vector<HeadCache::Slot>> from;
    std::vector<float*> outs;
    /// The per-head views handed to the scorer (moved into the StepEvent for the call and back after it).
    std::vector<HeadView> views;
    /// Quest's read-time selection, per KV head [Hkv] (select_quest_pages; unused without a selection).
    std::vector<QuestSelectScratch> quest;
};

}  // namespace kvsieve
