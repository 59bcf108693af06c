"""A Llama-architecture decoder split across ranks the way tensor parallelism
splits it: each rank holds its share of the query and KV heads and of the MLP
columns; the attention output and MLP down projections are row-parallel and
all-reduced. Weights are drawn from a fixed seed (no downloads). Attention
reads and writes a paged K/V cache (kv_cache.py); it uses
scaled_dot_product_attention where torch has it (2.x) and the same math by
hand where it does not (1.13). Not an inference server: one sequence per
forward call, so that a prefix computed alone or in a batch is bitwise the same."""

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass
class LlamaShape:
    layers: int = 2
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 4
    mlp: int = 512
    vocab: int = 512
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.hidden // self.heads


SHAPES = {
    "tiny": LlamaShape(),
    "small": LlamaShape(layers=4, hidden=512, heads=8, kv_heads=4, mlp=1408, vocab=2048),
    "8b": LlamaShape(layers=32, hidden=4096, heads=32, kv_heads=8, mlp=14336, vocab=128256,
                     rope_theta=500000.0),
}

QUERY_CHUNK = 4096  # queries per attention block: bounds the score matrix

# torch >= 2.5: fused attention kernels (flash) with a causal mask aligned
# to the last key (a chunk continuing a prefix). Older torch
# (1.13 has no scaled_dot_product_attention) takes the blocked path below.
try:
    from torch.nn.attention.bias import causal_lower_right
    FUSED_ATTENTION = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)
except ImportError:
    FUSED_ATTENTION = False


def all_reduce(x, world):
    """Sums the row-parallel partial outputs of every rank. gloo cannot add
    bf16 or CUDA tensors everywhere, so those travel as CPU float32."""
    if world == 1:
        return x
    if dist.get_backend() == "gloo" and (x.is_cuda or x.dtype != torch.float32):
        y = x.float().cpu()
        dist.all_reduce(y)
        return y.to(x.device, x.dtype)
    dist.all_reduce(x)
    return x


