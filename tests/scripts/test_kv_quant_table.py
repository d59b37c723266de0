#!/usr/bin/env python3
"""scripts/kv_quant_table.py on a small tree of hand-written cells: the shares against the right reference, the
paired interval, the NLL bound, which stacks qualify at which length, and the two answer lines.

Usage: python3 tests/scripts/test_kv_quant_table.py SCRIPT (the path of scripts/kv_quant_table.py). Standard library
only. Every expected value below is worked out by hand from the cells this file writes."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None


def cell(root, sweep, name, policy, kv_type, metrics, predictions=None, kv_rotate=None):
    d = os.path.join(root, sweep, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(f'policy: "{policy}"\nkv_type: {kv_type}\n' + (f"kv_rotate: {kv_rotate}\n" if kv_rotate else ""))
    with open(os.path.join(d, "metrics.json"), "w") as f:
        json.dump(metrics, f)
    if predictions is not None:
        with open(os.path.join(d, "predictions.csv"), "w") as f:
            f.write("task,length,index,score\n")
            for i, s in enumerate(predictions):
                f.write(f"niah_single_1,2048,{i},{s}\n")


def ruler(score, bytes_per_token, vs_full):
    return {"score": score, "kv_bytes_per_token": bytes_per_token, "kv_bytes_vs_full_f16": vs_full}


MLP = "kvzap:model=ckpt/kvzap-mlp,tau=-4,sinks=4"
LINEAR = "kvzap:model=ckpt/kvzap-linear,tau=-3,sinks=4"
WGKV = "wgkv:model=ckpt/wgkv-lambda0.04"
WGKV_4K = "wgkv:model=ckpt/wgkv-lambda0.04-len4096"  # the same λ, gates trained on 4096-token rows
SPKV = "spkv:rule=threshold,tau=0.5"


def build(root):
    # The reference: the full F16 cache, RULER 70 at 2k (five examples), 40 at 4k, NLL 3.0.
    cell(root, "ruler_2k_f16", "full", "full", "f16", ruler(70.0, 23000, 1.0), [1, 0, 1, 1, 0.5])
    cell(root, "ruler_4k_f16", "full", "full", "f16", ruler(40.0, 23000, 1.0))
    cell(root, "nll_2k_f16", "full", "full", "f16", {"nll": 3.0})
    # KVzap-MLP on Q8_0/Q4_0: 74 at 2k (106%), 39 at 4k (98%), NLL +0.67%: within both bounds at both lengths.
    cell(root, "ruler_2k_q8_0-q4_0", "mlp", MLP, "q8_0/q4_0", ruler(74.0, 4600, 0.2), [1, 0.5, 1, 1, 0.2], "auto")
    cell(root, "ruler_4k_q8_0-q4_0", "mlp", MLP, "q8_0/q4_0", ruler(39.0, 4140, 0.18), None, "auto")
    cell(root, "nll_2k_q8_0-q4_0", "mlp", MLP, "q8_0/q4_0", {"nll": 3.02}, None, "auto")
    # WG-KV: 10× and 67.2 at 2k (96%), 30 at 4k (75%), NLL +0.33%: the smallest at 2k, not at 4k.
    cell(root, "ruler_2k_q8_0-q4_0", "wgkv", WGKV, "q8_0/q4_0", ruler(67.2, 2300, 0.1), None, "auto")
    cell(root, "ruler_4k_q8_0-q4_0", "wgkv", WGKV, "q8_0/q4_0", ruler(30.0, 2000, 0.087), None, "auto")
    cell(root, "nll_2k_q8_0-q4_0", "wgkv", WGKV, "q8_0/q4_0", {"nll": 3.01}, None, "auto")
    # WG-KV's gates trained on longer rows: a stack of their own (4k only: 38 of 40, 95%, 5.0×), not a second
    # "WG-KV λ 0.04" row.
    cell(root, "ruler_4k_f16", "wgkv_4k", WGKV_4K, "f16", ruler(38.0, 4600, 0.2))
    cell(root, "ruler_4k_f16", "wgkv_sinks", WGKV + ",sinks=4", "f16", ruler(36.0, 4700, 0.2))  # and with sinks
    # 37.9 of 40 is 94.75%: under the line, and written so rather than rounded up to 95%.
    cell(root, "ruler_4k_f16", "wgkv_l02", "wgkv:model=ckpt/wgkv-lambda0.02", "f16", ruler(37.9, 6000, 0.26))
    # KVzap-Linear: the smallest (12.5×) and 100% at 2k, but NLL +1.67%: never qualifies.
    cell(root, "ruler_2k_q8_0-q4_0", "linear", LINEAR, "q8_0/q4_0", ruler(70.0, 1840, 0.08), None, "auto")
    cell(root, "nll_2k_q8_0-q4_0", "linear", LINEAR, "q8_0/q4_0", {"nll": 3.05}, None, "auto")
    # SP-KV's gated model: its own full F16 cache (RULER 40 at 2k, NLL 3.1) is its rows' reference. SP-KV on F16
    # pages 39 (98%), 3.3×, NLL +0.65%; on Q8_0/Q4_0 at 4k 30.0 beside its model's 35.0 on the same pages, with no
    # F16 reference at 4k: a score and sizes, no share.
    cell(root, "ruler_2k_f16_spkv", "full", "full", "f16", ruler(40.0, 23000, 1.0))
    cell(root, "ruler_2k_f16_spkv", "spkv", SPKV, "f16", ruler(39.0, 7000, 0.3))
    cell(root, "nll_2k_f16_spkv", "full", "full", "f16", {"nll": 3.1})
    cell(root, "nll_2k_f16_spkv", "spkv", SPKV, "f16", {"nll": 3.12})
    cell(root, "ruler_4k_q8_0-q4_0_spkv", "full", "full", "q8_0/q4_0", ruler(35.0, 9300, 0.4), None, "auto")
    cell(root, "ruler_4k_q8_0-q4_0_spkv", "spkv", SPKV, "q8_0/q4_0", ruler(30.0, 2300, 0.099), None, "auto")
    # An unfinished cell (no metrics.json) is not a row.
    os.makedirs(os.path.join(root, "ruler_2k_f16", "unfinished"))


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def row(table, stack, kv):
    for line in table.splitlines():
        cols = [c.strip() for c in line.strip("|").split("|")]
        if len(cols) > 2 and cols[0] == stack and cols[1] == kv:
            return cols
    raise AssertionError(f"no row {stack} / {kv} in\n{table}")


class KvQuantTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        build(self.root)
        r = run([self.root, "--plot", os.path.join(self.root, "stacks")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.table = r.stdout

    def tearDown(self):
        self.tmp.cleanup()

    def test_columns(self):
        # stack, K/V, rotation, then per length: score, share, paired, bytes, × smaller; NLL, Δ NLL, meets both.
        mlp = row(self.table, "KVzap-MLP τ -4", "q8_0/q4_0")
        self.assertEqual(mlp[2], "auto")
        # 2k: 74 / 70 = 106%; differences 0, +50, 0, 0, −30: mean +4, s² = 3320/4, half-width 1.96·√(830/5) = 25.3.
        self.assertEqual(mlp[3:8], ["74.0", "106%", "+4.0 ± 25.3", "4600", "5.0×"])
        # 4k: 39 / 40 = 98%; no predictions, no interval; 1 / 0.18 = 5.6×.
        self.assertEqual(mlp[8:13], ["39.0", "98%", "—", "4140", "5.6×"])
        self.assertEqual(mlp[13:], ["3.0200", "+0.67%", "2k yes, 4k yes"])
        self.assertEqual(row(self.table, "full", "f16")[3:6], ["70.0", "100%", "+0.0 ± 0.0"])

    def test_bounds(self):
        self.assertEqual(row(self.table, "WG-KV λ 0.04", "q8_0/q4_0")[-1], "2k yes, 4k no")
        wgkv_4k = row(self.table, "WG-KV λ 0.04, 4096-token rows", "f16")
        self.assertEqual(wgkv_4k[8:13], ["38.0", "95%", "—", "4600", "5.0×"])
        self.assertEqual(wgkv_4k[-1], "4k no")  # 95% at 4k, but no NLL cell
        self.assertEqual(row(self.table, "WG-KV λ 0.04, s = 4", "f16")[8:10], ["36.0", "90%"])
        under = row(self.table, "WG-KV λ 0.02", "f16")
        self.assertEqual((under[9], under[-1]), ("94.8%", "4k no"))
        linear = row(self.table, "KVzap-Linear τ -3", "q8_0/q4_0")
        self.assertEqual(linear[14:], ["+1.67%", "2k no"])  # 100% on RULER, over the NLL bound
        self.assertEqual(linear[8:13], ["—"] * 5)  # no 4k cell

    def test_spkv_against_its_own_model(self):
        spkv = row(self.table, "SP-KV τ 0.5", "f16")
        self.assertEqual(spkv[3:5], ["39.0", "98%"])  # 39 / 40, not 39 / 70
        self.assertEqual(spkv[13:], ["3.1200", "+0.65%", "2k yes"])
        # At 4k its reference (the gated model's full F16 cache) did not run: score and sizes without a share.
        q = row(self.table, "SP-KV τ 0.5", "q8_0/q4_0")
        self.assertEqual(q[8:13], ["30.0", "—", "—", "2300", "10.1×"])
        self.assertEqual(q[-1], "no")
        self.assertIn("compared with that model's own full F16 cache", self.table)

    def test_answers(self):
        self.assertIn("at 2k and ≤ +1% NLL: **WG-KV λ 0.04, q8_0/q4_0 (rotation auto)**, 10.0× smaller", self.table)
        self.assertIn("qualifies at 2k and 4k (of those run at every length): **KVzap-MLP τ -4, q8_0/q4_0 (rotation "
                      "auto)**, 5.6× smaller than the full F16 cache at 4k.", self.table)

    def test_plot_points(self):
        with open(os.path.join(self.root, "stacks_4k.dat")) as f:
            dat = f.read()
        self.assertIn('5.556 97.5 "τ -4" 9', dat)  # KVzap-MLP on Q8_0/Q4_0: a filled triangle
        self.assertIn('11.494 75.0 "λ 0.04" 9', dat)
        self.assertNotIn("SP-KV", dat)  # no reference at 4k
        with open(os.path.join(self.root, "stacks_2k.dat")) as f:
            self.assertIn('12.500 100.0 "τ -3*" 9', f.read())  # over the NLL bound: starred

    def test_no_reference_is_an_error(self):
        for sweep in ("ruler_4k_f16",):
            os.remove(os.path.join(self.root, sweep, "full", "metrics.json"))
        r = run([self.root])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no finished full F16 RULER cell at every length", r.stderr)
        r = run([os.path.join(self.root, "missing")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("usage", r.stderr)


if __name__ == "__main__":
    SCRIPT = sys.argv.pop(1)
    unittest.main()
