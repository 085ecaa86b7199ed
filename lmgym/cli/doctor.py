"""``lmgym doctor``: the checks of ``lmgym.checkup`` on the run ``lmgym train`` would make with the
same arguments, in a minute or two: the same agent (the default model, or ``--model`` with its
recipe) and envs, before any warm start (a model with one ahead of it gets a warning, not a
failure, where it earns no reward yet). One line per check; ``--json`` for machines; exit status
1 on any FAIL."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from lmgym.cli.errors import one_line_failures
from lmgym.cli.options import (
    add_config_flags,
    add_env_flags,
    add_json_flag,
    add_model_flags,
    add_run_flags,
    check_inputs,
    json_only,
)
from lmgym.cli.spec import RunSpec

if TYPE_CHECKING:
    from lmgym.checkup import Report


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the run lmgym train would make for the silent failures of LLM RL")
    p.add_argument("env_id", nargs="?", default="lmgym/Calculator-v0")
    add_model_flags(p, "HF model name or local path (default: the embedded tiny model)", training=True)
    add_env_flags(p)
    p.add_argument("--groups", type=int, default=4, help="groups of sampled episodes to play (default: 4)")
    add_run_flags(p, num_envs=16, episodes=(None, "the run's episodes, for its time (default: 4096)"))
    add_json_flag(p)
    add_config_flags(p)
    p.set_defaults(func=doctor_command)


def doctor_command(args: argparse.Namespace) -> None:
    spec = RunSpec.from_args(args)
    check_inputs(spec)
    with one_line_failures(), json_only(spec.json):
        report = examine(spec, args.groups)
    print(report.to_json() if spec.json else report)
    if not report.ok:
        sys.exit(1)


def examine(spec: RunSpec, groups: int = 4) -> Report:
    """The agent and envs ``lmgym train`` would build for ``spec`` (no warm start), checked."""
    from lmgym.agents.defaults import DEFAULT_EPISODES
    from lmgym.checkup import doctor
    from lmgym.cli.session import (
        env_maker,
        make_agent,
        make_envs,
        pretrained_recipe,
        quiet_transformers,
        run_config,
        run_envs_count,
        set_threads,
        with_reply_budget,
    )

    set_threads(spec.threads)
    quiet_transformers()
    spec, recipe = pretrained_recipe(spec) if spec.model else (spec, None)
    ahead = bool(spec.warmstart_steps) if spec.model else not default_model_cached(spec)
    spec = dataclasses.replace(spec, config=run_config(spec, recipe), warmstart_steps=0 if ahead else None)
    agent = make_agent(spec)
    spec = with_reply_budget(spec, recipe, agent)
    envs = make_envs(spec, run_envs_count(spec), agent.tokenizer)
    try:
        episodes = spec.episodes or DEFAULT_EPISODES
        return doctor(agent, envs, env_maker(spec, agent.tokenizer), groups, total_episodes=episodes, untrained=ahead)
    finally:
        envs.close()
        agent.close()


def default_model_cached(spec: RunSpec) -> bool:
    """Whether the default model's warm start for this env is in the cache (the doctor then checks
    the warm-started model; else the model as built, its warm start ahead)."""
    from lmgym.agents.warmstart import WarmStartConfig, cache_entry

    return cache_entry(spec.env_id, dict(spec.env_kwargs), WarmStartConfig(seed=spec.seed))[1].exists()


__all__ = ["add_parser", "doctor_command", "examine"]
