"""``lmgym train``: the main job, from the command line.

With no arguments it trains the embedded default model on ``lmgym/Calculator-v0`` (on a laptop
CPU, in minutes) and writes the model, metrics, a learning curve, transcripts and a summary to
``--out``. ``train`` runs in steps, each reading the ``RunSpec`` the command line was parsed into
once: check the input, claim the run dir, pick the config (and, for a pretrained model, the
recipe), build the agent and envs, evaluate before, learn, evaluate after, write the outputs
(``lmgym.cli.outputs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmgym.agents.defaults import DEFAULT_EPISODES, PRETRAINED_MINUTES, PURE_RL_MIN_UPDATES
from lmgym.cli.errors import Preempted, Preemption, RunError, UsageError, failure_line, one_line_failures
from lmgym.cli.evaluate import eval_envs_count
from lmgym.cli.options import (
    add_config_flags,
    add_env_flags,
    add_model_flags,
    add_output_flags,
    add_overwrite_flag,
    add_ray_flags,
    add_run_flags,
    add_samples_flag,
    check_inputs,
)
from lmgym.cli.outputs import report, write_outputs
from lmgym.cli.rundir import claim_run_dir
from lmgym.cli.session import (
    check_chat_template,
    connect_ray,
    default_budgets,
    make_agent,
    make_envs,
    pretrained_recipe,
    quiet_transformers,
    run_config,
    run_envs_count,
    set_threads,
    warn_cut_turns,
    with_reply_budget,
)
from lmgym.cli.spec import RunSpec

if TYPE_CHECKING:
    from gymnasium.vector import VectorEnv

    from lmgym.agents.ppo import PPOAgent
    from lmgym.agents.trajectories import Trajectories

DEFAULT_ENV = "lmgym/Calculator-v0"
DEFAULT_OUT = "runs/train"
Evaluation = tuple[dict[str, Any], "Trajectories"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a model with PPO on an env")
    p.add_argument("env_id", nargs="?", default=DEFAULT_ENV)
    add_model_flags(p, "HF model name or local path (default: the embedded tiny model)", training=True)
    episodes_help = (
        f"training episodes (default: as many as fit about {PRETRAINED_MINUTES} minutes of training on this "
        f"machine, sized from the first update, at most {DEFAULT_EPISODES})"
    )
    add_run_flags(p, num_envs=32, episodes=(None, episodes_help))
    p.add_argument(
        "--stop-at-success",
        type=float,
        default=None,
        metavar="P",
        help="stop once held-out greedy success (checked every --eval-every updates, and before training) reaches P",
    )
    add_output_flags(p, (DEFAULT_OUT, f"output directory (default: {DEFAULT_OUT})"))
    add_overwrite_flag(p, "the run already in --out")
    p.add_argument("--eval-episodes", type=int, default=200, help="held-out episodes for before/after")
    p.add_argument("--eval-every", type=int, default=10, help="greedy evaluation every N updates (0: off)")
    p.add_argument("--no-cache", action="store_true", help="rebuild the default model's warm start")
    add_env_flags(p)
    p.add_argument(
        "--add-special-tokens", action="store_true", help="add the env's tags to an HF tokenizer as tokens (and resize)"
    )
    p.add_argument(
        "--resume", default=None, metavar="CHECKPOINT", help="continue from a checkpoint (OUT/checkpoints/last, or OUT)"
    )
    add_ray_flags(p)
    add_config_flags(p)
    add_learning_flags(p)
    p.add_argument(
        "--generation-kwargs",
        type=json.loads,
        default=None,
        help="JSON of transformers generation kwargs, on top of the recipe's",
    )
    p.add_argument("--doctor", action="store_true", help="run lmgym doctor's checks first; stop on a FAIL")
    p.add_argument(
        "--seeds",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=None,
        metavar="0,1,2",
        help="one run per seed, one after the other, in OUT/seed-N, then compared (lmgym compare) into OUT",
    )
    p.add_argument(
        "--replay",
        default=None,
        metavar="RUN",
        help="train RUN's recorded command again (into --out, default RUN-replay) and say where the two first differ",
    )
    p.set_defaults(func=train)


def add_learning_flags(p: argparse.ArgumentParser) -> None:
    """How RL learns and how a learning claim is checked."""
    p.add_argument(
        "--allow-no-signal",
        action="store_true",
        help="train on when batches give RL nothing to learn from (default: stop after 3 such batches in a row)",
    )
    add_samples_flag(p)


def train(args: argparse.Namespace) -> None:
    if args.replay is not None:
        run = Path(args.replay)
        replay_run(
            run, Path(args.out) if args.out != DEFAULT_OUT else run.with_name(run.name + "-replay"), args.overwrite
        )
        return
    spec = RunSpec.from_args(args)
    check_inputs(spec)  # bad input fails here, before torch is even imported
    if spec.seeds:  # one run per seed, one after the other, then compared
        for seed in spec.seeds:
            print(f"--- seed {seed}: {spec.out / f'seed-{seed}'}")
            train_one(dataclasses.replace(spec, seed=seed, seeds=None, out=spec.out / f"seed-{seed}"))
        from lmgym.cli.compare import compare, printed

        print(printed(compare([spec.out / f"seed-{seed}" for seed in spec.seeds], spec.out)))
        print(f"wrote {spec.out / 'compare.json'} and {spec.out / 'compare.png'}")
        return
    train_one(spec)


def replay_run(run: Path, out: Path, overwrite: bool) -> None:
    """``--replay RUN``: trains ``run``'s recorded command into ``out`` and prints how the two runs
    compare; a replay that differs is a ``ReplayDiffers`` (exit status 1) naming the first update
    that does (``lmgym.cli.replay``)."""
    from lmgym.cli.outputs import provenance_now
    from lmgym.cli.replay import ReplayDiffers, changed, first_difference, recorded
    from lmgym.cli.spec import spec_from_record

    provenance = recorded(run)
    if out.resolve() == run.resolve():
        raise UsageError(f"--replay {str(run)!r}: pass another --out (the replay writes a run of its own)")
    differs = changed(provenance, provenance_now())
    if differs:
        print(f"replay: not the run's setting ({'; '.join(differs)}): it may differ for that reason alone")
    print(f"replaying {run} into {out}")
    train_one(spec_from_record(provenance["spec"], out, overwrite))
    difference = first_difference(run, out)
    if difference:
        raise ReplayDiffers(difference)
    print(f"replay: identical ({run} and {out}: episodes, metrics and weights)")


def train_one(spec: RunSpec) -> None:
    """One run of ``spec`` into ``spec.out``."""
    started = time.perf_counter()
    lock = claim_run_dir(spec)  # noqa: F841 (held until the process ends)
    built: dict[str, Any] = {}  # the agent and envs once they exist: a failure checkpoints the agent
    preemption = built["preemption"] = Preemption()
    preemption.install()  # SIGTERM/SIGUSR1: checkpoint the last whole update, exit 143
    with one_line_failures(lambda e: run_failure(built.get("agent"), built.get("envs"), spec.out, e)):
        run(spec, built, started)  # a failure: one line, the traceback in OUT/error.log, a checkpoint


def run(spec: RunSpec, built: dict[str, Any], started: float) -> None:
    """The run: the agent and envs (kept in ``built``), evaluate before, learn, evaluate after, write."""
    given = spec  # the command as given: what --replay runs again (with the episodes picked)
    set_threads(spec.threads)
    quiet_transformers()
    connect_ray(spec)
    from lmgym.agents.engines import engine_problem
    from lmgym.agents.models import format_memory

    spec, recipe = pretrained_recipe(spec) if spec.model else (default_budgets(spec), None)
    spec = dataclasses.replace(spec, config=run_config(spec, recipe))
    config = spec.config
    assert config is not None
    problem = None if config.engine.engines else engine_problem(config.engine.name)  # before any model is built
    if problem:
        raise UsageError(problem)
    agent = built["agent"] = make_agent(spec)
    step, save = agent.learn_step, agent.save_checkpoint  # an update, its metrics and checkpoint run whole
    agent.learn_step = lambda *a, **k: deferred(built["preemption"], step, *a, **k)  # type: ignore[method-assign]
    agent.save_checkpoint = lambda *a, **k: deferred(built["preemption"], save, *a, **k)  # type: ignore[method-assign]
    check_chat_template(spec, agent.tokenizer)
    print(format_memory(agent.memory_estimate()))
    spec = with_reply_budget(spec, recipe, agent)
    envs = built["envs"] = make_envs(spec, run_envs_count(spec), agent.tokenizer)
    eval_envs = make_envs(spec, eval_envs_count(spec.num_envs, spec.eval_episodes, spec.samples), agent.tokenizer)
    if spec.doctor:
        checkup(spec, agent, envs)
    if spec.resume is not None:
        resume(agent, spec.resume, envs)
    evaluated = time.perf_counter()
    before = evaluate_before(spec, agent, eval_envs)
    pace = (time.perf_counter() - evaluated) / (spec.eval_episodes * (1 + spec.samples))
    if spec.stop_at_success is not None and before[0]["success"] >= spec.stop_at_success:
        print(f"held-out greedy success {before[0]['success']:.1%} is at --stop-at-success already: no training")
        after = before
    else:
        least = PURE_RL_MIN_UPDATES if recipe and recipe.pure else 2
        after, target = learn(spec, agent, envs, eval_envs, least, pace)
        given = dataclasses.replace(given, episodes=target)
    write_outputs(spec, agent, before, after)
    report(spec, agent, before[0], after[0], time.perf_counter() - started, given)


def checkup(spec: RunSpec, agent: PPOAgent, envs: VectorEnv) -> None:
    """``--doctor``: ``lmgym.checkup.doctor`` on the run's agent (warm-started) and envs; a FAIL stops the run."""
    from lmgym.checkup import doctor
    from lmgym.cli.session import env_maker

    report = doctor(agent, envs, env_maker(spec, agent.tokenizer), total_episodes=spec.episodes)
    print(report)
    failed = [c.name for c in report.checks if c.status == "FAIL"]
    if failed:
        raise RunError(f"the doctor found {len(failed)} failure(s) ({', '.join(failed)}): see its report above")


