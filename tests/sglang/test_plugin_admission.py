"""Token-side admission in the SGLang plugin, without a server (`serving.sglang.admission`; the live cross-engine
test holds it to the native engine on SGLang's own EAGLE-3 worker): the cut links reach exactly the admitted
nodes in SGLang's sibling order, the survival read from SGLang's draft layout, the non-admitted tokens' routing
adds no expert to the pass, the records hold the admitted subtrees, and the settings that need a profile."""
import json
import random
from types import SimpleNamespace

import pytest
import torch

from acceptmoe.costs.verify import load_profile
from acceptmoe.engine.admission import subtree_parents
from acceptmoe.methods import Router
from acceptmoe.serving.sglang.admission import AdmissionUnavailableError, cut_links, node_survival
from acceptmoe.serving.sglang.config import PluginConfigError, load_config, to_env
from acceptmoe.serving.sglang.runtime import Limits, Runtime
from acceptmoe.serving.sglang.tree import links_from_parents, parents_from_links

N, E, K = 8, 32, 4


def random_parents(rng: random.Random, n: int) -> list[int]:
    return [-1] + [rng.randrange(t) for t in range(1, n)]


def ancestor_closed(rng: random.Random, parents: list[int]) -> list[int]:
    keep = {0}
    for t in range(1, len(parents)):
        if parents[t] in keep and rng.random() < 0.6:
            keep.add(t)
    return sorted(keep)


def walk(first: list[int], sibling: list[int]) -> list[tuple[int, int]]:
    """(parent, child) pairs reachable from the root along the links, children in link order."""
    out, stack = [], [0]
    while stack:
        p = stack.pop()
        c = first[p]
        while c >= 0:
            out.append((p, c))
            stack.append(c)
            c = sibling[c]
    return out


def test_cut_links_reach_exactly_the_admitted_nodes_in_sglangs_sibling_order():
    rng = random.Random(0)
    trees = [random_parents(rng, 12) for _ in range(5)]
    keeps = [ancestor_closed(rng, p) for p in trees]
    keeps[1] = list(range(12))                                          # a request that admits every node
    links = [links_from_parents(p) for p in trees]
    first = torch.tensor([f for f, _ in links])
    sibling = torch.tensor([s for _, s in links])
    before = [walk(first[b].tolist(), sibling[b].tolist()) for b in range(5)]
    cut_links(first, sibling, keeps)
    for b, keep in enumerate(keeps):
        after = walk(first[b].tolist(), sibling[b].tolist())
        assert after == [(p, c) for p, c in before[b] if c in keep]      # the same order, the others gone
        recovered = parents_from_links(first[b:b + 1], sibling[b:b + 1])[0].tolist()
        assert subtree_parents(recovered, keep) == subtree_parents(trees[b], keep)


def test_node_survival_reads_sglangs_draft_layout():
    """SGLang's draft keeps per step the cumulative scores of its candidates ([B, 1, topk] then [B, topk, topk]),
    and node i + 1 of the tree is candidate top_scores_index[:, i] of them flattened."""
    step0 = torch.tensor([[[0.6, 0.3]]])                                 # [1, 1, 2]
    step1 = torch.tensor([[[0.36, 0.12], [0.27, 0.02]]])                 # [1, 2, 2]: children of both
    top = torch.tensor([[0, 1, 2, 4]])                                    # candidates 0, 1, 2 (0.36), 4 (0.27)
    assert node_survival([step0, step1], top)[0].tolist() == pytest.approx([0.6, 0.3, 0.36, 0.27])


def _runtime(method: str, tmp_path) -> Runtime:
    env = {"ACCEPTMOE_METHOD": method, "ACCEPTMOE_P_HAT": "1,.8,.5,.3,.2,.1,.05,.02",
           "ACCEPTMOE_COST": json.dumps(load_profile().to_json()), "ACCEPTMOE_TRACE": str(tmp_path / "steps.jsonl")}
    rt = Runtime(load_config(env))
    rt.start(Limits(requests=4, depth=7, router=Router.preset("softmax_topk", K), experts=E))
    return rt


def _topk_module():
    return SimpleNamespace(topk_config=SimpleNamespace(use_grouped_topk=False, scoring_func="softmax",
                                                       correction_bias=None, custom_routing_function=None,
                                                       num_shared_topk_slots=0, top_k=K, renormalize=True,
                                                       routed_scaling_factor=None),
                           layer_id=0, is_draft=False)


def _natural_topk(topk, hidden, logits, *args, **kwargs):
    w, ids = torch.softmax(logits.float(), -1).topk(K, -1)
    return SimpleNamespace(topk_weights=w / w.sum(-1, keepdim=True), topk_ids=ids)


