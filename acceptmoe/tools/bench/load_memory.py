"""Benchmark: host memory while a target loads, measured beside what `engine.memory` says it needs.

Each load runs in a fresh process that samples its anonymous resident memory (RssAnon, every 0.5 ms; the
memory-mapped checkpoint's file pages are not counted: the page cache gives them back) from just before
`MoEModel.from_pretrained` until it returns: the peak and the value after, less the value before (taken once
torch's meta-device machinery, which the skeleton uses, has loaded: about 80 MB, once per process). Beside it,
`memory.store_bytes(...).load_peak` (the store's host part plus one MoE layer being read) and the store's own
host part. Device `meta` stands for a GPU: nothing is allocated on the device, so the host holds what it
would on CUDA (the offloaded store's arena, unpinned here).

    ./reproduce.sh bench-load [--model tiny|random|FOLDER] [--shape H I E LAYERS] [--devices cpu meta]

`random` writes a random Qwen3-MoE checkpoint in the released checkpoints' per-expert layout (bf16, one
safetensors shard per MoE layer, `--shape`, default H 1024, I 512, 64 experts, 8 layers: 1.61 GB of experts)
into a temporary folder.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from acceptmoe.commands import command, parser
from acceptmoe.engine.config import ModelConfig
from acceptmoe.engine.memory import mxfp4_in_config, store_bytes
from acceptmoe.experiments.spine.render import markdown
from acceptmoe.experiments.spine.runs import REPO

SAMPLE_S = 0.0005
RUNS = (("resident", None), ("offloaded", 8))
CHILD = "import sys; from acceptmoe.tools.bench.load_memory import child; child(sys.argv[1])"


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise OSError("/proc/self/status has no RssAnon line")


def child(request: str) -> None:
    """In a fresh process: load the model as asked (JSON), print the sampled host bytes as JSON."""
    from acceptmoe.engine.model import MoEModel
    r = json.loads(request)
    with torch.device("meta"):                   # torch's meta-device machinery loads once, about 80 MB of objects
        torch.nn.Embedding(1, 1)
    base = rss_anon()
    peak, done = [base], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon())
            time.sleep(SAMPLE_S)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    model = MoEModel.from_pretrained(r["path"], device=r["device"], store=r["store"], slots=r["slots"])
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    after = rss_anon()
    print(json.dumps({"peak": max(peak[0], after) - base, "after": after - base, "seconds": seconds,
                      "store_host": model.store.host_expert_bytes()}))


def measure(path: Path, store: str, slots: int | None, device: str) -> dict:
    """One load in a fresh process: peak and after-load host bytes, seconds, beside `engine.memory`'s figures."""
    request = json.dumps({"path": str(path), "store": store, "slots": slots, "device": device})
    out = subprocess.run([sys.executable, "-c", CHILD, request], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    raw = json.loads((Path(path) / "config.json").read_text())
    cfg = ModelConfig.from_folder(path)
    like = "cuda" if device == "meta" else device                       # meta stands for a GPU
    return {**row, "predicted_peak": store_bytes(cfg, cfg.dtype, store, slots, mxfp4_in_config(raw), like).load_peak}


def write_random_checkpoint(folder: Path, hidden: int, inter: int, experts: int, layers: int, seed: int = 0) -> Path:
    """A random Qwen3-MoE checkpoint (config.json + one shard of non-expert weights + one shard per MoE layer
    in the per-expert layout, bf16, values of std 0.02)."""
    from safetensors.torch import save_file
    from torch import nn

    from acceptmoe.engine.model import _build_skeleton
    folder.mkdir(parents=True, exist_ok=True)
    raw = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": hidden,
           "moe_intermediate_size": inter, "intermediate_size": 4 * inter, "num_experts": experts,
           "num_experts_per_tok": 8, "num_hidden_layers": layers, "num_attention_heads": 8, "num_key_value_heads": 4,
           "head_dim": hidden // 8, "vocab_size": 1024, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
           "norm_topk_prob": True, "rope_theta": 1e6, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "eos_token_id": 2, "decoder_sparse_step": 1, "mlp_only_layers": []}
    (folder / "config.json").write_text(json.dumps(raw))
    cfg = ModelConfig.from_dict(raw)
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(shape, generator=g).mul_(0.02).to(torch.bfloat16)     # noqa: E731
    shards = {"model-other.safetensors": {
        (n if n.startswith("lm_head.") else f"model.{n}").replace(".mlp.router.", ".mlp.gate."): rand(*p.shape)
        for n, p in _build_skeleton(nn.Module(), cfg).named_parameters()}}
    for l in range(layers):
        p = f"model.layers.{l}.mlp.experts"
        shards[f"model-layer{l:03d}.safetensors"] = {
            f"{p}.{j}.{name}": rand(*shape) for j in range(experts)
            for name, shape in (("gate_proj.weight", (inter, hidden)), ("up_proj.weight", (inter, hidden)),
                                ("down_proj.weight", (hidden, inter)))}
    for name, tensors in shards.items():
        save_file(tensors, folder / name, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {t: name for name, tensors in shards.items() for t in tensors}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def report(rows: list[tuple[str, str, dict]]) -> str:
    header = ["store", "device", "peak GB (measured)", "after GB", "predicted peak GB", "store host GB", "load s"]
    body = [[store, device, f"{r['peak'] / 1e9:.3f}", f"{r['after'] / 1e9:.3f}", f"{r['predicted_peak'] / 1e9:.3f}",
             f"{r['store_host'] / 1e9:.3f}", f"{r['seconds']:.1f}"] for store, device, r in rows]
    return markdown(header, body)


@command("bench-load", "host memory while a target loads (peak RSS, fresh process) beside engine.memory's figures")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-load")
    p.add_argument("--model", default="random", help="tiny, random (a random checkpoint, --shape) or a folder")
    p.add_argument("--shape", nargs=4, type=int, default=(1024, 512, 64, 8), metavar=("H", "I", "E", "LAYERS"))
    p.add_argument("--devices", nargs="+", default=["cpu", "meta"], choices=("cpu", "meta"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "random":
            path = write_random_checkpoint(Path(tmp) / "random", *args.shape)
        else:
            path = REPO / "models" / "tiny" / "target" if args.model == "tiny" else Path(args.model)
        cfg = ModelConfig.from_folder(path)
        rows = [(store, device, measure(path, store, slots and min(slots, cfg.moe.num_experts), device))
                for device in args.devices for store, slots in RUNS]
        print(f"{path.name}: {len(cfg.moe.layer_ids)} MoE layers x {cfg.moe.num_experts} experts\n")
        print(report(rows))
    return 0
