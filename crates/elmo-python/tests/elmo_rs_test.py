"""The `elmo_rs` module against AllenNLP 2.10.1's outputs of fixtures/tiny (see fixtures/README.md).

Run by tests/python_module.rs: `python3 elmo_rs_test.py FIXTURES_TINY TMPDIR`
with the built module on PYTHONPATH. Every check raises AssertionError naming what differs.
"""

import json
import os
import sys

import numpy as np

import elmo_rs

TOLERANCE = 1e-5
# AllenNLP's carried-state batches, as the Rust parity tests (docs/architecture.md).
STATEFUL_TOLERANCE = 3e-5


def close(name, got, want, tolerance=TOLERANCE):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, AllenNLP's {want.shape}"
    assert got.dtype == np.float32, f"{name}: dtype {got.dtype}"
    worst = float(np.max(np.abs(got - want))) if got.size else 0.0
    assert worst <= tolerance, f"{name}: differs from AllenNLP by {worst:.3g}"


def raises(name, kind, call, *words):
    try:
        call()
    except kind as error:
        text = str(error)
        for word in words:
            assert word in text, f"{name}: {kind.__name__} {text!r} does not name {word!r}"
        return
    raise AssertionError(f"{name}: no {kind.__name__}")


def softmax_mix(parameters, layers):
    """AllenNLP's ScalarMix of `layers` (3, ...) with fixed pre-softmax `parameters`, γ = 1."""
    weights = np.exp(parameters - np.max(parameters))
    weights /= weights.sum()
    return np.tensordot(weights.astype(np.float64), layers.astype(np.float64), 1).astype(np.float32)


def check_stateful_calls(name, stateful, load):
    """AllenNLP's four calls of one `Elmo` module (its default) through `stateful`, a fresh
    `Elmo(..., stateful=True)`: the equal average of the layers that fixtures/tiny/stateful holds,
    zero at padding."""
    for call in range(4):
        ids = load("stateful", f"call{call}_char_ids")
        layers = np.stack([load("stateful", f"call{call}_layer{k}") for k in range(3)])
        bilm_mask = load("stateful", f"call{call}_mask")
        out = stateful(ids)["elmo_representations"][0]
        for i in range(ids.shape[0]):
            n = int(bilm_mask[i].sum()) - 2
            want = softmax_mix(np.zeros(3), layers[:, i, 1 : n + 1])
            close(f"{name} call {call} [{i}]", out[i, :n], want, STATEFUL_TOLERANCE)
            assert not out[i, n:].any(), f"{name} call {call} [{i}]: padding not zero"


