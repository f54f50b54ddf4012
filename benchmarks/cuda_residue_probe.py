"""What a process still holds on a GPU once its tensors are freed: the floor of the sleep residue.

A vLLM engine asleep (level 1) has given back its weights and KV cache but keeps its CUDA
context, its CUDA-graph pools, cuBLAS workspaces and NCCL buffers. This probe measures
the parts a plain PyTorch process can show, on GPU 0, as the device's used memory (NVML)
above what it was before the process touched CUDA:

1. the CUDA context (first tensor);
2. + cuBLAS (a bf16 matmul, every tensor freed, the caching allocator emptied);
3. after 8 GiB allocated and freed (the allocator's cache emptied): nothing should stay;
4. + CUDA graphs of a small bf16 MLP at 8 batch sizes kept alive (vLLM keeps its graphs
   while asleep), inputs freed;
5. + a one-rank NCCL process group after one all-reduce.

    python3 benchmarks/cuda_residue_probe.py --out results/   # writes cuda_residue.json

Needs PyTorch with CUDA and NVML (`nvidia-ml-py`); no Docker, no composer import.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

MIB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used() -> int:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

    base = used()
    rows: list[dict[str, object]] = []

    def record(stage: str) -> None:
        row = {"stage": stage, "held_mib": round((used() - base) / MIB, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)

    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    record("cuda context")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    del a
    torch.cuda.empty_cache()
    record("+ cublas, tensors freed")
    big = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    big.fill_(1)
    torch.cuda.synchronize()
    record("8 GiB allocated")
    del big
    torch.cuda.empty_cache()
    record("8 GiB freed, cache emptied")
    mlp = torch.nn.Sequential(torch.nn.Linear(4096, 11008), torch.nn.SiLU(), torch.nn.Linear(11008, 4096)).to(
        "cuda", torch.bfloat16
    )
    graphs = []
    pool = torch.cuda.graph_pool_handle()
    with torch.no_grad():
        for batch in (256, 128, 64, 32, 16, 8, 4, 1):
            x = torch.randn(batch, 4096, device="cuda", dtype=torch.bfloat16)
            mlp(x)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                mlp(x)
            graphs.append(graph)
    weights = sum(p.numel() * p.element_size() for p in mlp.parameters())
    mlp.to("meta")
    torch.cuda.empty_cache()
    record("+ cuda graphs kept (8 sizes), MLP weights dropped")
    rows.append({"stage": "mlp weights (dropped)", "held_mib": round(weights / MIB, 1)})
    try:
        import torch.distributed as dist

        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29555", rank=0, world_size=1)
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        del t
        torch.cuda.empty_cache()
        record("+ nccl one-rank group after an all-reduce")
        dist.destroy_process_group()
    except Exception as err:  # a sandbox without NCCL: say so, keep the rest
        rows.append({"stage": "nccl", "error": f"{type(err).__name__}: {err}"})
    info = {
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "total_mib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / MIB),
        "torch": torch.__version__,
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_residue.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in info.items() if k != "rows"}))


if __name__ == "__main__":
    main()