def resume(agent: PPOAgent, checkpoint: str, envs: VectorEnv) -> None:
    from lmgym.agents.checkpoints import CheckpointError

    try:
        resumed = agent.load_training_state(checkpoint, envs)
    except CheckpointError as e:
        raise UsageError(f"--resume: {e}") from e
    print(f"resumed from {resumed} (update {agent.num_updates}, {agent.num_episodes} episodes)")


def evaluate_before(spec: RunSpec, agent: PPOAgent, eval_envs: VectorEnv) -> Evaluation:
    """The greedy evaluation before training, logged as update 0 of a new run's metrics."""
    from lmgym.agents.callbacks import eval_metrics
    from lmgym.agents.evaluation import evaluate
    from lmgym.agents.metrics import MetricsLogger

    before = evaluate(agent, eval_envs, spec.eval_episodes, progress=True, samples=spec.samples)
    warn_cut_turns(agent, before[1], agent.env_contract(eval_envs).max_new_tokens)
    if spec.resume is None:  # a resumed run keeps the history it has
        logger = MetricsLogger(spec.out, agent.config.settings())
        logger.log(eval_metrics(before[0]), 0)
        logger.close()
    return before


def learn(
    spec: RunSpec, agent: PPOAgent, envs: VectorEnv, eval_envs: VectorEnv, least: int = 2, pace: float = 0.0
) -> tuple[Evaluation, int]:
    """PPO for ``--episodes`` (``None``: as many as fit ``PRETRAINED_MINUTES`` here, sized from the
    first update, at least ``least`` updates), evaluated every ``--eval-every`` updates, ending
    early at ``--stop-at-success``; the final evaluation, and the episodes the run was to train.
    The run's time is estimated up front from ``pace`` (the evaluation's seconds an episode) and
    again, measured, from the first update."""
    from lmgym.agents.callbacks import Evaluator, NoSignal, StopAtSuccess, help_line
    from lmgym.agents.evaluation import evaluate

    target = spec.episodes
    evaluator = Evaluator(
        eval_envs, min(100, spec.eval_episodes), spec.eval_every, spec.eval_episodes, target, spec.samples
    )
    stop, timer = StopAtSuccess(spec.stop_at_success), FirstUpdate()
    signal = NoSignal(patience=None if spec.allow_no_signal else 3, help=help_line(has_already(spec)))
    first_callbacks: list[Any] = [signal, evaluator, stop, timer]
    learn_to = functools.partial(agent.learn, envs, log_dir=spec.out, checkpoint_dir=spec.out / "checkpoints")
    first = agent.num_episodes + agent.config.episodes_per_update
    say_estimate(agent, target, pace, spec.eval_every, least)
    learn_to(total_episodes=first if target is None else target, callbacks=first_callbacks)  # the timer stops it
    if target is None:
        target = budget_episodes(agent, timer.seconds, PRETRAINED_MINUTES * 60, spec.eval_every, least)
        evaluator.total_episodes = target
        print(f"episode budget: {target} ({describe_budget(agent, target, timer.seconds)}; --episodes N to choose)")
    elif agent.num_episodes < target:
        print(f"update {agent.num_updates} took {timer.seconds:.0f} s: {describe_budget(agent, target, timer.seconds)}")
    if agent.num_episodes < target and not stop.stopped and not signal.stopped:
        learn_to(total_episodes=target, callbacks=[signal, evaluator, stop])
    if signal.stopped:
        print(f"stopped after {agent.num_episodes} episodes: {signal.stopped}; --allow-no-signal trains on")
    return evaluator.final or evaluate(agent, eval_envs, spec.eval_episodes, samples=spec.samples), target


