"""The replay's accounting rules on their boundaries, on hand-made rows: a generation's totals count its step
passes only (never the prefill) with each pass's time the median over rounds, and a step pass counts as after
EOS when the tokens output before it (the prefill's included) reach the reply's own end, at equality too."""
import numpy as np

from acceptmoe.experiments.replay.report import after_eos, per_generation

KINDS = ["prefill", "verify", "verify", "verify"]


def _generation(seconds, natural_tokens=None):
    gen = {"kinds": KINDS, "seconds": seconds, "output": [1, 3, 2, 4], "tokens": [9, 64, 64, 64],
           "used": [40, 20, 21, 22], "loads": [40, 5, 6, 7], "hits": [0, 15, 15, 15], "engine_s": [0.5, 0.1, 0.1, 0.1],
           "counters_match": True}
    if natural_tokens is not None:
        gen["natural_tokens"] = natural_tokens
    return gen


def _rows():
    rounds = [[9.0, 1.0, 2.0, 3.0], [7.0, 5.0, 2.0, 1.0], [8.0, 3.0, 4.0, 2.0]]   # medians per pass: 8, 3, 2, 2
    return [{"store": "resident", "variant": "acceptmoe", "round": r, "generations": [_generation(s, 4)]}
            for r, s in enumerate(rounds)]


def test_totals_count_step_passes_only_with_the_median_time_of_each_pass():
    got = per_generation(_rows(), "resident", "acceptmoe")
    assert got["passes"].tolist() == [3.0]
    assert got["seconds"].tolist() == [3.0 + 2.0 + 2.0]            # the prefill's 8 s left out
    assert got["output"].tolist() == [9.0] and got["tokens"].tolist() == [192.0]
    assert got["loads"].tolist() == [18.0] and got["hits"].tolist() == [45.0] and got["used"].tolist() == [63.0]
    assert np.allclose(got["engine_s"], [0.3]) and got["match"].tolist() == [True]
    assert per_generation(_rows(), "offloaded", "acceptmoe") is None


def test_a_step_pass_that_starts_exactly_at_the_replys_end_is_after_eos():
    """Tokens output before each pass: 0 (prefill), 1, 4, 6. With the reply ending at 4 tokens the third
    pass starts exactly there: it and the fourth are after EOS; the prefill never counts."""
    assert after_eos(_generation([0.0] * 4, natural_tokens=4)) == 2
    assert after_eos(_generation([0.0] * 4, natural_tokens=5)) == 1
    assert after_eos(_generation([0.0] * 4, natural_tokens=1)) == 3
    assert after_eos(_generation([0.0] * 4, natural_tokens=0)) == 3   # the prefill starts at 0 but is not a step
    assert after_eos(_generation([0.0] * 4)) == 0


def _keyed(index, seconds, task="tiny-gsm"):
    return {**_generation(seconds, 4), "task": task, "rep": 0, "index": index}


def test_one_row_per_generation_reads_as_a_variants_whole_sequence():
    """A replay row holds one generation (prompt by prompt) or, in runs made before, a variant's whole sequence:
    both read the same, generations in the plan's key order (repetition, prompt index, task), each with its
    name and task (the interval's unit and stratum)."""
    secs = [[9.0, 1.0, 2.0, 3.0], [7.0, 5.0, 2.0, 1.0]]
    old = [{"store": "resident", "variant": "v", "round": 0,
            "generations": [_keyed(0, secs[0]), _keyed(0, secs[1], "tiny-math"), _keyed(1, secs[0])]}]
    new = [{"store": "resident", "variant": "v", "round": 0, "generations": [g]} for g in
           reversed(old[0]["generations"])]                                 # written in another order
    a, b = per_generation(old, "resident", "v"), per_generation(new, "resident", "v")
    assert a["names"].tolist() == b["names"].tolist() == ["0/0/tiny-gsm", "0/0/tiny-math", "0/1/tiny-gsm"]
    assert a["tasks"].tolist() == ["tiny-gsm", "tiny-math", "tiny-gsm"]
    assert all(np.array_equal(a[k], b[k]) for k in a)
