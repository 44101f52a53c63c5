"""Integrations: this project seen from another tool's side, through that tool's own API. Each is a front door
like a command: it opens engines the world's way (the experiments' spine: `WorldConfig`'s defaults, the
`ENGINES` registry, checkpoints and tokenizers), and nothing in the package imports it.

| package    | what it holds                                                                            |
|------------|------------------------------------------------------------------------------------------|
| `lm_eval/` | the lm-evaluation-harness model backend and `lm-eval` command (`backend`), its offline tasks (`tasks/`) |

Where it sits among the rooms and why: docs/architecture.md, "Rooms and the one-way rule".
"""
