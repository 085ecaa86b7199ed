"""``lmgym train`` and ``lmgym eval``: the main job, from the command line.

``lmgym train`` with no arguments trains the embedded default model on ``lmgym/Calculator-v0``
(on a laptop CPU, in minutes) and writes the model, metrics, a learning curve, transcripts and a
summary to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, cast

DEFAULT_ENV = "lmgym/Calculator-v0"

TINY_MODEL_CONFIG: dict[str, Any] = {
    "learning_rate": 3e-4,  # a tiny model needs more than the 1.41e-5 meant for pretrained ones
    "episodes_per_update": 64,
    "mini_batch_size": 32,
    "kl_coef": 0.02,
    "anneal_lr": True,  # without it, a run that reached ~70% at update 60 could fall to ~46% by the end
}
"""PPOConfig overrides for the embedded default model (measured on Calculator-v0)."""


def add_train_commands(sub: Any, usage_error: type[Exception]) -> None:
    """Adds ``train`` and ``eval`` to the ``lmgym`` command's subparsers."""
    from lmgym.agents.config import PPOConfig

    p = sub.add_parser("train", help="train a model with PPO on an env")
    p.add_argument("env_id", nargs="?", default=DEFAULT_ENV)
    p.add_argument("--model", default=None, help="HF model name or local path (default: the embedded tiny model)")
    p.add_argument("--episodes", type=int, default=4096, help="training episodes (default: 4096)")
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
    add_model_flags(p)
    p.add_argument(
        "--lora", default=None, metavar="SPEC", help="LoRA adapters, e.g. r=16 or r=16,alpha=32,targets=q_proj+v_proj"
    )
    p.add_argument(
        "--add-special-tokens", action="store_true", help="add the env's tags to an HF tokenizer as tokens (and resize)"
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="CHECKPOINT",
        help="continue from a checkpoint (OUT/checkpoints/last, or the run dir OUT)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out (default: refuse)")
    for field in dataclasses.fields(PPOConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.name in ("seed", "estimator", "generation_kwargs", "peft_config"):
            continue
        switch = "bool" in str(field.type)  # --gradient-checkpointing alone means true
        p.add_argument(
            flag,
            dest=f"cfg_{field.name}",
            metavar=field.name.upper(),
            type=_field_type(field),
            default=None,
            help=_field_help(field),
            **({"nargs": "?", "const": True} if switch else {}),
        )
    p.add_argument("--estimator", choices=["gae", "rloo", "grpo"], default="gae")
    p.add_argument("--generation-kwargs", type=json.loads, default=None, help="JSON of transformers generation kwargs")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=lambda args: train(args, usage_error))

    p = sub.add_parser("eval", help="greedy success on held-out seeds (and sampled, with --sampled)")
    p.add_argument("env_id")
    p.add_argument("--model", required=True, help="a directory saved by lmgym train (or any HF model path)")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--num-envs", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--sampled", action="store_true", help="also play the episodes sampled (default: greedy only)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    add_model_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=lambda args: evaluate_command(args, usage_error))

    p = sub.add_parser("export", help="merge a LoRA run's adapters into its base and save a plain model")
    p.add_argument("model_dir", help="a directory saved by lmgym train (base + adapters)")
    p.add_argument("--merged", required=True, metavar="OUT", help="where to write the merged model")
    p.add_argument("--overwrite", action="store_true", help="replace what OUT holds (default: refuse a non-empty OUT)")
    p.set_defaults(func=lambda args: export_command(args, usage_error))


def add_model_flags(p: Any) -> None:
    """The flags for a chat model: wrap the env in its chat template."""
    p.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap the env in the tokenizer's chat template (observations as user turns, actions as assistant turns)",
    )
    p.add_argument("--system", default=None, help="system message for --chat-template")


def _field_type(field: dataclasses.Field) -> Any:
    kind = str(field.type)
    if kind.startswith("dict"):
        return json.loads
    if "bool" in kind:
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    if "float" in kind:
        return lambda s: None if s.lower() == "none" else float(s)
    if "int" in kind:
        return lambda s: None if s.lower() == "none" else int(s)
    return str


def _field_help(field: dataclasses.Field) -> str:
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default  # type: ignore[operator]
    kind = " (JSON)" if str(field.type).startswith("dict") else ""
    return f"PPOConfig.{field.name}{kind} (default: {default})".replace("%", "%%")


