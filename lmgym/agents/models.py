"""Models the agent trains: loading (a name, a path, or base + LoRA adapters saved by lmgym),
LoRA through peft, the vocabulary check, and a memory estimate before training."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from lmgym.tokenizers import Tokenizer, hub_lookup, load_error

MANIFEST = "lmgym_model.json"
"""Written beside a saved model: the base it adapts (for adapters), and how it was trained
(``chat_template``, ``system``), so ``PPOAgent.load`` and ``lmgym eval`` need no more than the dir."""

LORA_ALIASES = {"alpha": "lora_alpha", "dropout": "lora_dropout", "targets": "target_modules"}


MANIFEST_FIELDS: dict[str, tuple[type, ...]] = {
    "base": (str, type(None)),
    "adapters": (bool,),
    "vocab_size": (int, type(None)),
    "env": (str, type(None)),
    "chat_template": (bool, type(None)),
    "system": (str, type(None)),
    "tools": (str, type(None)),
    "env_kwargs": (dict,),
}
"""What ``lmgym_model.json`` may hold, and the types each takes (a dir lmgym did not write may hold anything)."""


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """A saved model's manifest (``{}`` when there is none), checked: a JSON object of
    ``MANIFEST_FIELDS`` of their types, read within ``lmgym.storage``'s bounds; else ``ValueError``."""
    from lmgym.storage import DataError, load_json

    file = Path(path) / MANIFEST
    if not file.is_file():
        return {}
    try:
        manifest = load_json(file, max_bytes=2**20)
    except DataError as e:
        raise ValueError(str(e)) from e
    if not isinstance(manifest, dict):
        raise ValueError(f"{str(file)!r} is not a JSON object")
    for key, value in manifest.items():
        kinds = MANIFEST_FIELDS.get(key)
        if kinds is None:
            raise ValueError(f"{str(file)!r} holds an unknown field {key!r:.40}")
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"{str(file)!r}: {key} is a {type(value).__name__}, not a {kinds[0].__name__}")
    if "tokenizer" in manifest.get("env_kwargs", {}):
        raise ValueError(f"{str(file)!r}: env_kwargs holds tokenizer, which lmgym passes the env itself")
    return manifest