UPDATE_EPISODE_COST = 9
"""An update's seconds an episode, in evaluated episodes' seconds (a greedy episode played in
the evaluation's batch): sampling, scoring and the gradient step. Measured on SmolLM2-135M with
LoRA from rewards alone on 2-digit sums, 1 thread of a 2-core machine: 8.6 (GRPO) and 9.7 (RLOO)
at the first update; an estimate only, said as one until the first update is timed."""


def has_already(spec: RunSpec) -> set[str]:
    """What of the no-signal advice (``callbacks.HINTS``) the run has already: a tool, the final
    answer format, a warm start."""
    given = {"tools": bool(spec.tools), "warmstart": bool(spec.warmstart_steps)}
    given["answer_format"] = spec.env_kwargs.get("answer_format") == "final"
    return {key for key, present in given.items() if present}


def say_estimate(agent: PPOAgent, target: int | None, pace: float, eval_every: int, least: int) -> None:
    """The run's time before its first update, from ``pace`` (an evaluated episode's seconds), where
    it is a minute or more."""
    guess = UPDATE_EPISODE_COST * pace * agent.config.episodes_per_update
    planned = target or budget_episodes(agent, guess, PRETRAINED_MINUTES * 60, eval_every, least)
    if pace and (planned - agent.num_episodes) / agent.config.episodes_per_update * guess >= 60:
        print(f"estimated: {describe_budget(agent, planned, guess)} (from the evaluation's pace; timed after update 1)")


