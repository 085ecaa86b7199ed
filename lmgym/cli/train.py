"""``lmgym train``: the main job, from the command line.

With no arguments it trains the embedded default model on ``lmgym/Calculator-v0`` (on a laptop
CPU, in minutes) and writes the model, metrics, a learning curve, transcripts and a summary to
``--out``. ``train`` runs in steps: check the input, claim the run dir, build the agent and envs,
evaluate before, learn, evaluate after, write the outputs.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Any

from lmgym.agents.defaults import PRETRAINED_MINUTES
from lmgym.cli.options import (
    Interrupted,
    RunError,
    UsageError,
    add_config_flags,
    add_model_flags,
    add_tools_flag,
    check_inputs,
    config_overrides,
    failure_line,
    parse_kwargs,
    table,
)
from lmgym.cli.rundir import claim_run_dir
from lmgym.cli.session import (
    check_chat_template,
    connect_ray,
    make_agent,
    make_envs,
    pretrained_recipe,
    quiet_transformers,
    set_threads,
    warn_cut_turns,
)
from lmgym.storage import write_aside

DEFAULT_ENV = "lmgym/Calculator-v0"
DEFAULT_EPISODES = 4096


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a model with PPO on an env")
    p.add_argument("env_id", nargs="?", default=DEFAULT_ENV)
    p.add_argument("--model", default=None, help="HF model name or local path (default: the embedded tiny model)")
    p.add_argument(
        "--episodes",
        type=int,
        default=None,
        help=f"training episodes (default: {DEFAULT_EPISODES}; with --model, as many as fit about {PRETRAINED_MINUTES} "
        "minutes of training on this machine, sized from the first update)",
    )
    p.add_argument(
        "--stop-at-success",
        type=float,
        default=None,
        metavar="P",
        help="stop once held-out greedy success (checked every --eval-every updates, and before training) reaches P",
    )
    p.add_argument("--num-envs", type=int, default=32, help="envs played in parallel (default: 32)")
    p.add_argument("--out", default="runs/train", help="output directory (default: runs/train)")
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out episodes for before/after")
    p.add_argument("--eval-every", type=int, default=10, help="greedy evaluation every N updates (0: off)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores, at most 2)")
    p.add_argument("--no-cache", action="store_true", help="rebuild the default model's warm start")
    p.add_argument(
        "--warmstart-steps",
        type=int,
        default=None,
        help="supervised steps on the env's demonstrations before RL (default model: 1600; --model: none unless given)",
    )
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="gym.make argument")
    add_tools_flag(p)
    add_model_flags(p)
    p.add_argument(
        "--lora",
        default=None,
        metavar="SPEC",
        help="LoRA adapters, e.g. r=16 or r=16,alpha=32,targets=q_proj+v_proj; none: full fine-tuning "
        "(default with --model: r=16 when peft is installed)",
    )
    p.add_argument(
        "--add-special-tokens", action="store_true", help="add the env's tags to an HF tokenizer as tokens (and resize)"
    )
    p.add_argument(
        "--resume", default=None, metavar="CHECKPOINT", help="continue from a checkpoint (OUT/checkpoints/last, or OUT)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out (default: refuse)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: join the cluster at ADDRESS (auto: the one running here), or start a local one",
    )
    p.add_argument("--env-workers", type=int, default=0, help="Ray actors that hold the envs (0: threads here)")
    p.add_argument(
        "--env-worker-cpus",
        type=float,
        default=None,
        help="CPUs each env actor holds while it runs (default: Ray's own, one to be placed and none while it runs)",
    )
    add_config_flags(p)
    p.add_argument("--estimator", choices=["gae", "rloo", "grpo"], default="gae")
    p.add_argument("--generation-kwargs", type=json.loads, default=None, help="JSON of transformers generation kwargs")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=train)


def train(args: argparse.Namespace) -> None:
    check_inputs(args)  # bad input fails here, before torch is even imported
    started = time.perf_counter()
    out = Path(args.out)
    lock = claim_run_dir(args)  # noqa: F841 (held until the process ends)
    built: dict[str, Any] = {}  # the agent and envs once they exist: a failure checkpoints the agent
    try:
        run(args, built, started)
    except (UsageError, RunError):
        raise
    except KeyboardInterrupt as e:
        raise Interrupted(run_failure(built.get("agent"), built.get("envs"), out, e)) from e
    except BaseException as e:  # noqa: BLE001 (whatever failed, one line; the traceback in OUT/error.log)
        raise RunError(run_failure(built.get("agent"), built.get("envs"), out, e)) from e


def run(args: argparse.Namespace, built: dict[str, Any], started: float) -> None:
    """The run: the agent and envs (kept in ``built``), evaluate before, learn, evaluate after, write."""
    env_kwargs = parse_kwargs(args.env_arg)
    set_threads(args.threads)
    quiet_transformers()
    connect_ray(args)
    from lmgym.agents.engines import engine_problem
    from lmgym.agents.models import format_memory

    config = run_config(args, pretrained_recipe(args, env_kwargs) if args.model else None)
    problem = None if config.engine.engines else engine_problem(config.engine.name)  # before any model is built
    if problem:
        raise UsageError(problem)
    agent = built["agent"] = make_agent(args, config, env_kwargs)
    check_chat_template(args, agent.tokenizer)
    print(format_memory(agent.memory_estimate()))
    k = config.group_size or 1
    envs = built["envs"] = make_envs(args, max(k, args.num_envs // k * k), agent.tokenizer, env_kwargs)
    eval_envs = make_envs(args, min(50, args.eval_episodes), agent.tokenizer, env_kwargs)
    if args.resume is not None:
        resume(agent, args.resume, envs)
    if args.episodes is None and args.model is None:
        args.episodes = DEFAULT_EPISODES
    before = evaluate_before(args, agent, eval_envs, Path(args.out))
    if args.stop_at_success is not None and before[0]["success"] >= args.stop_at_success:
        print(f"held-out greedy success {before[0]['success']:.1%} is at --stop-at-success already: no training")
        after = before
    else:
        after = learn(args, agent, envs, eval_envs, Path(args.out))
    write_outputs(args, agent, env_kwargs, before, after)
    report(args, agent, before[0], after[0], time.perf_counter() - started)


def run_config(args: argparse.Namespace, recipe: Any = None) -> Any:
    """The ``PPOConfig`` of the run: the default model's settings (no ``--model``) or a pretrained
    model's ``recipe``, then the flags; ``recipe`` is told what was picked in the end."""
    from lmgym.agents.config import PPOConfig
    from lmgym.agents.defaults import TINY_MODEL_CONFIG

    base = dict(TINY_MODEL_CONFIG) if recipe is None else dict(recipe.config)
    try:
        if args.lora:
            from lmgym.agents.models import parse_lora

            base["peft_config"] = None if args.lora == "none" else parse_lora(args.lora)
        flags = {"seed": args.seed, "estimator": args.estimator, "generation_kwargs": args.generation_kwargs or {}}
        config = PPOConfig(**{**base, **config_overrides(args), **flags})
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from e
    if recipe is not None:
        recipe.config, recipe.episodes = config.flat(), args.episodes
        print(f"recipe for a pretrained model: {recipe.describe()} (each of them a flag)")
    return config


