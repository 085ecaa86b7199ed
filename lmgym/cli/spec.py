"""The run spec: what ``lmgym train`` or ``lmgym eval`` was asked to do, parsed once.

``RunSpec.from_args`` turns the argparse namespace into a frozen dataclass; every later step
reads it, and a step that picks something (the pretrained recipe: budgets, the warm start, the
config) returns a new spec (``dataclasses.replace``) instead of writing into the namespace.
``FLAGS`` maps the ``PPOConfig`` flags to the settings they set: the one place where a flag's
name (``--overlap-rollout``) and a field's (``rollout.overlap``) meet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmgym.cli.errors import UsageError

if TYPE_CHECKING:
    from lmgym.agents.config import PPOConfig

FLAG_NAMES: dict[tuple[str, ...], str] = {
    ("rollout", "overlap"): "overlap_rollout",
    ("engine", "name"): "engine",
    ("engine", "kwargs"): "engine_kwargs",
}
"""The ``PPOConfig`` settings whose flag is not named after the field (``--overlap-rollout``); the
others are (``--step-timeout`` sets ``rollout.step_timeout``)."""
OWN_FLAGS = {("seed",), ("estimator",), ("rollout", "generation_kwargs"), ("model", "peft_config")}
"""Settings with flags of their own: ``--seed``, ``--estimator``, ``--generation-kwargs``, ``--lora``."""


def config_flags() -> Iterator[tuple[str, tuple[str, ...], Any, Any]]:
    """``(flag name, setting path, field, default)`` for every ``PPOConfig`` setting with a flag."""
    from lmgym.agents.config import settings

    for path, f, default in settings():
        if path not in OWN_FLAGS:
            yield FLAG_NAMES.get(path, path[-1]), path, f, default


def parse_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["max_digits=2", "operators=+-"]`` -> ``{"max_digits": 2, "operators": "+-"}``: a value is a
    Python literal, else JSON (``config={"negative": false}``), else a string.

    Example:
        >>> parse_kwargs(["n=2", 'config={"negative": false}', "name=abc"])
        {'n': 2, 'config': {'negative': False}, 'name': 'abc'}
    """
    import ast

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"env argument {item!r} is not KEY=VALUE")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = value
    return out


def flat(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """``nested``'s inverse: ``{"model": {"fsdp": True}, "seed": 1}`` -> ``{("model", "fsdp"): True, ("seed",): 1}``.

    Example:
        >>> flat({"model": {"fsdp": True}, "seed": 1})
        {('model', 'fsdp'): True, ('seed',): 1}
    """
    out: dict[tuple[str, ...], Any] = {}
    for key, value in values.items():
        out |= flat(value, (*prefix, key)) if isinstance(value, dict) else {(*prefix, key): value}
    return out


def nested(values: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """``{("rollout", "overlap"): True, ("seed",): 1}`` -> ``{"rollout": {"overlap": True}, "seed": 1}``:
    ``PPOConfig``'s keyword arguments.

    Example:
        >>> nested({("rollout", "overlap"): True, ("seed",): 1})
        {'rollout': {'overlap': True}, 'seed': 1}
    """
    out: dict[str, Any] = {}
    for path, value in values.items():
        where = out
        for key in path[:-1]:
            where = where.setdefault(key, {})
        where[path[-1]] = value
    return out


@dataclass(frozen=True)
class RunSpec:
    """What a ``train`` or ``eval`` command runs: its flags, checked types, and what the run picks."""

    command: str
    env_id: str
    env_module: str | None = None
    """``module:Name-v0``'s module, imported to register a user's env (in Ray actors too)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """``gym.make`` arguments: ``--env-arg``s (for eval, over the saved model's manifest's)."""
    model: str | None = None
    tools: str | None = None
    chat_template: bool = False
    system: str | None = None
    add_special_tokens: bool = False
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    """``--seeds 0,1,2``: one run per seed in ``OUT/seed-N``, then ``lmgym compare`` of them."""
    threads: int | None = None
    num_envs: int = 32
    episodes: int | None = None
    """Training episodes (train; ``None``: the default's, or a pretrained model's time budget),
    or the held-out episodes evaluated (eval)."""
    eval_episodes: int = 200
    eval_every: int = 10
    out: Path = Path("runs/train")
    no_cache: bool = False
    warmstart_steps: int | None = None
    lora: str | None = None
    resume: str | None = None
    overwrite: bool = False
    ray: str | None = None
    env_workers: int = 0
    env_worker_cpus: float | None = None
    stop_at_success: float | None = None
    estimator: str | None = None
    """``--estimator`` (``None``: the default model's or the recipe's)."""
    generation_kwargs: Any = None
    samples: int = 0
    """``--samples k``: evaluations also report pass@k and the sampled success rate."""
    allow_no_signal: bool = False
    doctor: bool = False
    """``lmgym train --doctor``: the doctor's checks before training."""
    settings: dict[tuple[str, ...], Any] = field(default_factory=dict)
    """The ``PPOConfig`` settings the flags gave, by path (``("rollout", "overlap")``)."""
    config: PPOConfig | None = None
    """The run's ``PPOConfig``, once picked (``lmgym.cli.session.run_config``)."""
    json: bool = False
    sampled: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunSpec:
        """The spec of a parsed command line (``--env-arg`` parsed, the config flags by path)."""
        given = vars(args)
        own = {f.name for f in dataclasses.fields(cls)} - {"env_kwargs", "settings", "config", "out"}
        flags = {path: given[f"cfg_{n}"] for n, path, _, _ in config_flags() if given.get(f"cfg_{n}") is not None}
        return cls(
            env_kwargs=parse_kwargs(given.get("env_arg") or []),
            settings=flags,
            out=Path(given.get("out") or "runs/train"),
            **{k: given[k] for k in own if k in given},
        )

    @property
    def step_timeout(self) -> float | None:
        """The env deadline the run uses: the config's once picked, else the flag's."""
        if self.config is not None:
            return self.config.rollout.step_timeout
        return self.settings.get(("rollout", "step_timeout"))


NOT_REPLAYED = {"out", "resume", "overwrite", "config", "json", "seeds"}
"""Spec fields a replay does not take from the run: where it writes, and how it was started."""


def spec_record(spec: RunSpec) -> dict[str, Any]:
    """``spec`` as JSON-able data for ``provenance.spec`` (``spec_from_record``'s inverse)."""
    record = {
        f.name: getattr(spec, f.name) for f in dataclasses.fields(RunSpec) if f.name not in NOT_REPLAYED | {"settings"}
    }
    record["settings"] = [[list(path), value] for path, value in spec.settings.items()]
    return json.loads(json.dumps(record, default=str))


def spec_from_record(record: dict[str, Any], out: Path, overwrite: bool) -> RunSpec:
    """The spec ``spec_record`` recorded, writing to ``out``."""
    fields = {f.name for f in dataclasses.fields(RunSpec)} - NOT_REPLAYED - {"settings"}
    given = {k: v for k, v in record.items() if k in fields}
    settings = {tuple(path): value for path, value in record.get("settings", [])}
    return RunSpec(**given, settings=settings, out=out, overwrite=overwrite)


__all__ = [
    "FLAG_NAMES",
    "OWN_FLAGS",
    "RunSpec",
    "config_flags",
    "flat",
    "nested",
    "parse_kwargs",
    "spec_from_record",
    "spec_record",
]