def check_elmo_module(tiny, sentences, options, weights):
    """`elmo_rs.Elmo` against AllenNLP's `Elmo` module (eval mode) on the same char ids."""
    load = lambda folder, name: np.load(os.path.join(tiny, folder, f"{name}.npy"))
    elmo = elmo_rs.Elmo(options, weights, 1, dropout=0)
    assert elmo.get_output_dim() == 32 and not elmo.stateful, repr(elmo)
    assert repr(elmo).startswith("Elmo("), repr(elmo)
    norm = elmo_rs.Elmo(options, weights, 2, do_layer_norm=True)
    mixed = elmo_rs.Elmo(options, weights, scalar_mix_parameters=[1.0, -0.5, 2.0])
    kept = elmo_rs.Elmo(options, weights, keep_sentence_boundaries=True,
                        scalar_mix_parameters=[0.25, 0.0, -1.0])
    for folder in ("main", "edge"):
        ids = load(folder, "char_ids")
        want, want_mask = load(folder, "elmo"), load(folder, "elmo_mask")
        out = elmo(ids)
        assert sorted(out) == ["elmo_representations", "mask"], sorted(out)
        assert len(out["elmo_representations"]) == 1
        close(f"Elmo {folder}", out["elmo_representations"][0], want)
        mask = out["mask"]
        assert mask.dtype == np.bool_ and np.array_equal(mask, want_mask), f"Elmo {folder} mask"
        # forward, a nested list and a 4-d batch give the same.
        close(f"Elmo.forward {folder}", elmo.forward(ids)["elmo_representations"][0], want)
        close(f"Elmo of a list {folder}", elmo(ids.tolist())["elmo_representations"][0], want)
        b, t = ids.shape[:2]
        four = elmo(ids.reshape(2, b // 2, t, 50))
        close(f"Elmo 4-d {folder}", four["elmo_representations"][0], want.reshape(2, b // 2, t, -1))
        assert np.array_equal(four["mask"], want_mask.reshape(2, b // 2, t))
        # AllenNLP's layer norm, in each of two outputs.
        two = norm(ids)["elmo_representations"]
        assert len(two) == 2
        for k, got in enumerate(two):
            close(f"Elmo layer norm {folder} [{k}]", got, load(folder, "elmo_layer_norm"))
        # Fixed mix weights, with and without the boundary positions.
        layers = np.stack([load(folder, f"layer{k}_no_bos_eos") for k in range(3)])
        close(f"Elmo scalar_mix_parameters {folder}", mixed(ids)["elmo_representations"][0],
              softmax_mix(np.array([1.0, -0.5, 2.0]), layers))
        layers = np.stack([load(folder, f"bilm_layer{k}") for k in range(3)])
        out = kept(ids)
        close(f"Elmo keep_sentence_boundaries {folder}", out["elmo_representations"][0],
              softmax_mix(np.array([0.25, 0.0, -1.0]), layers))
        assert np.array_equal(out["mask"], load(folder, "bilm_mask")), f"{folder} kept mask"

    # vocab_to_cache: word_inputs are embedded instead of the char ids (here all padding), and
    # where a word id is not in the vocabulary the char ids serve, as in AllenNLP.
    main = sentences["main"]
    vocab = ["@@PADDING@@"] + sorted({token for sentence in main for token in sentence})
    words = np.zeros((len(main), max(map(len, main))), dtype=np.int64)
    for i, sentence in enumerate(main):
        words[i, : len(sentence)] = [vocab.index(token) for token in sentence]
    cached = elmo_rs.Elmo(options, weights, vocab_to_cache=vocab)
    ids, want = load("main", "char_ids"), load("main", "elmo")
    out = cached(np.zeros_like(ids), word_inputs=words)
    close("Elmo word_inputs", out["elmo_representations"][0], want)
    assert np.array_equal(out["mask"], load("main", "elmo_mask"))
    unknown = words.copy()
    unknown[0, 0] = len(vocab)
    close("Elmo word_inputs off the vocabulary", cached(ids, unknown)["elmo_representations"][0], want)
    raises("word_inputs of another shape", ValueError, lambda: cached(ids, words[:, :3]), "word_inputs")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        close("Elmo word_inputs without a vocabulary", elmo(ids, words)["elmo_representations"][0], want)
    assert any("vocab_to_cache" in str(w.message) for w in caught), [str(w.message) for w in caught]

    # Stateful: AllenNLP's four calls of one module (its default), the equal average of the
    # layers that fixtures/tiny/stateful holds; then from zero again after reset_state.
    stateful = elmo_rs.Elmo(options, weights, stateful=True)
    assert stateful.stateful
    check_stateful_calls("Elmo stateful", stateful, load)
    stateful.reset_state()
    close("Elmo stateful after reset_state", stateful(load("main", "char_ids"))["elmo_representations"][0],
          load("main", "elmo"))

    # No sentences, and sentences of no tokens.
    out = elmo(np.zeros((0, 5, 50), dtype=np.int64))
    assert out["elmo_representations"][0].shape == (0, 5, 32) and out["mask"].shape == (0, 5)
    out = elmo(np.zeros((2, 0, 50), dtype=np.int64))
    assert out["elmo_representations"][0].shape == (2, 0, 32) and out["mask"].shape == (2, 0)

    # Bad input and arguments, named.
    ids = load("main", "char_ids")
    bad = ids.copy()
    bad[1, 2, 7] = 262
    raises("Elmo of an id past the vocabulary", elmo_rs.ElmoError, lambda: elmo(bad),
           "sentence 1", "token 2", "slot 7", "262")
    gap = ids.copy()
    gap[1, 9] = ids[0, 0]  # sentence 1 has 8 tokens: a real one after its padding
    raises("Elmo of a gap", elmo_rs.ElmoError, lambda: elmo(gap), "sentence 1", "token 8", "token 9")
    raises("Elmo of 49 slots", ValueError, lambda: elmo(ids[:, :, :49]), "50")
    raises("Elmo of tokens without slots", ValueError, lambda: elmo(ids[:, :, 0]), "50")
    raises("Elmo of floats", TypeError, lambda: elmo(ids.astype(np.float32)), "float32")
    raises("requires_grad", ValueError,
           lambda: elmo_rs.Elmo(options, weights, 1, requires_grad=True), "PyTorch")
    raises("module", ValueError, lambda: elmo_rs.Elmo(options, weights, module=object()), "module")
    raises("scalar_mix_parameters", ValueError,
           lambda: elmo_rs.Elmo(options, weights, scalar_mix_parameters=[0.0, 1.0]), "3 layers")
    raises("scalar_mix_parameters NaN", ValueError,
           lambda: elmo_rs.Elmo(options, weights, scalar_mix_parameters=[0.0, float("nan"), 1.0]),
           "NaN")
    raises("dropout", ValueError, lambda: elmo_rs.Elmo(options, weights, dropout=1.5), "1.5")
    raises("no output", ValueError, lambda: elmo_rs.Elmo(options, weights, 0), "positive")


def check_on_wgpu(tiny, sentences, options, weights, allennlp_vectors):
    """Both classes with `backend="wgpu"` (lavapipe in CI, where ELMO_REQUIRE_WGPU=1 makes a
    missing adapter a failure): the fused GPU kernels against AllenNLP."""
    try:
        elmo = elmo_rs.Elmo(options, weights, backend="wgpu")
    except elmo_rs.ElmoError as error:
        if os.environ.get("ELMO_REQUIRE_WGPU"):
            raise
        print(f"elmo_rs on wgpu: not run ({error})")
        return
    assert "wgpu" in repr(elmo), repr(elmo)
    load = lambda folder, name: np.load(os.path.join(tiny, folder, f"{name}.npy"))
    for folder in ("main", "edge"):
        out = elmo(load(folder, "char_ids"))
        close(f"Elmo on wgpu {folder}", out["elmo_representations"][0], load(folder, "elmo"))
        assert np.array_equal(out["mask"], load(folder, "elmo_mask")), f"wgpu {folder} mask"
    assert elmo(np.zeros((0, 5, 50), dtype=np.int64))["elmo_representations"][0].shape == (0, 5, 32)
    stateful = elmo_rs.Elmo(options, weights, backend="wgpu", stateful=True)
    check_stateful_calls("Elmo on wgpu, stateful", stateful, load)
    embedder = elmo_rs.ElmoEmbedder(options, weights, backend="wgpu")
    for folder in ("main", "edge"):
        got = embedder.embed_batch(sentences[folder])
        for i, (g, w) in enumerate(zip(got, allennlp_vectors(sentences[folder], folder))):
            close(f"ElmoEmbedder on wgpu {folder}[{i}]", g, w)


def main(tiny, tmp, base_url=None):
    sentences = json.load(open(os.path.join(tiny, "sentences.json"), encoding="utf-8"))
    options = os.path.join(tiny, "options.json")
    weights = os.path.join(tiny, "weights.hdf5")

    def allennlp_vectors(batch, folder):
        mask = np.load(os.path.join(tiny, folder, "mask_no_bos_eos.npy"))
        stacked = np.stack(  # (3, B, T, 2P)
            [np.load(os.path.join(tiny, folder, f"layer{k}_no_bos_eos.npy")) for k in range(3)]
        )
        return [stacked[:, i, : int(mask[i].sum())] for i in range(len(batch))]

    def allennlp_call(call, batch):
        """AllenNLP's stateful call `call` of `batch`, boundaries removed: (3, n, 2P) a sentence."""
        stacked = np.stack(  # (3, B, T + 2, 2P)
            [np.load(os.path.join(tiny, "stateful", f"call{call}_layer{k}.npy")) for k in range(3)]
        )
        return [stacked[:, i, 1 : len(s) + 1] for i, s in enumerate(batch)]

    # batch_to_ids: AllenNLP's character ids, exactly.
    for folder in ("main", "edge"):
        ids = elmo_rs.batch_to_ids(sentences[folder])
        want = np.load(os.path.join(tiny, folder, "char_ids.npy"))
        assert ids.dtype == np.int64, ids.dtype
        assert np.array_equal(ids, want), f"batch_to_ids of {folder} differs from AllenNLP's"

    # Stateless (the default): each sentence from a zero state, alone or in any batch.
    embedder = elmo_rs.ElmoEmbedder(options, weights)
    assert (embedder.n_layers, embedder.dim, embedder.stateful) == (3, 32, False), repr(embedder)
    for folder in ("main", "edge"):
        want = allennlp_vectors(sentences[folder], folder)
        got = embedder.embed_batch(sentences[folder])
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            close(f"embed_batch {folder}[{i}]", g, w)
        for i, sentence in enumerate(sentences[folder]):
            close(f"embed_sentence {folder}[{i}]", embedder.embed_sentence(sentence), want[i])
        streamed = list(embedder.embed_sentences(iter(sentences[folder]), batch_size=3))
        for i, (g, w) in enumerate(zip(streamed, want)):
            close(f"embed_sentences {folder}[{i}]", g, w)
        assert len(streamed) == len(want)
    # Files named by URL, as AllenNLP's cached_path takes them: downloaded into ELMO_CACHE_DIR,
    # the vectors of the local files.
    if base_url:
        remote = elmo_rs.ElmoEmbedder(f"{base_url}/options.json", f"{base_url}/weights.hdf5")
        for i, sentence in enumerate(sentences["main"]):
            want = embedder.embed_sentence(sentence)
            close(f"from URLs [{i}]", remote.embed_sentence(sentence), want, 0.0)
    # batch_to_embeddings: AllenNLP's padded activations (B, 3, T, 2P) and bool mask (B, T).
    for folder in ("main", "edge"):
        activations, mask = embedder.batch_to_embeddings(sentences[folder])
        want = np.stack(
            [np.load(os.path.join(tiny, folder, f"layer{k}_no_bos_eos.npy")) for k in range(3)],
            axis=1,
        )
        close(f"batch_to_embeddings {folder}", activations, want)
        want_mask = np.load(os.path.join(tiny, folder, "mask_no_bos_eos.npy"))
        assert mask.dtype == np.bool_ and np.array_equal(mask, want_mask), f"{folder} mask"
    activations, mask = embedder.batch_to_embeddings([])
    assert activations.shape == (0, 3, 0, 32) and mask.shape == (0, 0), (activations.shape, mask.shape)
    activations, mask = embedder.batch_to_embeddings([[], []])
    assert activations.shape == (2, 3, 0, 32) and mask.shape == (2, 0), (activations.shape, mask.shape)

    # The empty sentence: AllenNLP's `empty_embedding`, (3, 0, 2P).
    assert embedder.embed_sentence([]).shape == (3, 0, 32)
    assert list(embedder.embed_sentences([])) == []

    # Stateful: four calls of one embedder equal AllenNLP's four calls of one `_ElmoBiLm`, each
    # one LSTM call as AllenNLP's `embed_batch` makes it, whatever `batch_size` (the first call
    # has 8 sentences).
    calls = [sentences["main"], sentences["edge"], sentences["main_first3"], sentences["main"]]
    for batch_size in (64, 3):
        stateful = elmo_rs.ElmoEmbedder(options, weights, stateful=True, batch_size=batch_size)
        for call, batch in enumerate(calls):
            got = stateful.embed_batch(batch)
            mask = np.load(os.path.join(tiny, "stateful", f"call{call}_mask.npy"))
            for i, (sentence, want) in enumerate(zip(batch, allennlp_call(call, batch))):
                assert int(mask[i].sum()) in (0, len(sentence) + 2), (call, i)
                name = f"stateful (batch_size {batch_size}) call {call} [{i}]"
                close(name, got[i], want, STATEFUL_TOLERANCE)
    stateful.reset_state()
    first = stateful.embed_batch(calls[0])
    for i, (g, w) in enumerate(zip(first, allennlp_vectors(calls[0], "main"))):
        close(f"stateful after reset_state [{i}]", g, w)
    # AllenNLP's `embed_batch` answers `[[]]` without running the biLM: the state stays, and the
    # next call is AllenNLP's call 1.
    assert stateful.embed_sentence([]).shape == (3, 0, 32)
    second = stateful.embed_batch(calls[1])
    for i, (g, w) in enumerate(zip(second, allennlp_call(1, calls[1]))):
        close(f"stateful after an empty sentence [{i}]", g, w, STATEFUL_TOLERANCE)

    # Token embeddings (bilm-tf's dump_token_embeddings): the token layer of each token alone.
    token_layer = np.load(os.path.join(tiny, "main", "token_embedding.npy"))
    tokens = sentences["main"][0]
    got = embedder.token_embeddings(tokens)
    close("token_embeddings", got, token_layer[0, 1 : len(tokens) + 1])

    # embed_file: `elmo embed`'s file, read with h5py, equal to embed_batch's vectors.
    import h5py

    text = os.path.join(tmp, "sentences.txt")
    lines = [" ".join(s) for s in sentences["main"][:4]]
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = os.path.join(tmp, "vectors.hdf5")
    embedder.embed_file(text, out, quiet=True)
    expected = embedder.embed_batch([line.split() for line in lines])
    with h5py.File(out, "r") as f:
        index = json.loads(f["sentence_to_index"][0])
        assert index == {line: str(i) for i, line in enumerate(lines)}, index
        for i, want in enumerate(expected):
            close(f"embed_file line {i}", f[str(i)][()], want, 0.0)
    # An open file, as AllenNLP's embed_file takes (read from where it stands).
    import io

    for name, source in [("file", open(text, encoding="utf-8")), ("StringIO", io.StringIO("\n".join(lines)))]:
        again = os.path.join(tmp, f"{name}.hdf5")
        with source:
            embedder.embed_file(source, again, quiet=True)
        with h5py.File(again, "r") as f:
            for i, want in enumerate(expected):
                close(f"embed_file of a {name}, line {i}", f[str(i)][()], want, 0.0)
    raises("embed_file of a binary file", TypeError,
           lambda: embedder.embed_file(io.BytesIO(b"a b"), os.path.join(tmp, "b.hdf5")), "str")
    raises("embed_file of a number", TypeError,
           lambda: embedder.embed_file(3, os.path.join(tmp, "n.hdf5")), "input_file")
    # embed_file embeds with the loaded model: its files are not read again, so an embedder
    # whose weight file has since gone still writes the same vectors.
    import shutil

    moved = os.path.join(tmp, "moved")
    os.mkdir(moved)
    for name in ("options.json", "weights.hdf5"):
        shutil.copy(os.path.join(tiny, name), moved)
    loaded = elmo_rs.ElmoEmbedder(
        os.path.join(moved, "options.json"), os.path.join(moved, "weights.hdf5")
    )
    shutil.rmtree(moved)
    gone = os.path.join(tmp, "gone.hdf5")
    loaded.embed_file(text, gone, quiet=True)
    with h5py.File(gone, "r") as f:
        for i, want in enumerate(expected):
            close(f"embed_file after the weight file went, line {i}", f[str(i)][()], want, 0.0)
    # A stateful embedder carries its state through embed_file as through its other calls:
    # AllenNLP's four calls again, the third written by embed_file.
    stateful.reset_state()
    for call in (0, 1):
        stateful.embed_batch(calls[call])
    third = os.path.join(tmp, "third.txt")
    with open(third, "w", encoding="utf-8") as f:
        f.write("".join(" ".join(s) + "\n" for s in calls[2]))
    stateful.embed_file(third, os.path.join(tmp, "third.hdf5"), batch_size=len(calls[2]), quiet=True)
    with h5py.File(os.path.join(tmp, "third.hdf5"), "r") as f:
        for i, want in enumerate(allennlp_call(2, calls[2])):
            close(f"stateful embed_file, call 2 [{i}]", f[str(i)][()], want, STATEFUL_TOLERANCE)
    for i, (g, w) in enumerate(zip(stateful.embed_batch(calls[3]), allennlp_call(3, calls[3]))):
        close(f"stateful embed_batch after embed_file, call 3 [{i}]", g, w, STATEFUL_TOLERANCE)
    # A failed embed_file leaves the state as it was.
    stateful.reset_state()
    stateful.embed_batch(calls[0])
    raises("stateful embed_file of a missing input", elmo_rs.ElmoError,
           lambda: stateful.embed_file(os.path.join(tmp, "none.txt"), os.path.join(tmp, "z.hdf5")),
           "none.txt")
    for i, (g, w) in enumerate(zip(stateful.embed_batch(calls[1]), allennlp_call(1, calls[1]))):
        close(f"stateful embed_batch after a failed embed_file [{i}]", g, w, STATEFUL_TOLERANCE)
    top = os.path.join(tmp, "top.hdf5")
    embedder.embed_file(text, top, output_format="top", forget_sentences=True, quiet=True)
    with h5py.File(top, "r") as f:
        assert "sentence_to_index" not in f
        close("embed_file top", f["0"][()], expected[0][2], 0.0)

    # The built-in demo model (no files), as `elmo embed` without --options.
    demo = elmo_rs.ElmoEmbedder()
    assert demo.embed_sentence(["a", "b"]).shape == (3, 2, 2 * 16), repr(demo)

    # Bad input: errors that name what is wrong, and nothing written.
    raises("missing weights", elmo_rs.ElmoError,
           lambda: elmo_rs.ElmoEmbedder(options, os.path.join(tmp, "none.hdf5")), "none.hdf5")
    raises("options without weights", ValueError, lambda: elmo_rs.ElmoEmbedder(options),
           "weight_file")
    raises("unknown backend", ValueError, lambda: elmo_rs.ElmoEmbedder(backend="tpu"),
           "tpu", "flex")
    raises("backend and cuda_device", ValueError,
           lambda: elmo_rs.ElmoEmbedder(backend="flex", cuda_device=0), "not both")
    raises("mixed on ndarray", elmo_rs.ElmoError,
           lambda: elmo_rs.ElmoEmbedder(backend="ndarray", precision="mixed"), "mixed")
    # On flex, mixed runs where the CPU has bf16 products (AMX, or AVX512-BF16 on AMD), else
    # names what it lacks.
    try:
        bf16 = elmo_rs.ElmoEmbedder(precision="mixed").embed_sentence(["a", "b", "c"])
    except elmo_rs.ElmoError as error:
        assert "AMX" in str(error), str(error)
    else:
        exact = elmo_rs.ElmoEmbedder().embed_sentence(["a", "b", "c"])
        worst, scale = float(np.max(np.abs(bf16 - exact))), float(np.max(np.abs(exact)))
        assert 0.0 < worst <= 1e-2 * scale, f"mixed on flex: {worst} of {scale}"
    raises("a string as a sentence", TypeError, lambda: embedder.embed_sentence("a b"))
    raises("a number as a token", TypeError, lambda: embedder.embed_batch([["a", 1]]))
    raises("a bad sentence of a stream", TypeError,
           lambda: list(embedder.embed_sentences([["a"], "b c"], batch_size=1)), "sentence 1")
    missing = os.path.join(tmp, "missing.txt")
    raises("embed_file of a missing input", elmo_rs.ElmoError,
           lambda: embedder.embed_file(missing, os.path.join(tmp, "x.hdf5"), quiet=True),
           "missing.txt")
    assert not os.path.exists(os.path.join(tmp, "x.hdf5"))
    raises("embed_file's format", elmo_rs.ElmoError,
           lambda: embedder.embed_file(text, os.path.join(tmp, "y.hdf5"), output_format="middle"),
           "middle")
    check_elmo_module(tiny, sentences, options, weights)
    check_on_wgpu(tiny, sentences, options, weights, allennlp_vectors)

    # The type hints name every public method and property of the module's classes.
    import ast

    stub = ast.parse(open(os.path.join(os.path.dirname(__file__), "..", "elmo_rs.pyi")).read())
    hinted = {
        node.name: {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        for node in stub.body
        if isinstance(node, ast.ClassDef)
    }
    for cls in (elmo_rs.ElmoEmbedder, elmo_rs.SentenceEmbeddings, elmo_rs.Elmo):
        public = {name for name in dir(cls) if not name.startswith("_")}
        missing = public - hinted.get(cls.__name__, set())
        assert not missing, f"elmo_rs.pyi lacks {cls.__name__}.{sorted(missing)}"
    print("elmo_rs: all checks passed")


if __name__ == "__main__":
    main(*sys.argv[1:4])
