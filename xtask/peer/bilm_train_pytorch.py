"""PyTorch peer of `cargo xtask bench train`: the same biLM training step as elmo-rs (char CNN +
highway + projection shared by both directions, LSTMP stacks with clips and residuals, dropout,
tied softmax, sampled with TensorFlow's unique log-uniform sampler when the vocabulary is larger
than twice the negatives, Adagrad with initial accumulator 1.0, global-norm clipping 10), on a
synthetic Zipfian corpus. Prints `RESULT tokens_per_s=... peak_rss_mib=...` (targets of both
directions per second). `--device cuda` runs it on the GPU (timed after `torch.cuda.synchronize`;
`peak_gpu_mib` is `torch.cuda.max_memory_allocated`)."""

import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F

PRESETS = {
    "tiny": dict(d_char=8, filters=[[1, 16], [2, 16], [3, 32]], n_highway=1, d_cell=64, d_proj=32),
    "small": dict(d_char=16, filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                  n_highway=1, d_cell=1024, d_proj=128),
    "medium": dict(d_char=16, filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                   n_highway=1, d_cell=2048, d_proj=256),
    "original": dict(d_char=16, filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                     n_highway=2, d_cell=4096, d_proj=512),
}


def shape_of(preset):
    """A preset name (2 layers per direction), or an elmo-rs config JSON (its `model` section)."""
    if not preset.endswith(".json"):
        return dict(PRESETS[preset], n_layers=2)
    with open(preset) as f:
        model = json.load(f)["model"]
    lstm, cnn = model["lstm"], model["char_cnn"]
    return dict(d_char=cnn["embedding"]["dim"], filters=cnn["filters"], n_highway=cnn["n_highway"],
                d_cell=lstm["dim"], d_proj=lstm["projection_dim"], n_layers=lstm.get("n_layers", 2))


def char_ids(word):
    data = list(word.encode("utf-8"))[:48]
    ids = [258] + data + [259] + [260] * (50 - 2 - len(data))
    return [c + 1 for c in ids]


class Lstmp(torch.nn.Module):
    def __init__(self, d_in, d_cell, d_proj):
        super().__init__()
        b = 1.0 / math.sqrt(d_cell)
        self.w_x = torch.nn.Parameter(torch.empty(d_in, 4 * d_cell).uniform_(-b, b))
        self.w_h = torch.nn.Parameter(torch.empty(d_proj, 4 * d_cell).uniform_(-b, b))
        self.bias = torch.nn.Parameter(torch.zeros(4 * d_cell))
        self.w_p = torch.nn.Parameter(torch.empty(d_cell, d_proj).uniform_(-b, b))
        self.d_cell = d_cell

    def forward(self, x, state):
        h, c = state
        gx = x @ self.w_x
        outs = []
        for t in range(x.shape[1]):
            g = gx[:, t] + h @ self.w_h + self.bias
            i, f, j, o = g.chunk(4, dim=1)
            c = (torch.sigmoid(i) * torch.tanh(j) + torch.sigmoid(f) * c).clamp(-3, 3)
            h = ((torch.sigmoid(o) * torch.tanh(c)) @ self.w_p).clamp(-3, 3)
            outs.append(h)
        return torch.stack(outs, 1), (h, c)


class BiLm(torch.nn.Module):
    def __init__(self, p, n_vocab, dropout):
        super().__init__()
        self.embed = torch.nn.Embedding(262, p["d_char"])
        self.convs = torch.nn.ModuleList(torch.nn.Conv1d(p["d_char"], n, w) for w, n in p["filters"])
        n_f = sum(n for _, n in p["filters"])
        self.highways = torch.nn.ModuleList(torch.nn.Linear(n_f, 2 * n_f) for _ in range(p["n_highway"]))
        self.proj = torch.nn.Linear(n_f, p["d_proj"])
        self.fwd = torch.nn.ModuleList(Lstmp(p["d_proj"], p["d_cell"], p["d_proj"]) for _ in range(p["n_layers"]))
        self.bwd = torch.nn.ModuleList(Lstmp(p["d_proj"], p["d_cell"], p["d_proj"]) for _ in range(p["n_layers"]))
        self.softmax_w = torch.nn.Parameter(torch.randn(n_vocab, p["d_proj"]) / math.sqrt(p["d_proj"]))
        self.softmax_b = torch.nn.Parameter(torch.zeros(n_vocab))
        self.dropout = dropout

    def encode(self, chars):
        unique, inverse = torch.unique(chars.reshape(-1, 50), dim=0, return_inverse=True)
        x = self.embed(unique).transpose(1, 2)
        x = torch.cat([F.relu(conv(x).max(dim=2).values) for conv in self.convs], 1)
        for hw in self.highways:
            t, g = hw(x).chunk(2, dim=1)
            g = torch.sigmoid(g)
            x = g * F.relu(t) + (1 - g) * x
        return self.proj(x)[inverse].reshape(*chars.shape[:2], -1)

    def stack(self, layers, x, states):
        new = []
        for k, layer in enumerate(layers):
            inp = F.dropout(x, self.dropout, self.training)
            out, s = layer(inp, states[k])
            new.append((s[0].detach(), s[1].detach()))
            x = out + inp if k > 0 else out
        return F.dropout(x, self.dropout, self.training), new


