"""Type hints of the `elmo_rs` module (crates/elmo-python/src), packaged by maturin."""

import os
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class ElmoError(Exception):
    """A model that cannot be loaded or run, or input it refuses; the message names the file,
    field or sentence."""

class SentenceEmbeddings(Iterator[npt.NDArray[np.float32]]):
    """The vectors of each sentence of an iterable, in its order."""

    def __iter__(self) -> "SentenceEmbeddings": ...
    def __next__(self) -> npt.NDArray[np.float32]: ...

class ElmoEmbedder:
    """ELMo vectors of tokenised sentences, as AllenNLP's `ElmoEmbedder`."""

    def __init__(
        self,
        options_file: Optional[Union[str, os.PathLike]] = None,
        weight_file: Optional[Union[str, os.PathLike]] = None,
        cuda_device: int = -1,
        *,
        model: Optional[Union[str, os.PathLike]] = None,
        backend: Optional[str] = None,
        precision: str = "f32",
        batch_size: int = 64,
        stateful: bool = False,
        token_cache_mib: int = 64,
        max_batch_positions: int = 8192,
    ) -> None: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def stateful(self) -> bool: ...
    def embed_sentence(self, sentence: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(layers, n_tokens, dim)` float32, the token layer first."""
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> List[npt.NDArray[np.float32]]: ...
    def batch_to_embeddings(
        self, batch: Sequence[Sequence[str]]
    ) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """`(len(batch), layers, max_tokens, dim)` float32, zero-padded, and the
        `(len(batch), max_tokens)` bool mask of real tokens."""
    def embed_sentences(
        self, sentences: Iterable[Sequence[str]], batch_size: Optional[int] = None
    ) -> SentenceEmbeddings: ...
    def embed_file(
        self,
        input_file: Union[str, os.PathLike, IO[str]],
        output_file_path: Union[str, os.PathLike],
        output_format: str = "all",
        batch_size: Optional[int] = None,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
        quiet: bool = False,
    ) -> None: ...
    def token_embeddings(self, tokens: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(tokens), dim // 2)` float32: each token alone through the char CNN."""
    def reset_state(self) -> None: ...

class Elmo:
    """AllenNLP's `Elmo` module as it computes in eval mode: scalar mixes of the biLM layers of
    character ids (`batch_to_ids`), as NumPy arrays; `dropout` is not applied and the mixes are
    fixed (AllenNLP's initial ones, or `scalar_mix_parameters`)."""

    def __init__(
        self,
        options_file: Optional[Union[str, os.PathLike]] = None,
        weight_file: Optional[Union[str, os.PathLike]] = None,
        num_output_representations: int = 1,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Optional[List[str]] = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[List[float]] = None,
        module: None = None,
        *,
        model: Optional[Union[str, os.PathLike]] = None,
        cuda_device: int = -1,
        backend: Optional[str] = None,
        precision: str = "f32",
        stateful: bool = False,
        token_cache_mib: int = 64,
    ) -> None: ...
    @property
    def stateful(self) -> bool: ...
    def forward(
        self, inputs: npt.ArrayLike, word_inputs: Optional[npt.ArrayLike] = None
    ) -> Dict[str, Any]:
        """`{"elmo_representations": [float32 (batch, tokens, dim), ...], "mask": bool
        (batch, tokens)}` of character ids `(batch, tokens, 50)` (more leading dimensions
        stay)."""
    def __call__(
        self, inputs: npt.ArrayLike, word_inputs: Optional[npt.ArrayLike] = None
    ) -> Dict[str, Any]: ...
    def get_output_dim(self) -> int: ...
    def reset_state(self) -> None: ...

def batch_to_ids(batch: Sequence[Sequence[str]]) -> npt.NDArray[np.int64]:
    """`(len(batch), max_tokens, 50)` int64 character ids, zeros for padding."""
