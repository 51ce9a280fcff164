"""PyTorch peer for `cargo xtask bench embed`: ELMo biLM inference written the way AllenNLP 2.10.1
runs it (`_ElmoCharacterEncoder`, `Highway`, `LstmCellWithProjection`'s per-step loop over the
length-sorted batch), random weights in the same shapes, batches of 15-25-token sentences
(64 by default) on the CPU or a CUDA device, every layer read back to the host as `elmo embed`
does.

    python3 xtask/peer/elmo_pytorch.py SHAPE THREADS [BATCHES] [BATCH_SIZE] [DEVICE] [PRECISION]

PRECISION `f32` (the default) or `bf16`: the biLM under `torch.autocast(DEVICE, torch.bfloat16)`,
as a user would wrap AllenNLP's module (its products in bf16, on AMX's tiles through oneDNN on
an Intel Xeon that has them; the layers read back as float32).

Prints `RESULT shape=... threads=... batch=... device=... tokens_per_s=... peak_rss_mib=...
first_pass_s=...` (and `peak_gpu_mib` on CUDA; on CUDA the timed batches run once untimed first,
whose seconds `first_pass_s` says).

    python3 xtask/peer/elmo_pytorch.py SHAPE THREADS tokens VOCAB [BATCH_SIZE] [DEVICE]

The peer of `elmo tokens` (bilm-tf's `dump_token_embeddings`, batched): every line of VOCAB alone
through the token encoder, AllenNLP's char ids, BATCH_SIZE (4096) tokens a call, read back.
"""
import resource
import sys
import time

import torch
import torch.nn.functional as fn

torch.set_grad_enabled(False)
shape = sys.argv[1]
threads = int(sys.argv[2])
vocab_file = sys.argv.pop(4) if len(sys.argv) > 4 and sys.argv[3] == "tokens" else None
batches = int(sys.argv[3]) if len(sys.argv) > 3 and not vocab_file else 3
batch_size = int(sys.argv[4]) if len(sys.argv) > 4 else (4096 if vocab_file else 64)
device = torch.device(sys.argv[5] if len(sys.argv) > 5 else "cpu")
precision = sys.argv[6] if len(sys.argv) > 6 else "f32"
assert precision in ("f32", "bf16"), f"precision {precision}: f32 or bf16"
torch.set_num_threads(threads)
C, P, N_HIGHWAY = {"small": (1024, 128, 1), "medium": (2048, 256, 1), "original": (4096, 512, 2)}[shape]
FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
E, F, CLIP = 16, 2048, 3.0
g = torch.Generator().manual_seed(0)


def rand(*s):
    return (torch.randn(*s, generator=g) * 0.05).to(device)


char_embedding = rand(262, E)
convolutions = [(rand(n, E, w), rand(n)) for w, n in FILTERS]
highways = [(rand(2 * F, F), rand(2 * F)) for _ in range(N_HIGHWAY)]
projection = (rand(P, F), rand(P))
lstms = [[dict(wi=rand(4 * C, P), ws=rand(4 * C, P), b=rand(4 * C), wp=rand(P, C)) for _ in range(2)] for _ in range(2)]


def token_encoder(ids):
    b, t, _ = ids.shape
    x = fn.embedding(ids.view(-1, 50), char_embedding).transpose(1, 2)
    h = torch.cat([torch.relu(torch.max(fn.conv1d(x, w, bias), dim=-1)[0]) for w, bias in convolutions], -1)
    for w, bias in highways:
        nonlinear, gate = fn.linear(h, w, bias).chunk(2, dim=-1)
        gate = torch.sigmoid(gate)
        h = gate * h + (1 - gate) * torch.relu(nonlinear)
    return fn.linear(h, *projection).view(b, t, -1)


