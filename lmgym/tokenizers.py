"""Tokenizers: the protocol every lmgym env and agent uses, a byte tokenizer, and an HF adapter.

An env turns token ids (its actions) into text with its tokenizer, and the agent keeps the
episode as token ids; both only need ``encode``, ``decode``, ``vocab_size``, ``eos_token_id``
and ``pad_token_id``. ``as_tokenizer`` turns whatever a user passes as ``tokenizer=`` into one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import socket
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What lmgym needs of a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_id(self) -> int: ...

    @property
    def pad_token_id(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes (ids 0-255), then EOS (256), PAD (257), then any added tokens.

    Added tokens (e.g. an env's markup tags) are single ids; ``encode`` matches them longest
    first. ``decode`` drops EOS and PAD and never raises: invalid UTF-8 becomes U+FFFD.

    Example:
        >>> tok = ByteTokenizer(added_tokens=["<calc>", "</calc>"])
        >>> tok.encode("<calc>1+1</calc>")
        [258, 49, 43, 49, 259]
        >>> tok.decode([258, 49, 43, 49, 259, 256])
        '<calc>1+1</calc>'
        >>> tok.decode([0xFF, 104, 105])
        '\\ufffdhi'
    """

    eos_token_id = 256
    pad_token_id = 257

    def __init__(self, added_tokens: Iterable[str] = ()):
        self.added_tokens: list[str] = list(dict.fromkeys(added_tokens))
        if any(not t for t in self.added_tokens):
            raise ValueError("added tokens must be non-empty strings")
        self._added_ids = {t: 258 + i for i, t in enumerate(self.added_tokens)}
        by_length = sorted(self.added_tokens, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, by_length))) if by_length else None

    @property
    def vocab_size(self) -> int:
        return 258 + len(self.added_tokens)

    def encode(self, text: str) -> list[int]:
        if self._pattern is None:
            return list(text.encode("utf-8"))
        ids: list[int] = []
        start = 0
        for match in self._pattern.finditer(text):
            ids += text[start : match.start()].encode("utf-8")
            ids.append(self._added_ids[match.group()])
            start = match.end()
        return ids + list(text[start:].encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        parts: list[str] = []
        pending = bytearray()
        for i in map(int, ids):
            if i < 256:
                pending.append(i)
                continue
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
            parts.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            if i >= 258:
                parts.append(self.added_tokens[i - 258])
        parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``lmgym_tokenizer.json`` into ``directory``."""
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, BYTE_TOKENIZER_FILE), "w") as f:
            json.dump({"type": "ByteTokenizer", "added_tokens": self.added_tokens}, f)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> ByteTokenizer:
        with open(os.path.join(directory, BYTE_TOKENIZER_FILE)) as f:
            return cls(json.load(f)["added_tokens"])

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ByteTokenizer) and other.added_tokens == self.added_tokens

    def __repr__(self) -> str:
        return f"ByteTokenizer(added_tokens={self.added_tokens!r})"


BYTE_TOKENIZER_FILE = "lmgym_tokenizer.json"


class HFTokenizer:
    """Adapts a Hugging Face tokenizer to the protocol.

    ``encode`` adds no special tokens (an env's text is a fragment, not a document),
    ``vocab_size`` is ``len(tokenizer)`` (added tokens included), and a tokenizer with no pad
    token pads with EOS. The wrapped tokenizer is ``.hf``.
    """

    def __init__(self, tokenizer: Any):
        if tokenizer.eos_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no eos_token_id; set tokenizer.eos_token")
        self.hf = tokenizer
        self._special: tuple[int, dict[int, str]] | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def eos_token_id(self) -> int:
        return int(self.hf.eos_token_id)

    @property
    def pad_token_id(self) -> int:
        pad = self.hf.pad_token_id
        return self.eos_token_id if pad is None else int(pad)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Iterable[int]) -> str:
        return str(self.hf.decode([int(i) for i in ids], skip_special_tokens=True))

    def special_token_text(self, token_id: int) -> str | None:
        """The text of a special token (which ``decode`` drops), e.g. a chat template's
        ``<|im_end|>``, so a turn can end on it; ``None`` for other tokens."""
        if self._special is None or self._special[0] != len(self.hf):
            self._special = (len(self.hf), {i: str(self.hf.convert_ids_to_tokens(i)) for i in self.hf.all_special_ids})
        return self._special[1].get(int(token_id))

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        self.hf.save_pretrained(directory)

    def __repr__(self) -> str:
        return f"HFTokenizer({type(self.hf).__name__}, vocab_size={self.vocab_size})"


def is_hf_tokenizer(obj: Any) -> bool:
    """True for a ``transformers`` tokenizer, checked without importing transformers."""
    return any(c.__name__ == "PreTrainedTokenizerBase" for c in type(obj).__mro__)


@functools.cache
def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub's host takes a connection (``False`` under ``HF_HUB_OFFLINE``)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    url = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def hub_lookup(name_or_path: str | os.PathLike) -> Iterator[bool]:
    """Yields whether a ``from_pretrained`` lookup of ``name_or_path`` runs offline: when it is not
    a local path and the hub is unreachable, ``huggingface_hub``'s offline mode (``HF_HUB_OFFLINE``)
    is on for the lookup, so a model that is not in the cache fails at once instead of retrying."""
    if os.path.exists(name_or_path) or hub_reachable():
        yield False
        return
    from huggingface_hub import constants

    saved, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, True
    try:
        yield True
    finally:
        constants.HF_HUB_OFFLINE = saved


def load_error(what: str, name_or_path: str | os.PathLike, error: Exception, offline: bool) -> ValueError:
    """One clear line for a model or tokenizer that could not be loaded."""
    why = (
        "it is not a local path, the Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set) "
        "and the local cache has no copy"
        if offline
        else str(error).strip().splitlines()[0]
    )
    return ValueError(f"could not load {what} from {str(name_or_path)!r}: {why}")


def load_tokenizer(name_or_path: str | os.PathLike) -> Tokenizer:
    """A tokenizer saved by lmgym (``ByteTokenizer``) or any HF tokenizer name or local path (a
    ``.gguf`` file: the tokenizer it embeds, through ``lmgym.gguf``)."""
    from lmgym import gguf

    name_or_path = gguf.resolve(name_or_path)
    if os.path.isfile(os.path.join(name_or_path, BYTE_TOKENIZER_FILE)):
        return ByteTokenizer.from_pretrained(name_or_path)
    if str(name_or_path) in ("byte", "ByteTokenizer"):
        return ByteTokenizer()
    from transformers import AutoTokenizer

    with hub_lookup(name_or_path) as offline:
        try:
            return HFTokenizer(AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False))
        except (OSError, ValueError) as e:
            raise load_error("a tokenizer", name_or_path, e, offline) from e


def as_tokenizer(tokenizer: Any = None) -> Tokenizer:
    """Turns what a user passes as ``tokenizer=`` into an lmgym tokenizer.

    ``None`` gives a ``ByteTokenizer``; an HF tokenizer is wrapped in ``HFTokenizer``; a name or
    local path is loaded; an object that already follows the protocol is returned as it is.

    Example:
        >>> as_tokenizer(None)
        ByteTokenizer(added_tokens=[])
    """
    if tokenizer is None:
        return ByteTokenizer()
    if is_hf_tokenizer(tokenizer):
        return HFTokenizer(tokenizer)
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    missing = [
        a for a in ("encode", "decode", "vocab_size", "eos_token_id", "pad_token_id") if not hasattr(tokenizer, a)
    ]
    raise TypeError(f"{type(tokenizer).__name__} is not a tokenizer: it lacks {', '.join(missing)}")