RUN_FILES = (
    "model",
    "warmstart",
    "checkpoints",
    "metrics.csv",
    "episodes.jsonl",
    "summary.json",
    "config.json",
    "transcripts.md",
    "learning_curve.png",
    "report.html",
    "tensorboard",
)
"""What ``lmgym train`` writes to ``--out``: a directory holding any of these holds a run."""


def _check_inputs(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    from lmgym.agents.checkpoints import CheckpointError, resolve, verify
    from lmgym.cli_support import make_env, parse_kwargs

    make_env(args.env_id, **parse_kwargs(args.env_arg)).close()  # a bad --env-arg fails here, in one line
    for flag, least in [("episodes", 1), ("num_envs", 1), ("eval_episodes", 1), ("threads", 1), ("eval_every", 0)]:
        value = getattr(args, flag, None)
        if value is not None and value < least:
            raise usage_error(f"--{flag.replace('_', '-')} must be at least {least}, got {value}")
    if getattr(args, "warmstart_steps", None) is not None and args.warmstart_steps < 0:
        raise usage_error(f"--warmstart-steps must be at least 0, got {args.warmstart_steps}")
    kwargs = getattr(args, "generation_kwargs", None)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise usage_error(f"--generation-kwargs must be a JSON object, got {json.dumps(kwargs):.80}")
    if (
        args.model is not None
        and not os.path.exists(args.model)
        and (os.sep in args.model or args.model.startswith("."))
    ):
        raise usage_error(f"--model {args.model!r} does not exist")
    out = getattr(args, "out", None)
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise usage_error(f"--out {out!r} is a file, not a directory")
    if getattr(args, "resume", None) is not None:
        try:
            verify(resolve(args.resume))  # complete and undamaged, before any model is built
        except CheckpointError as e:
            raise usage_error(f"--resume: {e}") from e


def _claim_run_dir(args: argparse.Namespace, usage_error: type[Exception]) -> Any:
    """Locks ``--out`` for this run (a second ``lmgym train`` on it is refused) and refuses to
    write over a run there unless ``--resume`` continues it or ``--overwrite`` replaces it.
    Returns the open lock file, held until the process ends."""
    import fcntl
    import shutil

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = open(out / ".lmgym.lock", "a+")  # noqa: SIM115 (held for the whole run)
    except OSError as e:
        raise usage_error(f"--out {str(out)!r}: {e.strerror or e}") from e
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        lock.close()
        raise usage_error(f"another lmgym train is writing to {str(out)!r}: wait for it, or use another --out") from e
    existing = [name for name in RUN_FILES if (out / name).exists()]
    if existing and args.resume is None:
        if not args.overwrite:
            lock.close()
            raise usage_error(
                f"--out {str(out)!r} holds a run already ({', '.join(existing[:3])}): continue it with "
                f"--resume {out / 'checkpoints' / 'last'}, pick a new --out, or pass --overwrite to replace it"
            )
        for name in existing:
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return lock


def _make_agent(args: argparse.Namespace, config: Any, env_kwargs: dict[str, Any], usage_error: type[Exception]) -> Any:
    from lmgym.agents import PPOAgent
    from lmgym.agents.warmstart import WarmStartConfig, default_model, load_for_env

    tokenizer: Any
    if args.model is None:
        print("building the default model (a tiny Llama, warm-started on demonstrations; cached after the first run)")
        warm = WarmStartConfig(seed=args.seed)
        if getattr(args, "warmstart_steps", None) is not None:
            warm = dataclasses.replace(warm, steps=args.warmstart_steps)
        try:
            model, tokenizer, _ = default_model(
                args.env_id, env_kwargs, warm, use_cache=not getattr(args, "no_cache", False)
            )
        except NotImplementedError as e:
            raise usage_error(
                f"{args.env_id} has no oracle to warm-start the default model from ({e}); pass --model"
            ) from e
    else:
        from lmgym.agents.checkpoints import find_damaged

        damaged = find_damaged(args.model) if os.path.isdir(args.model) else None
        if damaged:
            raise usage_error(f"--model: {damaged}")
        try:
            model, tokenizer = load_for_env(
                args.model, args.env_id, env_kwargs, getattr(args, "add_special_tokens", False)
            )
        except (ValueError, ImportError) as e:
            raise usage_error(str(e).splitlines()[0]) from e
        if getattr(args, "warmstart_steps", None):
            _check_chat_template(args, tokenizer, usage_error)
            model = _warm_start(args, model, tokenizer, env_kwargs, config)
    try:
        return PPOAgent(model, tokenizer=tokenizer, config=config)
    except ValueError as e:  # the vocabulary does not cover the tokenizer; a LoRA target is not in the model
        raise usage_error(str(e).splitlines()[0]) from e


def _warm_start(args: argparse.Namespace, model: Any, tokenizer: Any, env_kwargs: dict[str, Any], config: Any) -> Any:
    """``--model M --warmstart-steps N``: the supervised warm start on the env's demonstrations,
    rendered as the RL phase renders them; the result is saved in ``OUT/warmstart`` (LoRA
    adapters trained on it later name it as their base)."""
    from lmgym.agents.checkpoints import written_aside
    from lmgym.agents.warmstart import warm_start

    kind = "LoRA, merged" if config.peft_config else "full"
    print(f"warm start of {args.model}: {args.warmstart_steps} supervised steps on demonstrations ({kind})")
    env = _env_maker(args, tokenizer, env_kwargs)()
    try:
        model, losses = warm_start(model, tokenizer, env, args.warmstart_steps, lora=config.peft_config, seed=args.seed)
    finally:
        env.close()
    print(f"warm start: loss {losses[0]:.3f} -> {sum(losses[-10:]) / len(losses[-10:]):.3f}")
    target = Path(args.out) / "warmstart"
    with written_aside(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    model.name_or_path = model.config._name_or_path = str(target)
    return model


def _warn_cut_turns(agent: Any, batch: Any, budget: int) -> None:
    """One warning when a BPE model's turns keep hitting the env's action bound (sized for the
    byte tokenizer): more than a quarter of them in the first evaluation."""
    from lmgym.tokenizers import HFTokenizer

    if not isinstance(agent.tokenizer, HFTokenizer):
        return
    lengths = []
    for episode in batch.episodes:
        mask = episode.action_mask.tolist()
        for end in episode.turn_ends:
            start = end
            while start > 0 and mask[start - 1]:
                start -= 1
            lengths.append(end - start + 1)
    share = sum(n >= budget for n in lengths) / max(1, len(lengths))
    if share > 0.25:
        print(
            f"warning: {share:.0%} of the model's turns were cut at the env's max_action_tokens={budget}; "
            "a BPE model may need more: --env-arg max_action_tokens=N"
        )


def _env_maker(args: argparse.Namespace, tokenizer: Any, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    from lmgym.wrappers import ChatTemplate

    def make() -> gym.Env:
        env = gym.make(args.env_id, tokenizer=tokenizer, **env_kwargs)
        return ChatTemplate(env, system=args.system) if args.chat_template else env

    return make


def _make_envs(args: argparse.Namespace, n: int, tokenizer: Any, env_kwargs: dict[str, Any]) -> Any:
    """``n`` envs stepped at the same time (``ConcurrentVectorEnv``: tool calls overlap; results
    are exactly a ``SyncVectorEnv``'s), autoreset in the same step."""
    from gymnasium.vector import AutoresetMode

    from lmgym.vector import ConcurrentVectorEnv

    return ConcurrentVectorEnv([_env_maker(args, tokenizer, env_kwargs)] * n, autoreset_mode=AutoresetMode.SAME_STEP)


def _check_chat_template(args: argparse.Namespace, tokenizer: Any, usage_error: type[Exception]) -> None:
    from lmgym.tokenizers import HFTokenizer

    hf = tokenizer.hf if isinstance(tokenizer, HFTokenizer) else None
    if args.chat_template and not getattr(hf, "chat_template", None):
        model = args.model or "the default model"
        raise usage_error(f"--chat-template: the tokenizer of {model} has no chat template")


def _set_threads(threads: int | None) -> None:
    import torch

    torch.set_num_threads(threads or max(1, min(2, os.cpu_count() or 1)))


class _Evaluator:
    """``on_update`` callback: a greedy evaluation on held-out seeds every ``every`` updates, and
    a full one (``final_episodes``) after the last update, kept in ``final``."""

    def __init__(self, envs: Any, episodes: int, every: int, final_episodes: int, total_episodes: int):
        self.envs, self.episodes, self.every = envs, episodes, every
        self.final_episodes, self.total_episodes = final_episodes, total_episodes
        self.final: tuple[dict[str, Any], Any] | None = None

    def on_update(self, agent: Any, metrics: dict[str, float]) -> None:
        from lmgym.agents.evaluation import evaluate

        if agent.num_episodes >= self.total_episodes:
            self.final = evaluate(agent, self.envs, self.final_episodes)
            stats = self.final[0]
        elif self.every and agent.num_updates % self.every == 0:
            stats, _ = evaluate(agent, self.envs, self.episodes)
        else:
            return
        metrics.update(eval_metrics(stats))


def eval_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """An evaluation as ``eval/`` metrics: success, tool-call rate and the error mix."""
    return {
        "eval/success": stats["success"],
        "eval/tool_rate": stats["tool_rate"],
        **{f"eval/error/{kind}": share for kind, share in stats.get("errors", {}).items() if kind != "correct"},
    }


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars
    transformers.utils.logging.set_verbosity_error()


def train(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    from lmgym.agents.config import PPOConfig
    from lmgym.cli_support import parse_kwargs

    _check_inputs(args, usage_error)  # bad input fails here, before torch is even imported
    started = time.perf_counter()
    env_kwargs = parse_kwargs(args.env_arg)
    overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    base = dict(TINY_MODEL_CONFIG) if args.model is None else {}
    try:
        peft_config = None
        if args.lora:
            from lmgym.agents.models import parse_lora

            peft_config = parse_lora(args.lora)
        config = PPOConfig(
            **{**base, **overrides, "seed": args.seed, "estimator": args.estimator},
            generation_kwargs=args.generation_kwargs or {},
            peft_config=peft_config,
        )
    except (TypeError, ValueError) as e:
        raise usage_error(str(e)) from e
    out = Path(args.out)
    lock = _claim_run_dir(args, usage_error)  # noqa: F841 (held until the process ends)
    _set_threads(args.threads)
    _quiet_transformers()
    from lmgym.agents.engines import engine_problem
    from lmgym.agents.evaluation import evaluate, transcript
    from lmgym.agents.metrics import MetricsLogger
    from lmgym.agents.plotting import plot_learning_curve

    problem = engine_problem(config.engine)  # before any model is built or warm-started
    if problem:
        raise usage_error(problem)
    agent = _make_agent(args, config, env_kwargs, usage_error)
    _check_chat_template(args, agent.tokenizer, usage_error)
    from lmgym.agents.models import format_memory

    print(format_memory(agent.memory_estimate()))
    k = config.group_size or 1
    num_envs = max(k, args.num_envs // k * k)
    envs = _make_envs(args, num_envs, agent.tokenizer, env_kwargs)
    eval_envs = _make_envs(args, min(50, args.eval_episodes), agent.tokenizer, env_kwargs)

    before, before_batch = evaluate(agent, eval_envs, args.eval_episodes, progress=True)
    _warn_cut_turns(agent, before_batch, agent.env_contract(eval_envs)["max_new_tokens"])
    if args.resume is None:  # a resumed run keeps the history it has
        logger = MetricsLogger(out, config.to_dict())
        logger.log(eval_metrics(before), 0)
        logger.close()
    evaluator = _Evaluator(eval_envs, min(100, args.eval_episodes), args.eval_every, args.eval_episodes, args.episodes)
    from lmgym.agents.checkpoints import CheckpointError

    try:
        agent.learn(
            envs,
            total_episodes=args.episodes,
            callbacks=[evaluator],
            log_dir=out,
            checkpoint_dir=out / "checkpoints",
            resume_from=args.resume,
        )
    except CheckpointError as e:
        raise usage_error(f"--resume: {e}") from e
    after, after_batch = evaluator.final or evaluate(agent, eval_envs, args.eval_episodes)
    manifest = {"env": args.env_id, "chat_template": args.chat_template, "system": args.system}
    agent.save(out / "model", manifest={**manifest, "env_kwargs": env_kwargs})  # lmgym eval applies them
    plot_learning_curve(out / "metrics.csv", out / "learning_curve.png", f"{args.env_id}: PPO ({config.estimator})")
    with open(out / "transcripts.md", "w") as f:
        for name, batch in (("before", before_batch), ("after", after_batch)):
            f.write(f"## {name} training (greedy, held-out seeds)\n\n")
            for episode in batch.episodes[:5]:
                text = transcript(agent, episode)
                f.write(f"seed {episode.seed}, return {episode.return_:g}:\n\n```\n{text}\n```\n\n")
    wall = time.perf_counter() - started
    summary = {
        "env": args.env_id,
        "model": args.model or "default (tiny Llama, warm-started)",
        "before": {k: before[k] for k in ("success", "tool_rate", "mean_return", "errors")},
        "after": {k: after[k] for k in ("success", "tool_rate", "mean_return", "errors")},
        "wall_seconds": round(wall, 1),
        "seed": args.seed,
        "episodes": agent.num_episodes,
        "estimator": config.estimator,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        _table(
            ["", "before", "after"],
            [
                ["success (greedy)", f"{before['success']:.1%}", f"{after['success']:.1%}"],
                ["tool-call rate", f"{before['tool_rate']:.1%}", f"{after['tool_rate']:.1%}"],
                ["mean return", f"{before['mean_return']:.3f}", f"{after['mean_return']:.3f}"],
            ],
        )
    )
    print(f"wall time {wall:.0f} s; {agent.num_episodes} episodes; outputs in {out}/")
    print(f"see what training did, token by token: lmgym view {out}")


def evaluate_command(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    from lmgym.agents.config import PPOConfig
    from lmgym.cli_support import parse_kwargs

    _check_inputs(args, usage_error)
    if not os.path.exists(args.model):
        raise usage_error(f"--model {args.model!r} does not exist")
    from lmgym.agents.evaluation import evaluate

    _set_threads(None)
    _quiet_transformers()
    from lmgym.agents.models import read_manifest

    manifest = read_manifest(args.model)  # how the model was trained: its chat template, system message
    args.chat_template = args.chat_template or bool(manifest.get("chat_template"))
    args.system = args.system if args.system is not None else manifest.get("system")
    env_kwargs = {**manifest.get("env_kwargs", {}), **parse_kwargs(args.env_arg)}  # --env-arg overrides
    agent = _make_agent(args, PPOConfig(seed=args.seed), env_kwargs, usage_error)
    _check_chat_template(args, agent.tokenizer, usage_error)
    envs = _make_envs(args, min(args.num_envs, args.episodes), agent.tokenizer, env_kwargs)
    results = {"greedy": evaluate(agent, envs, args.episodes, greedy=True, progress=True)[0]}
    if args.sampled:
        results["sampled"] = evaluate(agent, envs, args.episodes, greedy=False, progress=True)[0]
    if args.json:
        print(json.dumps({**results["greedy"], **({"sampled": results["sampled"]} if args.sampled else {})}))
        return
    print(
        _table(
            ["", "success", "tool-call rate", "mean return", "episodes"],
            [
                [name, f"{s['success']:.1%}", f"{s['tool_rate']:.1%}", f"{s['mean_return']:.3f}", str(s["episodes"])]
                for name, s in results.items()
            ],
        )
    )


def export_command(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    """``lmgym export DIR --merged OUT``: base + adapters -> ``merge_and_unload`` -> a plain model."""
    if not (Path(args.model_dir) / "adapter_config.json").is_file():
        raise usage_error(f"{args.model_dir!r} holds no LoRA adapters (no adapter_config.json): nothing to merge")
    target = Path(args.merged)
    if target.exists() and not target.is_dir():
        raise usage_error(f"--merged {args.merged!r} is a file, not a directory")
    if target.is_dir() and any(target.iterdir()) and not args.overwrite:
        raise usage_error(f"--merged {args.merged!r} is not empty: pick a new directory or pass --overwrite")
    from lmgym.agents.models import load_model
    from lmgym.tokenizers import load_tokenizer

    _quiet_transformers()
    try:
        model = load_model(args.model_dir, trainable=False)
    except ValueError as e:
        raise usage_error(str(e).splitlines()[0]) from e
    merged = cast(Any, model).merge_and_unload()
    from lmgym.agents.checkpoints import written_aside

    with written_aside(target) as tmp:  # the old contents stay until the new ones are complete
        merged.save_pretrained(tmp)
        load_tokenizer(args.model_dir).save_pretrained(tmp)  # type: ignore[attr-defined]
    print(f"wrote the merged model to {args.merged} (loadable with AutoModelForCausalLM.from_pretrained)")


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])