def check_model_config(path: str | os.PathLike) -> None:
    """``ValueError`` when a model directory's ``config.json`` asks for what cannot be built: a size
    that is not a positive integer (``num_attention_heads: 0``), or weights larger than this
    machine's memory (``vocab_size: 2**36``), before ``from_pretrained`` tries."""
    from lmgym.storage import DataError, load_json

    file = Path(path) / "config.json"
    if not file.is_file():
        return
    try:
        config = load_json(file, max_bytes=2**20)
    except DataError as e:
        raise ValueError(str(e)) from e
    if not isinstance(config, dict):
        raise ValueError(f"{str(file)!r} is not a JSON object")
    sizes = {k: config[k] for k in SIZE_FIELDS if k in config and config[k] is not None}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{str(file)!r}: {key} must be a positive integer, got {value!r:.40}")
    vocab = sizes.get("vocab_size", 1)
    width = next((sizes[k] for k in ("hidden_size", "n_embd", "d_model") if k in sizes), 1)
    layers = next((sizes[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in sizes), 1)
    inner = next((sizes[k] for k in ("intermediate_size", "n_inner") if k in sizes), 4 * width)
    weights = 4 * (2 * vocab * width + layers * (4 * width * width + 3 * width * inner))  # fp32 bytes, roughly
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if weights > memory:
        raise ValueError(
            f"{str(file)!r} describes a model of about {weights / 2**30:.0f} GiB of weights, more than this "
            f"machine's {memory / 2**30:.0f} GiB of memory"
        )


SIZE_FIELDS = (
    "vocab_size", "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers",
    "num_attention_heads", "n_head", "num_key_value_heads", "intermediate_size", "n_inner",
    "max_position_embeddings", "n_positions", "head_dim",
)  # fmt: skip
"""``config.json`` sizes that must be positive integers where they are given."""


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def load_model(name_or_path: str | os.PathLike, trainable: bool = True) -> PreTrainedModel:
    """``AutoModelForCausalLM.from_pretrained``, with a clear error when nothing is there. A
    ``.gguf`` file loads dequantized, through a plain copy cached once (``lmgym.gguf``). A
    directory of LoRA adapters saved by lmgym loads its base (named in the manifest or the
    adapter config), resizes the base's embeddings to the saved tokenizer, and adds the adapters."""
    from lmgym import gguf

    name_or_path = gguf.resolve(name_or_path)  # a .gguf file: its dequantized plain copy
    if is_adapter_dir(name_or_path):
        return load_adapted(Path(name_or_path), trainable)
    check_model_config(name_or_path)
    with hub_lookup(name_or_path) as offline:
        try:
            return AutoModelForCausalLM.from_pretrained(name_or_path, trust_remote_code=False)
        except OSError as e:
            raise load_error("a causal LM", name_or_path, e, offline) from e


def load_adapted(path: Path, trainable: bool = True) -> PreTrainedModel:
    """Base + adapters: the base the manifest (or the adapter config) names, which must not hold
    adapters itself (nor be the directory); ``target_modules`` must be names, not a pattern."""
    from peft import PeftModel

    from lmgym.storage import DataError, load_json

    try:
        adapter = load_json(path / "adapter_config.json", max_bytes=2**20)
    except DataError as e:
        raise ValueError(str(e)) from e
    if not isinstance(adapter, dict):
        raise ValueError(f"{str(path / 'adapter_config.json')!r} is not a JSON object")
    for key in ("target_modules", "exclude_modules"):  # a string is a regular expression to peft
        if isinstance(adapter.get(key), str) and adapter[key] != "all-linear":
            raise ValueError(
                f"{str(path / 'adapter_config.json')!r}: {key} is a pattern ({adapter[key]!r:.60}), not a list of "
                "module names: refused (a pattern can take for ever to match)"
            )
    base_name = read_manifest(path).get("base") or adapter.get("base_model_name_or_path")
    if not base_name or not isinstance(base_name, str):
        raise ValueError(f"{str(path)!r} holds LoRA adapters but names no base model")
    if is_adapter_dir(base_name) or (os.path.exists(base_name) and Path(base_name).resolve() == path.resolve()):
        raise ValueError(f"{str(path)!r} names {base_name!r} as its base, which holds adapters itself")
    base = load_model(base_name)
    rows = _saved_vocab_size(path)
    embeddings: Any = base.get_input_embeddings()
    if rows and embeddings.num_embeddings != rows:
        base.resize_token_embeddings(rows)  # the adapters were trained on the resized embeddings
    return cast(PreTrainedModel, PeftModel.from_pretrained(base, path, is_trainable=trainable))


def _saved_vocab_size(path: Path) -> int | None:
    return read_manifest(path).get("vocab_size") or None


def check_model_vocab(model: PreTrainedModel, tokenizer: Tokenizer) -> None:
    embeddings: Any = model.get_input_embeddings()
    rows = int(embeddings.num_embeddings)
    if rows < tokenizer.vocab_size:
        raise ValueError(
            f"the model has {rows} token embeddings but the tokenizer has {tokenizer.vocab_size} tokens "
            f"(ids up to {tokenizer.vocab_size - 1}): call model.resize_token_embeddings(len(tokenizer))"
        )


def disable_dropout(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """The names (last component) of the model's linear layers, which LoRA can target."""
    from transformers.pytorch_utils import Conv1D

    return sorted(
        {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}
    )


def parse_lora(spec: str) -> dict[str, Any]:
    """``"r=16,alpha=32,targets=q_proj+v_proj"`` -> a ``PPOConfig.peft_config`` dict.

    Example:
        >>> parse_lora("r=16,alpha=32,targets=q_proj+v_proj")
        {'r': 16, 'lora_alpha': 32, 'target_modules': ['q_proj', 'v_proj']}
    """
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--lora {spec!r}: {item!r} is not KEY=VALUE (e.g. r=16,alpha=32,targets=q_proj+v_proj)")
        key = LORA_ALIASES.get(key.strip(), key.strip())
        if key == "target_modules":
            out[key] = value.split("+") if value != "all-linear" else value
        else:
            try:
                out[key] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                out[key] = value
    return out


def apply_lora(model: PreTrainedModel, spec: dict[str, Any]) -> PreTrainedModel:
    """Wraps ``model`` in LoRA adapters (peft) from a ``peft_config`` dict; ``target_modules``
    defaults to every linear layer but the output head. A target the model lacks is named, with
    the modules it has."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ValueError("LoRA needs peft: pip install 'lmgym[peft]'") from e
    spec = {"target_modules": "all-linear", "lora_alpha": 2 * int(spec.get("r", 8)), **spec}
    targets = spec["target_modules"]
    if targets != "all-linear":
        targets = [targets] if isinstance(targets, str) else list(targets)
        known = linear_module_names(model)
        missing = [t for t in targets if t not in known]
        if missing:
            raise ValueError(
                f"LoRA target module {missing[0]!r} is not in the model; its linear modules are: {', '.join(known)}"
            )
        spec["target_modules"] = targets
    try:
        config = LoraConfig(task_type="CAUSAL_LM", **spec)
    except TypeError as e:
        raise ValueError(f"bad LoRA setting: {e}") from e
    return cast(PreTrainedModel, get_peft_model(model, config))


def memory_estimate(model: torch.nn.Module, trainable: int, reference: torch.nn.Module | None) -> dict[str, float]:
    """Bytes the training will hold before activations: weights, gradients and AdamW's two
    moments (fp32) of the trainable parameters, and the reference copy (none with LoRA)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    ref = sum(p.numel() * p.element_size() for p in reference.parameters()) if reference is not None else 0
    return {
        "parameters": float(sum(p.numel() for p in model.parameters())),
        "trainable": float(trainable),
        "weights": float(weights),
        "gradients": 4.0 * trainable,
        "optimizer": 8.0 * trainable,
        "reference": float(ref),
    }


def format_memory(estimate: dict[str, float]) -> str:
    """One line for ``lmgym train`` to print before training.

    Example:
        >>> line = format_memory({"parameters": 1e6, "trainable": 1e6, "weights": 4e6, "gradients": 4e6,
        ...                       "optimizer": 8e6, "reference": 4e6})
        >>> line.endswith("AdamW states 7.6 MiB, reference model 3.8 MiB = 19.1 MiB")
        True
    """

    def mib(key: str) -> str:
        return f"{estimate[key] / 2**20:.1f} MiB"

    total = sum(estimate[k] for k in ("weights", "gradients", "optimizer", "reference"))
    ref = mib("reference") if estimate["reference"] else "none (LoRA: the base with adapters off)"
    return (
        f"memory before activations: weights {mib('weights')} ({estimate['parameters'] / 1e6:.2f}M parameters, "
        f"{estimate['trainable'] / 1e6:.2f}M trainable), gradients {mib('gradients')}, AdamW states "
        f"{mib('optimizer')}, reference model {ref} = {total / 2**20:.1f} MiB"
    )


def adamw(params: list[torch.nn.Parameter], lr: float) -> torch.optim.AdamW:
    """AdamW with the fused kernel where torch has one for these parameters (CPU and CUDA
    floats): on a small model the per-tensor loop of the default costs as much as the math."""
    try:
        return torch.optim.AdamW(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, lr=lr)


def shard(policy: torch.nn.Module, device: torch.device, world_size: int) -> None:
    """FSDP2 (``fully_shard``) on ``policy`` over ``world_size`` processes, in place: each
    decoder layer (the model's ``_no_split_modules``), then the LM, then the whole policy."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    model: Any = policy.model
    if hasattr(model, "disable_adapter"):
        raise ValueError("fsdp=True is not supported with LoRA adapters (peft_config): use DDP")
    layers = set(getattr(model, "_no_split_modules", None) or [])
    for module in [m for m in model.modules() if type(m).__name__ in layers]:
        fully_shard(module, mesh=mesh)
    fully_shard(policy, mesh=mesh)


def place(policy: torch.nn.Module, accelerator: Any, config: Any) -> tuple[Any, Any]:
    """The policy and its AdamW optimizer, placed by accelerate (DDP across processes); with
    ``config.model.fsdp`` under several processes, the policy sharded with FSDP2 in place first
    (accelerate then prepares the optimizer only). ``fsdp`` in one process warns: nothing to shard."""
    import warnings

    sharded = config.model.fsdp and accelerator.num_processes > 1
    if config.model.fsdp and not sharded:
        warnings.warn("fsdp=True in one process: the policy is not sharded (FSDP2 needs several)", stacklevel=3)
    if sharded:
        shard(policy, accelerator.device, accelerator.num_processes)
    optimizer = adamw([p for p in policy.parameters() if p.requires_grad], config.learning_rate)
    return (policy, accelerator.prepare(optimizer)) if sharded else accelerator.prepare(policy, optimizer)


def prepare_model(model: Any, tokenizer: Any, config: Any) -> tuple[PreTrainedModel, Tokenizer]:
    """The model and tokenizer ``PPOAgent`` trains: ``model`` loaded when it is a name or path
    (its tokenizer too, unless given), the vocabulary checked, dropout off (it would make the PPO
    ratio differ from 1 at the start), LoRA and gradient checkpointing per ``config``
    (``PPOConfig.model``)."""
    from lmgym.tokenizers import as_tokenizer

    if isinstance(model, (str, os.PathLike)):
        tokenizer = model if tokenizer is None else tokenizer
        model = load_model(model)
    if tokenizer is None:
        tokenizer = model.name_or_path or None
    if tokenizer is None:
        raise ValueError("no tokenizer: pass tokenizer= (a model built from a config has no path to load one from)")
    tok = as_tokenizer(tokenizer)
    check_model_vocab(model, tok)
    disable_dropout(model)
    if config.peft_config and not hasattr(model, "disable_adapter"):
        model = apply_lora(model, config.peft_config)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tok


def reference_model(model: torch.nn.Module, given: Any, device: Any) -> Any:
    """The frozen KL reference: ``given``, else a copy of ``model``, on ``device``, in eval mode."""
    import copy

    reference = given if given is not None else copy.deepcopy(model)
    return reference.requires_grad_(False).eval().to(device)
