"""Host memory while a target loads (`bench-load`'s measurement: peak anonymous RSS in a fresh process) stays
within what `engine.memory` says: with the experts on the device (meta stands for a GPU) no staged copy of them
is ever held on the host (the loader used to hold every layer before building the store), and an offloaded
store holds its arena plus at most the layer being read."""
from acceptmoe.tools.bench.load_memory import measure, write_random_checkpoint

H, I, E, LAYERS = 512, 256, 32, 6
LAYER = E * 3 * H * I * 2                       # one MoE layer of bf16 experts: 25.2 MB


def test_loading_holds_the_store_and_at_most_one_layer(tmp_path):
    path = write_random_checkpoint(tmp_path / "ckpt", H, I, E, LAYERS)
    resident = measure(path, "resident", None, "meta")
    assert resident["store_host"] == 0 and resident["peak"] < LAYER < resident["predicted_peak"] + 1
    offloaded = measure(path, "offloaded", 4, "meta")
    assert offloaded["store_host"] == LAYERS * LAYER
    assert offloaded["store_host"] <= offloaded["peak"] <= offloaded["predicted_peak"] <= (LAYERS + 1) * LAYER + 2 ** 20
