"""The device kit's peer: PyTorch's scaled_dot_product_attention over the decode shape of the
kit's benchmark (one f16 query per sequence and query head, dense f16 K/V of --tokens tokens
with grouped-query heads, --layers layers each read once per step), the attention a user would
otherwise call. Prints name=value lines; the time is the fastest step of --reps after a warm-up,
between CUDA events."""
import argparse

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("batch", 32), ("q_heads", 32), ("kv_heads", 8), ("head_dim", 128),
                          ("tokens", 8192), ("layers", 8), ("reps", 10)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    a = parser.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(1)
    q = torch.rand(a.batch, a.q_heads, 1, a.head_dim, device=device, dtype=torch.float16) * 2 - 1
    kv = [(torch.rand(a.batch, a.kv_heads, a.tokens, a.head_dim, device=device,
                      dtype=torch.float16) * 2 - 1,
           torch.rand(a.batch, a.kv_heads, a.tokens, a.head_dim, device=device,
                      dtype=torch.float16) * 2 - 1) for _ in range(a.layers)]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for rep in range(a.reps + 1):
        start.record()
        for k, v in kv:
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        stop.record()
        stop.synchronize()
        if rep > 0:
            best = min(best, start.elapsed_time(stop) * 1e-3)
    kv_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
    print(f"peer_torch_version={torch.__version__}")
    print(f"peer_sdpa_decode_seconds={best:.6g}")
    print(f"peer_sdpa_kv_gbps={kv_bytes / best / 1e9:.4g}")


if __name__ == "__main__":
    main()