@pytest.mark.parametrize("method", ["standard-sd-prefix", "acceptmoe-costed"])
def test_non_admitted_tokens_add_no_expert_and_the_records_hold_the_admitted_subtrees(method, tmp_path):
    rt = _runtime(method, tmp_path)
    rng = random.Random(1)
    trees = [[-1, 0, 0, 1, 1, 2, 3, 4] for _ in range(3)]
    links = [links_from_parents(t) for t in trees]
    spec = SimpleNamespace(draft_token_num=N, retrieve_next_token=torch.tensor([f for f, _ in links]),
                           retrieve_next_sibling=torch.tensor([s for _, s in links]))
    # survival: request 0 confident (deep nodes likely), request 2 unsure (little admitted)
    scores = torch.tensor([[0.99, 0.9, 0.98, 0.9, 0.85, 0.97, 0.96],
                           [0.6, 0.3, 0.4, 0.1, 0.2, 0.05, 0.03],
                           [0.05, 0.04, 0.01, 0.01, 0.01, 0.001, 0.001]])
    rt.draft_scores([scores[:, None, :]], torch.arange(N - 1).expand(3, N - 1))
    rt.begin_verify(spec, 3, ["a", "b", "c"])
    keeps = rt.keeps
    assert keeps is not None and len(keeps[2]) < N and all(k[0] == 0 for k in keeps)
    z = torch.randn(3 * N, E, generator=torch.Generator().manual_seed(rng.randrange(99)))
    out = rt.restrict(_topk_module(), _natural_topk, z[:, :0], z)
    ids = out.topk_ids.view(3, N, K)
    for b, keep in enumerate(keeps):
        admitted_experts = set(ids[b, keep].flatten().tolist())
        assert set(ids[b].flatten().tolist()) == admitted_experts         # the others read nothing new
        assert int(rt.records[0, b, 4]) == len(admitted_experts)          # LAYER_FIELDS[4]: routed_union
    rt.end_pass()
    rt.finish_step(["a", "b", "c"], torch.tensor([[0, -1], [N, -1], [2 * N, -1]]), N)
    rt.flush()
    recs = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [r["parents"] for r in recs] == [subtree_parents(t, k) for t, k in zip(trees, keeps, strict=True)]


def test_a_verify_pass_without_draft_scores_is_refused_with_the_fix(tmp_path):
    rt = _runtime("standard-sd-survival", tmp_path)
    links = links_from_parents([-1, 0, 0, 1, 1, 2, 3, 4])
    spec = SimpleNamespace(draft_token_num=N, retrieve_next_token=torch.tensor([links[0]]),
                           retrieve_next_sibling=torch.tensor([links[1]]))
    with pytest.raises(AdmissionUnavailableError, match="disable-cuda-graph"):
        rt.begin_verify(spec, 1, ["a"])


def test_an_admitting_method_needs_a_cost_profile_and_carries_it_through_the_environment():
    with pytest.raises(PluginConfigError, match="ACCEPTMOE_COST"):
        load_config({"ACCEPTMOE_METHOD": "standard-sd-survival"})
    with pytest.raises(PluginConfigError, match="fixed_s must be a number"):
        load_config({"ACCEPTMOE_METHOD": "standard-sd-survival",
                     "ACCEPTMOE_COST": json.dumps({**load_profile().to_json(), "fixed_s": "x"})})
    with pytest.raises(PluginConfigError, match="cannot read"):
        load_config({"ACCEPTMOE_METHOD": "standard-sd-survival", "ACCEPTMOE_COST": "/nonexistent.json"})
    cfg = load_config({"ACCEPTMOE_METHOD": "acceptmoe-survival", "ACCEPTMOE_P_HAT": "1,0.5",
                       "ACCEPTMOE_COST": json.dumps(load_profile().to_json())})
    assert cfg.admits and cfg.cost == load_profile() and load_config(to_env(cfg)) == cfg


def test_a_profile_file_is_a_cost_setting():
    from acceptmoe.costs.verify import DEFAULT_PROFILE
    cfg = load_config({"ACCEPTMOE_METHOD": "standard-sd-prefix", "ACCEPTMOE_COST": str(DEFAULT_PROFILE)})
    assert cfg.cost == load_profile()


def test_bench_plugin_times_the_admitting_methods_through_the_real_hooks(tmp_path):
    """`bench-plugin` runs every setting, the admitting ones included, through the plugin's hooks (a step's
    draft scores, forward and acceptance): their host reads are the admission's own (trees, scores, unions),
    the baseline's none."""
    from acceptmoe.tools.bench.plugin_host import COMPOSED, SETTINGS, TRUNCATING, time_steps

    rows = {r["setting"]: r for r in time_steps(SETTINGS, 2, 2, 1, str(tmp_path / "steps.jsonl"), 2)}
    assert set(rows) == set(SETTINGS) and all(r["step_ms"] > 0 for r in rows.values())
    assert rows[TRUNCATING]["host_reads"] > 0 and rows[COMPOSED]["host_reads"] > 0
    assert min(r["host_reads"] for r in rows.values()) == 0