def lstm_layer(x, lengths, p, forward):
    """AllenNLP's LstmCellWithProjection.forward (lengths sorted in decreasing order)."""
    b, t_max, _ = x.shape
    out = x.new_zeros(b, t_max, P)
    memory, state = x.new_zeros(b, C), x.new_zeros(b, P)
    index = b - 1 if forward else 0
    for step in range(t_max):
        t = step if forward else t_max - step - 1
        if forward:
            while lengths[index] <= t:
                index -= 1
        else:
            while index < len(lengths) - 1 and lengths[index + 1] > t:
                index += 1
        prev_memory, prev_state = memory[: index + 1].clone(), state[: index + 1].clone()
        pi = fn.linear(x[: index + 1, t], p["wi"])
        ps = fn.linear(prev_state, p["ws"], p["b"])
        i = torch.sigmoid(pi[:, :C] + ps[:, :C])
        f = torch.sigmoid(pi[:, C : 2 * C] + ps[:, C : 2 * C])
        j = torch.tanh(pi[:, 2 * C : 3 * C] + ps[:, 2 * C : 3 * C])
        o = torch.sigmoid(pi[:, 3 * C :] + ps[:, 3 * C :])
        m = torch.clamp(i * j + f * prev_memory, -CLIP, CLIP)
        h = torch.clamp(fn.linear(o * torch.tanh(m), p["wp"]), -CLIP, CLIP)
        memory, state = memory.clone(), state.clone()
        memory[: index + 1], state[: index + 1] = m, h
        out[: index + 1, t] = h
    return out


def bilm(ids, lengths):
    """Every layer, read back to the host (float32)."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        return [layer.float().cpu() for layer in bilm_layers(ids, lengths)]


def bilm_layers(ids, lengths):
    x = token_encoder(ids.to(device))
    fwd, bwd = x, x
    layers = [torch.cat([x, x], -1)]
    for layer in range(2):
        new_fwd = lstm_layer(fwd, lengths, lstms[0][layer], True)
        new_bwd = lstm_layer(bwd, lengths, lstms[1][layer], False)
        if layer:
            new_fwd, new_bwd = new_fwd + fwd, new_bwd + bwd
        fwd, bwd = new_fwd, new_bwd
        layers.append(torch.cat([fwd, bwd], -1))
    return layers


def batch(seed):
    gen = torch.Generator().manual_seed(seed)
    lengths = sorted((torch.randint(15, 26, (batch_size,), generator=gen) + 2).tolist(), reverse=True)
    ids = torch.zeros(batch_size, lengths[0], 50, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, 262, (n, 50), generator=gen)
    return ids, lengths


def char_ids(token):
    """AllenNLP's `ELMoCharacterMapper.convert_word_to_char_ids`, then +1."""
    if token in ("<S>", "</S>"):
        ids = [258, 256 if token == "<S>" else 257, 259] + [260] * 47
    else:
        chars = list(token.encode("utf-8")[:48])
        ids = [258] + chars + [259] + [260] * (48 - len(chars))
    return [i + 1 for i in ids]


if vocab_file:
    with open(vocab_file, encoding="utf-8") as f:
        words = [line.strip() for line in f if line.strip() != "!!!MAXTERMID"]
    ids = torch.tensor([char_ids(w) for w in words]).view(len(words), 1, 50)
    token_encoder(ids[:batch_size].to(device)).cpu()
    start = time.perf_counter()
    rows = [token_encoder(ids[i : i + batch_size].to(device)).cpu() for i in range(0, len(words), batch_size)]
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"RESULT shape={shape} threads={threads} batch={batch_size} device={device} "
        f"tokens={len(words)} seconds={seconds:.3f} tokens_per_s={len(words) / seconds:.1f} "
        f"peak_rss_mib={rss:.0f}"
    )
    sys.exit(0)

data = [batch(s) for s in range(batches)]
tokens = sum(sum(l) - 2 * len(l) for _, l in data)
# On CUDA, as elmo-rs on a GPU: one untimed pass over the timed batches first (cuBLAS's first
# call per shape, the caching allocator's first blocks), so both measure a long run's steady state.
first_pass = 0.0
if device.type == "cuda":
    start = time.perf_counter()
    for ids, lengths in data:
        bilm(ids, lengths)
    first_pass = time.perf_counter() - start
bilm(*batch(999))
start = time.perf_counter()
for ids, lengths in data:
    bilm(ids, lengths)
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
gpu = f" peak_gpu_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if device.type == "cuda" else ""
print(
    f"RESULT shape={shape} threads={threads} batch={batch_size} device={device} precision={precision} tokens={tokens} "
    f"seconds={seconds:.3f} tokens_per_s={tokens / seconds:.1f} peak_rss_mib={rss:.0f}{gpu} "
    f"first_pass_s={first_pass:.3f}"
)
