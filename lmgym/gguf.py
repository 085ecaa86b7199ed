"""GGUF models: a ``.gguf`` file loads through transformers' GGUF support, dequantized, once.

``plain_copy(path)`` dequantizes the file (``AutoModelForCausalLM.from_pretrained(dir,
gguf_file=name)``, fp32) with its tokenizer, and saves both as a plain Hugging Face directory
(safetensors) in the lmgym cache, keyed by the file's SHA-256: the first start converts (tens of
seconds for a 135M model), every later one loads the copy (seconds). ``load_model``,
``load_tokenizer``, ``PPOAgent`` and ``lmgym train/eval --model`` accept a ``.gguf`` path and go
through it. The copy is an ordinary model: ``save_pretrained``, ``agent.save`` and
``lmgym export`` work on it (transformers refuses to save a model still marked as GGUF-quantized;
the marker is cleared after dequantization).
"""

from __future__ import annotations

import os
from pathlib import Path


def is_gguf(name_or_path: str | os.PathLike) -> bool:
    return str(name_or_path).lower().endswith(".gguf") and os.path.isfile(name_or_path)


def plain_copy(path: str | os.PathLike, cache: str | os.PathLike | None = None) -> Path:
    """The plain HF directory (model and tokenizer) of the GGUF file ``path``, made on first use.

    Args:
        path: a ``.gguf`` file.
        cache: where copies live (default: ``<lmgym cache>/gguf``).
    """
    from lmgym.storage import cache_dir, find_damaged, sha256, written_aside

    path = Path(path)
    if not is_gguf(path):
        raise ValueError(f"{str(path)!r} is not a .gguf file")
    target = Path(cache or cache_dir() / "gguf") / f"{path.stem}-{sha256(path)[:16]}"
    if target.is_dir() and (target / "config.json").is_file() and find_damaged(target) is None:
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {path.name} (GGUF) to a plain copy in {target} (once)", flush=True)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype="float32", trust_remote_code=False
    )
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, trust_remote_code=False)
    model.hf_quantizer = None  # type: ignore[assignment]  # dequantized already: what is left is a plain fp32 model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = str(target)
    with written_aside(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


def resolve(name_or_path: str | os.PathLike) -> str | os.PathLike:
    """``plain_copy(name_or_path)`` for a ``.gguf`` file; anything else unchanged."""
    return plain_copy(name_or_path) if is_gguf(name_or_path) else name_or_path