class TensorParallelLlama:
    """One rank's share of the model; forward() runs one sequence chunk."""

    def __init__(self, shape: LlamaShape, rank: int, world: int, device, dtype, seed=1234):
        if shape.heads % world or shape.kv_heads % world or shape.mlp % world:
            raise ValueError("heads, KV heads and MLP width must divide by %d ranks" % world)
        self.shape, self.rank, self.world = shape, rank, world
        self.device, self.dtype = torch.device(device), dtype
        self.local_heads, self.local_kv_heads = shape.heads // world, shape.kv_heads // world
        self.local_mlp = shape.mlp // world
        # A small model is the same whatever the rank count: every rank draws
        # each whole matrix from one seed and keeps its share. A large one
        # (8B) would take minutes that way, so each rank draws only its share,
        # from a seed of its own: the same model for the same rank count.
        large = shape.hidden * shape.mlp > 1 << 22
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed * 1009 + rank if large else seed)

        def weight(rows, cols, part=None, parts=world, axis=0):
            if not large:
                w = torch.randn(rows, cols, generator=gen, device=self.device) / cols ** 0.5
                if part is not None:
                    w = w.chunk(parts, dim=axis)[part]
            else:
                shape = [rows, cols]
                if part is not None:
                    shape[axis] //= parts
                w = torch.randn(*shape, generator=gen, device=self.device) / cols ** 0.5
            return w.to(dtype).contiguous()

        s, hd = shape, shape.head_dim
        self.embed = weight(s.vocab, s.hidden)
        self.layers = []
        for _ in range(s.layers):
            self.layers.append(dict(
                attn_norm=torch.ones(s.hidden, device=self.device, dtype=dtype),
                wq=weight(s.heads * hd, s.hidden, rank, axis=0),
                wk=weight(s.kv_heads * hd, s.hidden, rank, axis=0),
                wv=weight(s.kv_heads * hd, s.hidden, rank, axis=0),
                wo=weight(s.hidden, s.heads * hd, rank, axis=1),
                mlp_norm=torch.ones(s.hidden, device=self.device, dtype=dtype),
                w_gate=weight(s.mlp, s.hidden, rank, axis=0),
                w_up=weight(s.mlp, s.hidden, rank, axis=0),
                w_down=weight(s.hidden, s.mlp, rank, axis=1)))
        self.final_norm = torch.ones(s.hidden, device=self.device, dtype=dtype)
        self.lm_head = weight(s.vocab, s.hidden)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, hd, 2, device=self.device).float() / hd))
        self.inv_freq = inv

    def rms_norm(self, x, w, eps=1e-5):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def rotary(self, x, positions):
        """Rotates pairs (first half, second half) of each head by position."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def attention(self, q, k, v, start):
        """q [T, H, D] at positions start.., k/v [start + T, KVH, D]: causal."""
        global FUSED_ATTENTION
        t, total = q.shape[0], k.shape[0]
        if FUSED_ATTENTION:
            try:
                # KV heads repeated, not enable_gqa: with enable_gqa torch 2.11
                # ran the quadratic-memory math kernel, not flash
                group = self.local_heads // self.local_kv_heads
                k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
                q4, k4, v4 = (x.transpose(0, 1)[None] for x in (q, k, v))
                out = F.scaled_dot_product_attention(
                    q4, k4, v4, attn_mask=causal_lower_right(t, total) if start else None,
                    is_causal=not start)
                return out[0].transpose(0, 1).reshape(t, -1)
            except (RuntimeError, TypeError) as e:  # this build lacks a kernel for it
                print("model: fused attention failed (%s); using the blocked path" % e)
                FUSED_ATTENTION = False
        group = self.local_heads // self.local_kv_heads
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)   # [H, S, D]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        q = q.transpose(0, 1)                                  # [H, T, D]
        out = torch.empty_like(q)
        keys = torch.arange(total, device=q.device)
        for lo in range(0, t, QUERY_CHUNK):
            hi = min(t, lo + QUERY_CHUNK)
            allowed = keys[None, :] <= (start + torch.arange(lo, hi, device=q.device))[:, None]
            if hasattr(F, "scaled_dot_product_attention"):
                out[:, lo:hi] = F.scaled_dot_product_attention(q[:, lo:hi], k, v, attn_mask=allowed)
            else:
                scores = (q[:, lo:hi].float() @ k.float().transpose(1, 2)) * q.shape[-1] ** -0.5
                scores.masked_fill_(~allowed, float("-inf"))
                out[:, lo:hi] = (scores.softmax(-1) @ v.float()).to(q.dtype)
        return out.transpose(0, 1).reshape(t, -1)

    @torch.no_grad()
    def forward(self, tokens, start, pages, cache):
        """Runs tokens (positions start..) through every layer, writing their
        K/V into the chain's pages (page ids of the whole sequence from
        position 0) and reading the prefix's from them. Returns the last
        position's final hidden state [hidden] (the checkpoint's row)."""
        hd = self.shape.head_dim
        t = len(tokens)
        ids = torch.as_tensor(tokens, device=self.device, dtype=torch.long)
        positions = torch.arange(start, start + t, device=self.device)
        x = self.embed[ids]
        page_ids = cache.page_ids(pages, start + t)
        for li, w in enumerate(self.layers):
            h = self.rms_norm(x, w["attn_norm"])
            q = self.rotary((h @ w["wq"].t()).view(t, self.local_heads, hd), positions)
            k = self.rotary((h @ w["wk"].t()).view(t, self.local_kv_heads, hd), positions)
            v = (h @ w["wv"].t()).view(t, self.local_kv_heads, hd)
            cache.write(li, pages, start, k, v)
            keys, values = cache.read(li, page_ids, start + t)
            attn = self.attention(q, keys, values, start)
            x = x + all_reduce(attn @ w["wo"].t(), self.world)
            h = self.rms_norm(x, w["mlp_norm"])
            mlp = F.silu(h @ w["w_gate"].t()) * (h @ w["w_up"].t())
            x = x + all_reduce(mlp @ w["w_down"].t(), self.world)
        return self.rms_norm(x[-1], self.final_norm)

    def next_token(self, hidden):
        """Greedy: the vocabulary entry with the largest logit."""
        return int(torch.argmax((hidden @ self.lm_head.t()).float()))
