"""The catalog's model classes (random weights, tiny) and the optional third-party factories."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


class MLP(nn.Module):
    """Linear -> GELU -> LayerNorm -> Linear -> GELU -> Linear."""

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(F.gelu(self.fc1(x)))
        return self.fc3(F.gelu(self.fc2(x)))


class _Residual(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class SmallCNN(nn.Module):
    """Conv + batch norm + max pool, one residual block, global average pool, linear head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.block = _Residual(8)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.stem(x))), 2)
        x = self.block(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block; attention through ``scaled_dot_product_attention``."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class GRUTagger(nn.Module):
    """One-layer GRU over a sequence, a linear head on every step."""

    def __init__(self, d_in: int = 16, hidden: int = 32, tags: int = 8):
        super().__init__()
        self.rnn = nn.GRU(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out)


class Recommender(nn.Module):
    """EmbeddingBag (sum) over sparse ids, concatenated with dense features, MLP top."""

    ROWS = 100

    def __init__(self, dim: int = 16):
        super().__init__()
        self.bag = nn.EmbeddingBag(self.ROWS, dim, mode="sum")
        self.dense = nn.Linear(8, dim)
        self.top = nn.Sequential(nn.Linear(2 * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, idx: torch.Tensor, offsets: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        e = self.bag(idx, offsets).to(dense.dtype)
        return self.top(torch.cat([e, F.relu(self.dense(dense))], dim=1))


class _DecoderLayer(EncoderBlock):
    """The encoder block's layers, run causally with a KV cache."""

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None):  # type: ignore[override]
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and t > 1)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x)))), (k, v)


class TinyGPT(nn.Module):
    """A 2-layer GPT-style decoder; ``forward(tokens)`` gives logits, :func:`generate` uses a KV cache."""

    VOCAB = 64

    def __init__(self, d: int = 32, heads: int = 4, layers: int = 2, ctx: int = 32):
        super().__init__()
        self.tok = nn.Embedding(self.VOCAB, d)
        self.pos = nn.Embedding(ctx, d)
        self.layers = nn.ModuleList(_DecoderLayer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, self.VOCAB, bias=False)

    def step(self, tokens: torch.Tensor, start: int, caches: list | None):
        # position ids from the attention mask (as Hugging Face decoders do): a running count
        pos = torch.ones_like(tokens).cumsum(dim=1) - 1 + start
        x = self.tok(tokens) + self.pos(pos)
        new = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, None if caches is None else caches[i])
            new.append(kv)
        return self.head(self.ln(x)), new

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.step(tokens, 0, None)[0]


def generate(model: TinyGPT, tokens: torch.Tensor, steps: int = 4) -> torch.Tensor:
    """Greedy decoding with a KV cache: the next token is the argmax of the last logits."""
    logits, caches = model.step(tokens, 0, None)
    out = [tokens]
    start = tokens.shape[1]
    for _ in range(steps):
        nxt = logits[:, -1, :].float().argmax(dim=-1, keepdim=True)
        out.append(nxt)
        logits, caches = model.step(nxt, start, caches)
        start += 1
    return torch.cat(out, dim=1)


def resnet18_factory(dtype: torch.dtype, seed: int):
    """torchvision resnet18 with random weights on 32x32 inputs (only when torchvision is installed)."""
    import torchvision  # noqa: PLC0415 - optional

    from .workload import Workload, ce_logits, float_input, tolerance

    torch.manual_seed(seed)
    model = torchvision.models.resnet18(num_classes=10).to(dtype).eval()
    mk = lambda b: (float_input((b, 3, 32, 32), dtype, seed),)  # noqa: E731
    rtol, atol = tolerance({"float32": (1e-3, 1e-3), "bfloat16": (1e-1, 1e-1), "float16": (3e-2, 3e-2)}, dtype)
    return Workload("resnet18", model, mk(2), ce_logits, rtol, atol, 2, f"x: (2, 3, 32, 32) {dtype}, randn, seed {seed + 1}",
                    make_inputs=mk)


def bert_factory(dtype: torch.dtype, seed: int):
    """A 2-layer BertModel from a config, random weights (only when transformers is installed)."""
    import transformers  # noqa: PLC0415 - optional

    from .workload import Workload, mse, tolerance

    torch.manual_seed(seed)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  vocab_size=100, max_position_embeddings=32)
    model = transformers.BertModel(cfg).to(dtype).eval()

    def mk(b: int) -> tuple:
        return (torch.randint(0, 100, (b, 16), generator=torch.Generator().manual_seed(seed + 1)),)

    class _Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    rtol, atol = tolerance({"float32": (1e-3, 1e-3), "bfloat16": (1e-1, 1e-1), "float16": (3e-2, 3e-2)}, dtype)
    return Workload("bert2", _Wrap(model), mk(2), mse, rtol, atol, 2, f"ids: (2, 16) int64 randint(0,100), seed {seed + 1}",
                    make_inputs=mk)