def resume(agent: Any, checkpoint: str, envs: Any) -> None:
    from lmgym.agents.checkpoints import CheckpointError

    try:
        resumed = agent.load_training_state(checkpoint, envs)
    except CheckpointError as e:
        raise UsageError(f"--resume: {e}") from e
    print(f"resumed from {resumed} (update {agent.num_updates}, {agent.num_episodes} episodes)")


def evaluate_before(args: argparse.Namespace, agent: Any, eval_envs: Any, out: Path) -> tuple[dict[str, Any], Any]:
    """The greedy evaluation before training, logged as update 0 of a new run's metrics."""
    from lmgym.agents.callbacks import eval_metrics
    from lmgym.agents.evaluation import evaluate
    from lmgym.agents.metrics import MetricsLogger

    before = evaluate(agent, eval_envs, args.eval_episodes, progress=True)
    warn_cut_turns(agent, before[1], agent.env_contract(eval_envs)["max_new_tokens"])
    if args.resume is None:  # a resumed run keeps the history it has
        logger = MetricsLogger(out, agent.config.flat())
        logger.log(eval_metrics(before[0]), 0)
        logger.close()
    return before


def learn(args: argparse.Namespace, agent: Any, envs: Any, eval_envs: Any, out: Path) -> tuple[dict[str, Any], Any]:
    """PPO for ``--episodes`` (``None``: as many as fit ``PRETRAINED_MINUTES`` here, sized from the first
    update), evaluated every ``--eval-every`` updates, ending early at ``--stop-at-success``; the
    final evaluation. The first update is timed, and the run's time estimated from it."""
    from lmgym.agents.callbacks import Evaluator
    from lmgym.agents.evaluation import evaluate

    target = args.episodes
    evaluator = Evaluator(eval_envs, min(100, args.eval_episodes), args.eval_every, args.eval_episodes, target)
    stop = StopAtSuccess(args.stop_at_success)
    timer = FirstUpdate()
    run = functools.partial(agent.learn, envs, log_dir=out, checkpoint_dir=out / "checkpoints")
    first = agent.num_episodes + agent.config.episodes_per_update
    run(total_episodes=first if target is None else min(first, target), callbacks=[evaluator, stop, timer])
    if target is None:
        target = budget_episodes(agent, timer.seconds, PRETRAINED_MINUTES * 60, args.eval_every)
        evaluator.total_episodes = target
        print(f"episode budget: {target} ({describe_budget(agent, target, timer.seconds)}; --episodes N to choose)")
    elif agent.num_episodes < target:
        print(f"update {agent.num_updates} took {timer.seconds:.0f} s: {describe_budget(agent, target, timer.seconds)}")
    if agent.num_episodes < target and not stop.stopped:
        run(total_episodes=target, callbacks=[evaluator, stop])
    return evaluator.final or evaluate(agent, eval_envs, args.eval_episodes)


