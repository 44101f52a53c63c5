"""HostArena: one exact allocation laid out by ArenaLayout (each tensor 64-byte aligned, in order), its views
sharing that memory; pinning registers it in place on CUDA (checked by gpu-check), nothing to pin on a CPU."""
import pytest
import torch

from acceptmoe.engine.arena import ALIGN, ArenaLayout, HostArena


def test_layout_places_each_tensor_aligned_and_sizes_the_arena_exactly():
    layout = ArenaLayout.of([("a", (3, 5), torch.bfloat16), ("b", (7,), torch.uint8), ("c", (2, 2), torch.float32)])
    a, b, c = layout.regions
    assert [r.offset for r in layout.regions] == [0, 64, 128] and all(r.offset % ALIGN == 0 for r in layout.regions)
    assert (a.nbytes, b.nbytes, c.nbytes) == (30, 7, 16)
    assert layout.nbytes == 128 + 16 and layout.tensor_bytes == 53
    with pytest.raises(ValueError, match="distinct names"):
        ArenaLayout.of([("a", (1,), torch.uint8), ("a", (1,), torch.uint8)])
    assert ArenaLayout.of([]).nbytes == 0


def test_arena_views_share_one_exact_allocation():
    layout = ArenaLayout.of([("w1", (4, 6, 8), torch.bfloat16), ("scales", (4, 3), torch.uint8),
                             ("reads", (9,), torch.long)])
    arena = HostArena(layout, pin=False)
    assert arena.nbytes == layout.nbytes == arena.buffer.untyped_storage().nbytes()
    views = {r.name: arena.view(r.name) for r in layout.regions}
    assert {n: (tuple(v.shape), v.dtype) for n, v in views.items()} == {
        "w1": ((4, 6, 8), torch.bfloat16), "scales": ((4, 3), torch.uint8), "reads": ((9,), torch.long)}
    for r in layout.regions:
        assert views[r.name].data_ptr() == arena.buffer.data_ptr() + r.offset
        views[r.name].fill_(1)
    assert int(arena.buffer.count_nonzero()) > 0
    views["scales"].zero_()
    assert torch.equal(views["w1"], torch.ones(4, 6, 8, dtype=torch.bfloat16))     # regions do not overlap
    assert arena.pinned_bytes() == 0
    arena.release()                                                                  # nothing registered: no-op
    assert arena.pinned_bytes() == 0