def sampled_nll(model, hidden, targets, n_neg, n_vocab):
    if n_vocab <= 2 * n_neg:
        return F.cross_entropy(hidden @ model.softmax_w.t() + model.softmax_b, targets, reduction="mean")
    log_range = math.log(n_vocab + 1)
    seen, tries = set(), 0
    while len(seen) < n_neg:
        need = n_neg - len(seen)
        draws = (np.exp(np.random.rand(need) * log_range).astype(np.int64) - 1).clip(0, n_vocab - 1)
        tries += need
        seen.update(draws.tolist())
    ids = torch.tensor(sorted(seen)[:n_neg], device=hidden.device)

    def log_q(k):
        p = torch.log((k.double() + 2) / (k.double() + 1)) / log_range
        return torch.log(-torch.expm1(tries * torch.log1p(-p))).float()

    true = (hidden * model.softmax_w[targets]).sum(1) + model.softmax_b[targets] - log_q(targets)
    samp = hidden @ model.softmax_w[ids].t() + model.softmax_b[ids] - log_q(ids)
    samp = samp.masked_fill(ids[None, :] == targets[:, None], -1e9)
    logits = torch.cat([true[:, None], samp], 1)
    return -F.log_softmax(logits, 1)[:, 0].mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--unroll-steps", type=int, default=20)
    ap.add_argument("--vocab-size", type=int, default=50000)
    ap.add_argument("--negatives", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--amp", choices=["off", "bf16", "f16"], default="off",
                    help="automatic mixed precision: the forward pass and loss under torch.autocast "
                         "(f16 with a GradScaler), f32 weights and optimizer state")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    np.random.seed(0)
    p = shape_of(a.preset)
    n_vocab = a.vocab_size
    words = [f"w{k}" for k in range(n_vocab - 3)]
    table = torch.tensor([char_ids(w) for w in words], device=dev)
    model = BiLm(p, n_vocab, 0.1).to(dev)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0, eps=0.0)
    B, T = a.batch_size, a.unroll_steps
    log_range = math.log(len(words) + 1)

    def window():
        ids = (np.exp(np.random.rand(B, T + 1) * log_range).astype(np.int64) - 1).clip(0, len(words) - 1)
        ids = torch.from_numpy(ids).to(dev)
        return table[ids[:, :T]], ids[:, 1:] + 3

    zero = lambda: [(torch.zeros(B, p["d_proj"], device=dev), torch.zeros(B, p["d_cell"], device=dev))
                    for _ in range(p["n_layers"])]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    states = [zero(), zero()]
    amp_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(a.amp)
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp == "f16")
    count, start = 0, time.time()
    for step in range(a.steps + 1):
        if step == 1:
            sync()
            count, start = 0, time.time()
        (cf, tf), (cb, tb) = window(), window()
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            emb = model.encode(torch.cat([cf, cb], 0))
            top_f, states[0] = model.stack(model.fwd, emb[:B], states[0])
            top_b, states[1] = model.stack(model.bwd, emb[B:], states[1])
            loss = 0.5 * (sampled_nll(model, top_f.reshape(B * T, -1), tf.reshape(-1), a.negatives, n_vocab)
                          + sampled_nll(model, top_b.reshape(B * T, -1), tb.reshape(-1), a.negatives, n_vocab))
        states = [[(h.float(), c.float()) for h, c in direction] for direction in states]
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        count += 2 * B * T
    sync()
    seconds = time.time() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu = f" peak_gpu_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if dev.type == "cuda" else ""
    print(f"RESULT tokens_per_s={count / seconds:.1f} peak_rss_mib={rss:.0f}{gpu} loss={loss.item():.3f} amp={a.amp}")


if __name__ == "__main__":
    main()
