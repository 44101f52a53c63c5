"""Before any SGLang import: the CPU stand-ins on the path (this process and the ones SGLang spawns) and SGLang's
CPU engine selected, exactly as `acceptmoe.serving.sglang.cpu.prepare_process` does for users."""
from acceptmoe.serving.sglang import cpu

cpu.prepare_process()
