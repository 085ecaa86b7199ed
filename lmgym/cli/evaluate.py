"""``lmgym eval``: greedy (and sampled) success of a saved model on held-out seeds."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

from lmgym.cli.errors import UsageError, one_line_failures
from lmgym.cli.options import (
    add_env_flags,
    add_json_flag,
    add_model_flags,
    add_run_flags,
    add_samples_flag,
    check_inputs,
    close_within,
    json_only,
    make_env,
    table,
    with_tools,
)
from lmgym.cli.session import check_chat_template, make_agent, make_envs, quiet_transformers, set_threads
from lmgym.cli.spec import RunSpec


def add_parser(sub: Any) -> None:
    p = sub.add_parser("eval", help="greedy success on held-out seeds, with its 95%% interval (pass@k with --samples)")
    p.add_argument("env_id")
    add_model_flags(p, "a directory saved by lmgym train (or any HF model path)", required=True)
    add_run_flags(p, num_envs=50, episodes=(200, "held-out episodes (default: 200)"))
    add_json_flag(p)
    p.add_argument("--sampled", action="store_true", help="also play the episodes sampled once: --samples 1")
    add_samples_flag(p)
    add_env_flags(p)
    p.set_defaults(func=evaluate_command)


def evaluate_command(args: argparse.Namespace) -> None:
    """``lmgym eval``: a failure after the input is checked (an env that raises, a model that does
    not load) is one line, its traceback in a temporary file."""
    spec = RunSpec.from_args(args)
    check_inputs(spec)
    with one_line_failures():
        evaluate_model(spec)


def as_trained(spec: RunSpec) -> RunSpec:
    """The spec with how the model was trained (its manifest: chat template, system message,
    tools, env arguments) where the command line did not say otherwise; the env arguments
    checked as ``--env-arg``s are."""
    from lmgym.agents.models import read_manifest

    assert spec.model is not None
    try:
        manifest = read_manifest(spec.model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from e
    spec = dataclasses.replace(
        spec,
        chat_template=spec.chat_template or bool(manifest.get("chat_template")),
        system=spec.system if spec.system is not None else manifest.get("system"),
        tools=spec.tools or manifest.get("tools"),
        env_kwargs={**manifest.get("env_kwargs", {}), **spec.env_kwargs},  # --env-arg overrides
    )
    close_within(with_tools(make_env(spec.env_id, **spec.env_kwargs), spec.tools))
    return spec


def evaluate_model(spec: RunSpec) -> None:
    from lmgym.agents.config import PPOConfig
    from lmgym.agents.evaluation import evaluate

    assert spec.model is not None
    episodes = spec.episodes or 200
    if not os.path.exists(spec.model):
        raise UsageError(f"--model {spec.model!r} does not exist")
    set_threads(None)
    quiet_transformers()
    spec = dataclasses.replace(as_trained(spec), config=PPOConfig(seed=spec.seed))
    with json_only(spec.json):
        agent = make_agent(spec)
        check_chat_template(spec, agent.tokenizer)
        samples = max(spec.samples, 1 if spec.sampled else 0)
        envs = make_envs(spec, eval_envs_count(spec.num_envs, episodes, samples), agent.tokenizer)
        wrapped = [f"tools {spec.tools}"] * bool(spec.tools) + ["its chat template"] * bool(spec.chat_template)
        print(f"{spec.env_id}{' with ' + ' and '.join(wrapped) if wrapped else ''}, {spec.env_kwargs or 'no env args'}")
        stats = evaluate(agent, envs, episodes, greedy=True, progress=True, samples=samples)[0]
    if spec.json:
        print(json.dumps(stats))
        return
    print(results_table(stats))


def eval_envs_count(num_envs: int, episodes: int, samples: int) -> int:
    """Envs for an evaluation: at most ``num_envs`` and ``episodes`` (times ``samples``), a multiple of ``samples``."""
    k = max(1, samples)
    return max(k, min(num_envs, episodes * k) // k * k)


def results_table(stats: dict[str, Any]) -> str:
    """An evaluation as a table: greedy success with its 95% interval, and, when it has them, the
    sampled success and pass@k."""
    rows = [row("greedy", stats)]
    sampled = stats.get("sampled")
    if sampled:
        k = sampled["k"]
        rows.append(row(f"sampled (x{k})", sampled) + [f"{sampled[f'pass@{k}']:.1%}"])
    header = ["", "success", "95% interval", "tool-call rate", "mean return", "episodes"]
    return table(
        header + ([f"pass@{sampled['k']}"] if sampled else []),
        [r + [""] * (len(header) + bool(sampled) - len(r)) for r in rows],
    )


def row(name: str, s: dict[str, Any]) -> list[str]:
    lo, hi = s["success_ci"]
    return [
        name,
        f"{s['success']:.1%}",
        f"{lo:.1%}-{hi:.1%}",
        f"{s['tool_rate']:.1%}",
        f"{s['mean_return']:.3f}",
        str(s["episodes"]),
    ]


__all__ = ["add_parser", "evaluate_command"]