class FirstUpdate:
    """``on_update`` callback: the seconds the first update of a ``learn`` call took (collect and update)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def on_update(self, agent: Any, metrics: dict[str, float]) -> None:
        if not self.seconds:
            self.seconds = float(metrics.get("time/collect", 0.0) + metrics.get("time/update", 0.0))


class StopAtSuccess:
    """``on_update`` callback: stops training once a held-out greedy evaluation (``--eval-every``)
    reaches ``threshold`` (SB3's ``StopTrainingOnRewardThreshold``, on success)."""

    def __init__(self, threshold: float | None):
        self.threshold, self.stopped = threshold, False

    def on_update(self, agent: Any, metrics: dict[str, float]) -> bool | None:
        success = metrics.get("eval/success")
        if self.threshold is None or success is None or success < self.threshold:
            return None
        print(f"held-out greedy success {success:.1%} reached --stop-at-success {self.threshold:g}: stopping")
        self.stopped = True
        return False


def budget_episodes(agent: Any, update_seconds: float, seconds: float, eval_every: int) -> int:
    """Episodes that fit ``seconds`` of training at ``update_seconds`` an update, whole updates, at
    least 2 and at most ``DEFAULT_EPISODES`` (an evaluation every ``eval_every`` updates costs
    about a third of an update)."""
    per_update = update_seconds * (1 + (1 / 3 if eval_every else 0) / max(1, eval_every))
    updates = max(2, min(int(seconds // max(per_update, 1e-9)), DEFAULT_EPISODES // agent.config.episodes_per_update))
    return updates * agent.config.episodes_per_update


def describe_budget(agent: Any, target: int, update_seconds: float) -> str:
    left = -(-(target - agent.num_episodes) // agent.config.episodes_per_update)
    finish = time.strftime("%H:%M", time.localtime(time.time() + left * update_seconds))
    minutes = left * update_seconds / 60
    return (
        f"{left} more updates of {agent.config.episodes_per_update} take about {minutes:.0f} min (done about {finish})"
    )


def run_failure(agent: Any, envs: Any, out: Path, error: BaseException) -> str:
    """The run failed (an env, the engine's process, Ray, a model file, anything): the traceback
    goes to ``OUT/error.log``, the agent as of its last update to a checkpoint (a failed collect
    changes no weights); returns the line that says so."""
    resume = ""
    if agent is not None and agent.num_updates:
        try:
            agent.save_checkpoint(out / "checkpoints", envs)
            resume = f"; update {agent.num_updates} is checkpointed: fix it, then --resume {out}"
        except Exception as e:  # noqa: BLE001 (a full disk, say: the last good checkpoint stays)
            resume = f"; checkpointing update {agent.num_updates} failed too ({type(e).__name__}: {str(e)[:100]})"
    return failure_line(error, out / "error.log", resume)


def write_outputs(
    args: argparse.Namespace, agent: Any, env_kwargs: dict[str, Any], before: tuple, after: tuple
) -> None:
    """The model (with how its env was made, for ``lmgym eval``), the curve and the transcripts."""
    from lmgym.agents.evaluation import transcript
    from lmgym.agents.plotting import plot_learning_curve

    out = Path(args.out)
    manifest = {"env": args.env_id, "chat_template": args.chat_template, "system": args.system, "tools": args.tools}
    agent.save(out / "model", manifest={**manifest, "env_kwargs": env_kwargs})  # lmgym eval applies them
    title = f"{args.env_id}: PPO ({agent.config.estimator})"
    plot_learning_curve(out / "metrics.csv", out / "learning_curve.png", title)
    parts = []
    for name, (_, batch) in (("before", before), ("after", after)):
        parts.append(f"## {name} training (greedy, held-out seeds)\n\n")
        for episode in batch.episodes[:5]:
            text = transcript(agent, episode)
            parts.append(f"seed {episode.seed}, return {episode.return_:g}:\n\n```\n{text}\n```\n\n")
    write_aside(out / "transcripts.md", "".join(parts))


def report(args: argparse.Namespace, agent: Any, before: dict[str, Any], after: dict[str, Any], wall: float) -> None:
    """``summary.json``, and the before/after table."""
    out = Path(args.out)
    keys = ("success", "tool_rate", "mean_return", "errors")
    summary = {
        "env": args.env_id,
        "model": args.model or "default (tiny Llama, warm-started)",
        "tools": args.tools,
        "warmstart_steps": args.warmstart_steps,
        "before": {k: before[k] for k in keys},
        "after": {k: after[k] for k in keys},
        "wall_seconds": round(wall, 1),
        "seed": args.seed,
        "episodes": agent.num_episodes,
        "estimator": agent.config.estimator,
    }
    write_aside(out / "summary.json", json.dumps(summary, indent=2))
    rows = [
        ["success (greedy)", f"{before['success']:.1%}", f"{after['success']:.1%}"],
        ["tool-call rate", f"{before['tool_rate']:.1%}", f"{after['tool_rate']:.1%}"],
        ["mean return", f"{before['mean_return']:.3f}", f"{after['mean_return']:.3f}"],
    ]
    print(table(["", "before", "after"], rows))
    print(f"wall time {wall:.0f} s; {agent.num_episodes} episodes; outputs in {out}/")
    print(f"see what training did, token by token: lmgym view {out}")


__all__ = ["DEFAULT_ENV", "add_parser", "train"]
