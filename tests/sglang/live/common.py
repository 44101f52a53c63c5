"""Shared by the live SGLang tests: start a CPU `sglang.Engine` on the tiny target with given plugin settings.

SGLang spawns its scheduler, which loads the installed `acceptmoe` entry point and reads the plugin settings
from the environment at start, so each engine gets its settings through `os.environ`."""
import contextlib
import os
import threading
from pathlib import Path

import psutil

from acceptmoe.serving.sglang import cpu
from acceptmoe.serving.sglang.config import ENV_FILE, KEYS, PREFIX

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "models" / "tiny" / "target"
PLUGIN_KEYS = tuple(PREFIX + k.upper() for k in KEYS) + (ENV_FILE, "SGLANG_PLUGINS")   # every plugin setting
# SGLang on a CPU (the tree-masked CPU backend over acceptmoe's torch ops, no graphs), token ids in and out,
# a small KV pool (the host's RAM is shared)
CPU_ARGS = dict(**cpu.SERVER_ARGS, skip_tokenizer_init=True, max_running_requests=8, max_total_tokens=2048,
                log_level="error")
PROMPTS = [[1, 17, 42, 99, 7, 250, 31], [1, 600, 12, 5, 88], [1, 3, 4, 5, 6, 7, 8, 9, 10], [1, 900, 901, 77]]


@contextlib.contextmanager
def engine(server=None, **plugin_env):
    import sglang

    server = server or {}
    saved = {k: os.environ.get(k) for k in PLUGIN_KEYS}
    for k in PLUGIN_KEYS:
        os.environ.pop(k, None)
    os.environ.update({k: str(v) for k, v in plugin_env.items()})
    eng = sglang.Engine(model_path=str(TARGET), dtype="float32", random_seed=0, **{**CPU_ARGS, **server})
    try:
        yield eng
    finally:
        eng.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def greedy(eng, prompts=PROMPTS, max_new_tokens=8):
    outs = eng.generate(input_ids=prompts, sampling_params={"temperature": 0.0, "max_new_tokens": max_new_tokens,
                                                            "ignore_eos": True})
    return [list(o["output_ids"]) for o in outs]


def task_prompts(n: int, tasks=("tiny-gsm", "tiny-math", "tiny-humaneval", "tiny-mbpp")) -> list[list[int]]:
    """The first n // len(tasks) test examples of each tiny task, chat-formatted by the target's tokenizer
    (the prompts the experiments send; nothing here is chosen for the tests)."""
    from transformers import AutoTokenizer

    from acceptmoe.evals.tasks import get_task

    tok = AutoTokenizer.from_pretrained(str(TARGET))
    out = []
    for name in tasks:
        task = get_task(name)
        for example in task.load("test", limit=n // len(tasks)):
            text = tok.apply_chat_template(task.messages(example), add_generation_prompt=True, tokenize=False)
            out.append(tok(text, add_special_tokens=False)["input_ids"])
    return out


def sglang_processes() -> list[psutil.Process]:
    """SGLang's processes under this one (schedulers, detokenizer, data-parallel controller)."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(part.startswith("sglang::") for part in proc.cmdline()):
                out.append(proc)
    return out


def schedulers() -> int:
    """SGLang scheduler processes alive under this one."""
    count = 0
    for proc in sglang_processes():
        with contextlib.suppress(psutil.Error):
            count += proc.status() != psutil.STATUS_ZOMBIE and " ".join(proc.cmdline()).startswith("sglang::scheduler")
    return count


@contextlib.contextmanager
def peak_rss(interval: float = 0.1):
    """{"bytes": ...}: the largest summed resident memory of SGLang's processes, sampled every `interval` s."""
    peak, stop = {"bytes": 0}, threading.Event()

    def sample():
        while not stop.is_set():
            total = 0
            for proc in sglang_processes():
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
            peak["bytes"] = max(peak["bytes"], total)
            stop.wait(interval)
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