class FirstUpdate:
    """``on_update`` callback: the seconds the first update of a ``learn`` call took (collect and
    update); it ends that call, which was given the run's target so that the learning-rate schedule
    is the run's, resumed or not."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def on_update(self, agent: PPOAgent, metrics: dict[str, float]) -> bool:
        self.seconds = self.seconds or float(metrics.get("time/collect", 0.0) + metrics.get("time/update", 0.0))
        return False


def budget_episodes(agent: PPOAgent, update_seconds: float, seconds: float, eval_every: int, least: int = 2) -> int:
    """Episodes that fit ``seconds`` of training at ``update_seconds`` an update, whole updates, at
    least ``least`` and at most ``DEFAULT_EPISODES`` (an evaluation every ``eval_every`` updates
    costs about a third of an update)."""
    per_update = update_seconds * (1 + (1 / 3 if eval_every else 0) / max(1, eval_every))
    updates = max(
        least, min(int(seconds // max(per_update, 1e-9)), DEFAULT_EPISODES // agent.config.episodes_per_update)
    )
    return updates * agent.config.episodes_per_update


def describe_budget(agent: PPOAgent, target: int, update_seconds: float) -> str:
    left = -(-(target - agent.num_episodes) // agent.config.episodes_per_update)
    finish = time.strftime("%H:%M", time.localtime(time.time() + left * update_seconds))
    minutes = left * update_seconds / 60
    return (
        f"{left} {'more ' if agent.num_updates else ''}updates of {agent.config.episodes_per_update} take about "
        f"{minutes:.0f} min (done about {finish})"
    )


def deferred(preemption: Preemption, method: Any, *args: Any, **kwargs: Any) -> Any:
    """``method`` run whole: a preemption's signal during it stops the run after it (``Preemption``)."""
    with preemption.deferred():
        return method(*args, **kwargs)


def run_failure(agent: PPOAgent | None, envs: VectorEnv | None, out: Path, error: BaseException) -> str:
    """The run failed (an env, the engine's process, Ray, a model file, anything) or was preempted
    (SIGTERM): the traceback goes to ``OUT/error.log``, the agent as of its last update to a
    checkpoint (a failed or abandoned collect changes no weights, an update runs whole); returns
    the line that says so."""
    from lmgym.storage import DiskFull

    resume = ""
    full = next((e for e in causes(error) if isinstance(e, DiskFull)), None)
    if full is not None:  # a checkpoint would not fit either: the last good one stays
        return f"disk full: {full}; {last_good(out)}"
    if agent is not None and agent.num_updates:
        try:
            agent.rewind_collect()
            agent.save_checkpoint(out / "checkpoints", envs)
            fix = "" if isinstance(error, Preempted) else "fix it, then "
            resume = f"; update {agent.num_updates} is checkpointed: {fix}--resume {out}"
        except Exception as e:  # noqa: BLE001 (a full disk, say: the last good checkpoint stays)
            resume = f"; checkpointing update {agent.num_updates} failed too ({type(e).__name__}: {str(e)[:100]})"
    except_line = f"{error} received" if isinstance(error, Preempted) else None
    return (except_line + resume) if except_line else failure_line(error, out / "error.log", resume)


def causes(error: BaseException) -> list[BaseException]:
    """``error`` and what it was raised from or during, outermost first."""
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return seen


def last_good(out: Path) -> str:
    """Which checkpoint a run in ``out`` resumes from, and how, in words."""
    from lmgym.agents.checkpoints import CheckpointError, resolve, verify

    try:
        path = resolve(out / "checkpoints")
        updates = verify(path).get("num_updates")
    except CheckpointError:
        return "no checkpoint was written yet: free space, then run it again"
    return f"the last good checkpoint is update {updates} ({path}): free space, then --resume {out}"


__all__ = ["DEFAULT_ENV", "add_parser", "train"]
