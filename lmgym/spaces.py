"""Spaces of lmgym envs: token-sequence actions and free-text observations.

``TokenSequence`` is the action space of every lmgym env: a variable-length 1-D array of token
ids. ``AnyText`` is the observation space: any Python ``str`` up to a length, Unicode included.

Gymnasium's ``Text`` space only admits characters of its charset, and its shared-memory path in
``AsyncVectorEnv`` returns placeholder strings (the batch is read once, when the vector env is
built, instead of on every step). ``AnyText`` registers its own shared-memory functions with
Gymnasium's single-dispatch tables, so stock async vectorization returns the right strings.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence as AbcSequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory as _shm


class TokenSequence(spaces.Sequence):
    """A variable-length sequence of token ids in ``[0, vocab_size)``, at most ``max_length`` long.

    Samples and valid elements are 1-D ``int64`` arrays (``stack=True``).

    Example:
        >>> space = TokenSequence(vocab_size=10, max_length=4, seed=0)
        >>> space.contains(np.array([1, 2, 3]))
        True
        >>> space.contains(np.array([1, 2, 3, 4, 5]))
        False
        >>> 1 <= len(space.sample()) <= 4
        True
    """

    def __init__(self, vocab_size: int, max_length: int, seed: int | None = None):
        if vocab_size < 1 or max_length < 1:
            raise ValueError(f"vocab_size and max_length must be >= 1, got {vocab_size}, {max_length}")
        super().__init__(spaces.Discrete(vocab_size), stack=True, seed=seed)
        self.vocab_size = int(vocab_size)
        self.max_length = int(max_length)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """A random sequence; its length is uniform in ``[1, max_length]`` unless ``mask`` sets it."""
        if mask is None and probability is None:
            mask = (int(self.np_random.integers(1, self.max_length + 1)), None)
        return np.asarray(super().sample(mask=mask, probability=probability))

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray)
            and x.ndim == 1
            and np.issubdtype(x.dtype, np.integer)
            and len(x) <= self.max_length
            and bool(np.all((x >= 0) & (x < self.vocab_size)))
        )

    def __repr__(self) -> str:
        return f"TokenSequence(vocab_size={self.vocab_size}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TokenSequence)
            and other.vocab_size == self.vocab_size
            and other.max_length == self.max_length
        )


class AnyText(spaces.Text):
    """Any ``str`` of at most ``max_length`` characters (Unicode included).

    ``sample()`` draws printable ASCII; ``contains`` accepts every character, unlike ``Text``.

    Example:
        >>> AnyText(max_length=32).contains("naïve café 東京")
        True
    """

    def __init__(self, max_length: int = 4096, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"


class _TextBatchView(AbcSequence):
    """A live view of the strings in an ``AnyText`` shared buffer (one row per env).

    Each row holds the string's length, then its Unicode code points. Reads decode the current
    buffer, so the view the vector env keeps stays right after every step; a deepcopy (what the
    vector env returns) is a plain tuple of strings.
    """

    def __init__(self, buffer: Any, n: int, max_length: int):
        self._buffer = buffer
        self._n = n
        self._width = max_length + 1

    def _rows(self) -> np.ndarray:
        return np.frombuffer(self._buffer.get_obj(), dtype=np.int32).reshape(self._n, self._width)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows()[index]
        return "".join(map(chr, row[1 : 1 + row[0]]))

    def __iter__(self) -> Any:
        return iter([self[i] for i in range(self._n)])

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)


@_shm.create_shared_memory.register(AnyText)
def _create_anytext_memory(space: AnyText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@_shm.read_from_shared_memory.register(AnyText)
def _read_anytext_memory(space: AnyText, shared_memory: Any, n: int = 1) -> _TextBatchView:
    return _TextBatchView(shared_memory, n, space.max_length)


@_shm.write_to_shared_memory.register(AnyText)
def _write_anytext_memory(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
    if not space.contains(value):
        raise ValueError(f"observation {value!r:.80} is not in {space}")
    width = space.max_length + 1
    rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    row = rows[index * width : (index + 1) * width]
    row[0] = len(value)
    row[1 : 1 + len(value)] = [ord(c) for c in value]
