"""``lmgym export DIR --merged OUT``: base + LoRA adapters -> ``merge_and_unload`` -> a plain model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, cast

from lmgym.cli.options import UsageError, add_overwrite_flag
from lmgym.cli.session import quiet_transformers


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="merge a LoRA run's adapters into its base and save a plain model")
    p.add_argument("model_dir", help="a directory saved by lmgym train (base + adapters)")
    p.add_argument("--merged", required=True, metavar="OUT", help="where to write the merged model")
    add_overwrite_flag(p, "what OUT holds (a non-empty OUT)")
    p.set_defaults(func=export_command)


def export_command(args: argparse.Namespace) -> None:
    if not (Path(args.model_dir) / "adapter_config.json").is_file():
        raise UsageError(f"{args.model_dir!r} holds no LoRA adapters (no adapter_config.json): nothing to merge")
    target = Path(args.merged)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--merged {args.merged!r} is a file, not a directory")
    if target.is_dir() and any(target.iterdir()) and not args.overwrite:
        raise UsageError(f"--merged {args.merged!r} is not empty: pick a new directory or pass --overwrite")
    from lmgym.agents.models import load_model
    from lmgym.storage import written_aside
    from lmgym.tokenizers import load_tokenizer

    quiet_transformers()
    try:
        model = load_model(args.model_dir, trainable=False)
    except ValueError as e:
        raise UsageError(str(e).splitlines()[0]) from e
    merged = cast(Any, model).merge_and_unload()
    with written_aside(target) as tmp:  # the old contents stay until the new ones are complete
        merged.save_pretrained(tmp)
        load_tokenizer(args.model_dir).save_pretrained(tmp)  # type: ignore[attr-defined]
    print(f"wrote the merged model to {args.merged} (loadable with AutoModelForCausalLM.from_pretrained)")


__all__ = ["add_parser", "export_command"]
