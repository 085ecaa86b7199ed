"""The doctor's checks (``lmgym.checkup`` says what each one is for; ``docs/guides/doctor.md`` what it catches)."""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from lmgym.agents.evaluation import evaluate
from lmgym.agents.intervals import wilson
from lmgym.agents.trajectories import Episode, Trajectories
from lmgym.core import action_length, close_within

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
LOGPROB_BOUNDS = {torch.float32: (1e-3, 5e-2), torch.float64: (1e-6, 1e-3)}
"""Max |engine - trainer| log-prob difference that is a warning and a failure, by the model's
dtype; half precisions get ``HALF_BOUNDS``."""
HALF_BOUNDS = (0.1, 1.0)


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, its status, the figure measured, and what to do."""

    name: str
    status: str
    figure: str
    advice: str = ""


@dataclass
class Report:
    """The doctor's report: ``ok`` when no check failed; ``str()`` is the table, ``to_dict()`` the JSON."""

    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = []
        for c in self.checks:
            lines.append(f"{c.status}  {c.name.ljust(width)}  {c.figure}")
            if c.advice and c.status != PASS:
                lines.append(f"{' ' * (6 + width)}  -> {c.advice}")
        return "\n".join(lines)


class Recorder:
    """Wraps an engine and keeps every turn it sampled with the context it sampled it from."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.calls: list[tuple[list[int], list[int]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, contexts: list[list[int]], stop_strings: Sequence[str], max_new_tokens: int, **kwargs: Any):
        out = self.engine.generate(contexts, stop_strings, max_new_tokens, **kwargs)
        self.calls += [(list(c), list(o)) for c, o in zip(contexts, out)]
        return out


def doctor(
    agent: Any,
    envs: gym.Env | gym.vector.VectorEnv,
    make_env: Callable[[], gym.Env] | None = None,
    groups: int = 4,
    group_size: int | None = None,
    greedy_episodes: int = 16,
    total_episodes: int | None = None,
    untrained: bool = False,
) -> Report:
    """Checks the run ``agent`` would make on ``envs`` (module docs of ``lmgym.checkup``): plays
    ``groups`` groups of ``group_size`` sampled episodes (the agent's group size, at least 2) and
    ``greedy_episodes`` held-out greedy ones. ``make_env`` makes one env as the run plays it (for
    the contract and the chat template; default: from ``envs``' own factories). ``total_episodes``:
    the run's length, for the time estimate. ``untrained``: the model has a warm start ahead of it,
    so a missing signal is a warning.

    Example:
        >>> import gymnasium as gym, lmgym
        >>> from lmgym.agents import PPOAgent
        >>> from lmgym.agents.warmstart import tiny_gpt2
        >>> agent = PPOAgent(tiny_gpt2(lmgym.ByteTokenizer()), tokenizer=lmgym.ByteTokenizer())
        >>> report = doctor(agent, gym.make_vec("lmgym/Echo-v0", num_envs=4), groups=2, greedy_episodes=4)
        >>> [c.name for c in report.checks][:3], report.checks[0].status
        (['loss mask', 'token identity', 'log-probs'], 'PASS')
    """
    k = group_size or max(2, agent.config.group_size or 1)
    single = make_env or single_env_maker(envs)
    recorder = Recorder(agent.engine)
    agent.engine = recorder
    try:
        started = time.perf_counter()
        batch = agent.collect(envs, groups * k, group_size=k)
        collect_seconds = time.perf_counter() - started
        calls, recorder.calls = recorder.calls, []
        greedy, _ = evaluate(agent, envs, greedy_episodes)
    finally:
        agent.engine = recorder.engine
    contract = agent.env_contract(envs)
    mask_check, drift = loss_mask(batch, calls, agent.tokenizer.eos_token_id)
    return Report(
        [
            mask_check,
            token_identity(agent, single, contract, drift),
            logprobs(agent, batch),
            truncation(batch, single, agent.tokenizer.eos_token_id, contract.max_new_tokens),
            signal(agent, batch, greedy, untrained),
            env_contract(single, agent.tokenizer, contract.stop_strings),
            cost(agent, batch, collect_seconds, total_episodes),
        ]
    )


def single_env_maker(envs: Any) -> Callable[[], gym.Env] | None:
    """One env like ``envs``' own: a single env's spec, or a vector env's first factory."""
    if isinstance(envs, gym.Env):
        spec = envs.spec
        return (lambda: gym.make(spec)) if spec is not None else None
    fns = getattr(envs, "env_fns", None)
    return fns[0] if fns else None


# ------------------------------------------------------------------------------ the loss mask
def loss_mask(batch: Trajectories, calls: list[tuple[list[int], list[int]]], eos: int) -> tuple[Check, int]:
    """Every sampled turn found in an episode's stream after the context it was sampled from, and
    the action mask on exactly those tokens. Returns the check and how many turns' contexts were
    not an episode's stream (the token identity check reports them)."""
    sampled = [torch.zeros(e.length, dtype=torch.bool) for e in batch]
    streams = [e.tokens.tolist() for e in batch]
    drift = 0
    for context, turn in calls:
        turn = turn or [eos]  # an empty turn is played as EOS
        end = len(context) + len(turn)
        hits = [i for i, s in enumerate(streams) if s[: len(context)] == context and s[len(context) : end] == turn]
        drift += not hits
        for i in hits:
            sampled[i][len(context) : end] = True
    leaked = sum(int((e.action_mask & ~s).sum()) for e, s in zip(batch, sampled))
    dropped = sum(int((~e.action_mask & s).sum()) for e, s in zip(batch, sampled))
    trained = sum(int(e.action_mask.sum()) for e in batch)
    figure = f"{trained} trained tokens: {leaked} not sampled by the engine, {dropped} sampled but not trained"
    if leaked or dropped:
        advice = "the action mask must be True on the sampled tokens alone: env, tool and template text is context"
        return Check("loss mask", FAIL, figure, advice), drift
    return Check("loss mask", PASS, figure), drift


# -------------------------------------------------------------------------- token identity
def token_identity(agent: Any, make_env: Callable[[], gym.Env] | None, contract: Any, drift: int) -> Check:
    """The contexts the engine sampled from against the episodes' streams (``drift``), and with a
    chat template, the streams against rendering the whole conversation at once."""
    if drift:
        advice = "an engine must be given the episode's own tokens: never re-encode the text it wrote"
        return Check("token identity", FAIL, f"{drift} turns were sampled from a context that is no episode's", advice)
    chat = find_chat_template(make_env() if make_env else None)
    if chat is None:
        return Check(
            "token identity", PASS, "every turn was sampled from its episode's token stream (no chat template)"
        )
    breaks, drifts, first = 0, 0, ""
    for seed in (7, 8):
        stream, messages = play_chat(agent, chat, seed, contract)
        system = [{"role": "system", "content": chat.system}] if chat.system else []
        rendered = str(chat.hf.apply_chat_template(system + messages, tokenize=False))
        text = chat.hf.decode(stream, skip_special_tokens=False)
        at = next((i for i, (a, b) in enumerate(zip(text, rendered)) if a != b), None)
        if at is not None:
            breaks += 1
            first = first or f"at character {at}: {text[at : at + 20]!r} streamed, {rendered[at : at + 20]!r} rendered"
            continue
        ids = agent.tokenizer.encode(rendered)
        at = next((i for i, (a, b) in enumerate(zip(stream, ids)) if a != b), None)
        if at is not None:
            drifts += 1
            pieces = [chat.hf.decode([t], skip_special_tokens=False) for t in (stream[at], ids[at])]
            first = first or f"token {at}: {pieces[0]!r} streamed, {pieces[1]!r} re-tokenized"
    if breaks:
        figure = f"{breaks} of 2 conversations render differently at once than turn by turn ({first})"
        return Check("token identity", FAIL, figure, "the chat template renders earlier turns differently later")
    if drifts:
        figure = f"{drifts} of 2 conversations re-tokenize differently ({first}); lmgym trains on the stream as sampled"
        return Check("token identity", WARN, figure, "a trainer that re-tokenizes text would train on other tokens")
    return Check("token identity", PASS, "contexts are the streams; the chat template renders them the same at once")


def find_chat_template(env: gym.Env | None) -> Any:
    from lmgym.wrappers import ChatTemplate

    while env is not None:
        if isinstance(env, ChatTemplate):
            return env
        env = getattr(env, "env", None)
    return None


def play_chat(agent: Any, chat: Any, seed: int, contract: Any) -> tuple[list[int], list[dict[str, str]]]:
    """One episode in ``chat`` (a ``ChatTemplate`` env) through the agent's engine: the token
    stream, and the conversation the wrapper kept, with the last turn the model wrote."""
    tok = agent.tokenizer
    obs, _ = chat.reset(seed=seed)
    stream = tok.encode(obs)
    for _ in range(16):
        turn = agent.engine.generate([stream], contract.stop_strings, contract.max_new_tokens)[0] or [tok.eos_token_id]
        obs, _, terminated, truncated, _ = chat.step(np.array(turn, dtype=np.int64))
        stream += list(turn)
        if terminated or truncated:
            break
        stream += tok.encode(obs)
    last = chat.hf.decode(turn, skip_special_tokens=True)
    return stream, [*chat.messages, {"role": "assistant", "content": last}]


# ------------------------------------------------------------------------------- log-probs
def logprobs(agent: Any, batch: Trajectories) -> Check:
    """The engine's log-probs of the sampled tokens against the trainer's recomputation (the
    ``Scorer``, at the sampling temperature)."""
    engine = [e.logprobs if e.logprobs is not None else e.sampler_logprobs for e in batch]
    if any(lp is None for lp in engine):
        return Check("log-probs", PASS, "the engine gives none: the trainer's own are used (no correction needed)")
    for e in batch:
        e.logprobs = e.values = None
    agent.scorer(batch, with_reference=False)
    pairs = [
        (lp, e.logprobs, e.action_mask) for e, lp in zip(batch, engine) if lp is not None and e.logprobs is not None
    ]
    gaps = torch.cat([(lp - ours).abs()[mask] for lp, ours, mask in pairs]).double()
    dtype = next(agent.model.parameters()).dtype
    warn, fail = LOGPROB_BOUNDS.get(dtype, HALF_BOUNDS)
    figure = f"max |engine - trainer| {float(gaps.max()):.2e}, mean {float(gaps.mean()):.2e} ({str(dtype)[6:]})"
    status = FAIL if gaps.max() > fail else WARN if gaps.max() > warn else PASS
    advice = "sample and score at the same temperature, with top_k/top_p off; an inexact engine needs tis_cap"
    return Check("log-probs", status, figure, advice)


# ------------------------------------------------------------------------------ truncation
def truncation(batch: Trajectories, make_env: Callable[[], gym.Env] | None, eos: int, budget: int) -> Check:
    """An env played with empty turns (EOS) until it ends: one that says ``terminated`` on the step
    its registered turn limit cuts it reports the budget as the end of the game. And the share of
    the batch's turns cut at the token budget."""
    lengths = [n for e in batch for n in turn_lengths(e)]
    cut = sum(n >= budget for n in lengths) / max(1, len(lengths))
    truncated = sum(e.truncated for e in batch)
    ended = f"{truncated} of {len(batch)} episodes truncated, {cut:.0%} of turns cut at {budget} tokens"
    wrong, limit = budget_as_end(make_env, eos)
    if wrong:
        figure = f"{ended}; empty turns end it as terminated on its turn limit ({limit})"
        advice = "a budget is a truncation: return truncated=True there (GAE bootstraps it; terminated: no more reward)"
        return Check("truncation", FAIL, figure, advice)
    if cut > 0.5:
        return Check("truncation", WARN, ended, "most replies are cut: a larger max_action_tokens (--env-arg)")
    return Check("truncation", PASS, f"{ended}; its turn limit ({limit}) ends as truncated")


def budget_as_end(make_env: Callable[[], gym.Env] | None, eos: int) -> tuple[bool, int | None]:
    """Whether the env, played with empty turns, ends ``terminated`` on the step its registered
    turn limit (``spec.max_episode_steps``, at least 2) cuts; and that limit."""
    env = make_env() if make_env else None
    limit = getattr(env.spec, "max_episode_steps", None) if env is not None and env.spec else None
    if env is None or not limit or limit < 2:
        return False, limit
    try:
        env.reset(seed=5)
        for turn in range(1, limit + 1):
            _, _, terminated, truncated, _ = env.step(np.array([eos], dtype=np.int64))
            if terminated or truncated:
                return bool(terminated and turn == limit), limit
        return False, limit
    finally:
        close_within(env)


def turn_lengths(episode: Episode) -> list[int]:
    """Tokens in each turn of ``episode``."""
    ends, mask, out = set(episode.turn_ends), episode.action_mask.tolist(), []
    n = 0
    for t, on in enumerate(mask):
        n += on
        if t in ends:
            out.append(n)
            n = 0
    return out


# ---------------------------------------------------------------------------------- signal
def signal(agent: Any, batch: Trajectories, greedy: dict[str, Any], untrained: bool) -> Check:
    """Sampled and greedy success with their intervals, and the groups whose rewards differ (the
    ones GRPO and RLOO learn from)."""
    groups: dict[int, set[float]] = {}
    for e in batch:
        groups.setdefault(e.group, set()).add(round(e.return_, 9))
    informative = sum(len(g) > 1 for g in groups.values()) / max(1, len(groups))
    wins = sum(e.success for e in batch)
    lo, hi = wilson(wins, len(batch))
    glo, ghi = greedy["success_ci"]
    figure = (
        f"sampled success {wins / max(1, len(batch)):.0%} ({lo:.0%}-{hi:.0%}), greedy {greedy['success']:.0%} "
        f"({glo:.0%}-{ghi:.0%}), mean return {np.mean(batch.returns):.3f}, {informative:.0%} of {len(groups)} groups "
        "with rewards that differ"
    )
    advice = (
        "an easier task config, a tool, a warm start (--warmstart-steps), or a prompt that shows the answer's format"
    )
    if informative == 0 and len(set(round(r, 9) for r in batch.returns)) <= 1:
        if untrained:  # lmgym train warm-starts it first: the warm start is what gives it a signal
            return Check("signal", WARN, f"no signal before the warm start lmgym train runs first: {figure}", advice)
        return Check("signal", FAIL, f"no signal: {figure}", advice)
    verdict = "little signal" if informative < 0.25 else "enough signal"
    return Check("signal", WARN if informative < 0.25 else PASS, f"{verdict}: {figure}", advice)


# ---------------------------------------------------------------------------- env contract
def env_contract(make_env: Callable[[], gym.Env] | None, tokenizer: Any, stops: Sequence[str]) -> Check:
    """``check_env``, determinism under ``reset(seed=)``, the stop strings against the oracle's
    turns, and the oracle's own success."""
    if make_env is None:
        return Check(
            "env contract", WARN, "no single env to check (pass make_env)", "doctor(agent, envs, make_env=...)"
        )
    from gymnasium.utils.env_checker import check_env

    env = make_env()
    problems = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env.unwrapped, skip_render_check=True)
    except Exception as e:  # noqa: BLE001 (what check_env found is the finding)
        problems.append(f"check_env: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    first, second = env.reset(seed=11)[0], env.reset(seed=11)[0]
    if first != second:
        problems.append("reset(seed=11) twice gave two prompts")
    early, late, wins, played = 0, 0, 0, 0
    for seed in range(8):
        env.reset(seed=seed)
        for _ in range(32):
            try:
                text = env.get_wrapper_attr("oracle")()
            except (NotImplementedError, AttributeError):
                break
            ids = tokenizer.encode(text)
            n = action_length(ids, tokenizer, stops, len(ids) + 1)
            early += n is not None and n < len(ids)
            late += n is None or n > len(ids)
            _, _, terminated, truncated, info = env.step(np.array(ids, dtype=np.int64))
            if terminated or truncated:
                played += 1
                wins += bool(info.get("is_success", info.get("correct", False)))
                break
    close_within(env)
    oracle = f"the oracle won {wins} of {played}" if played else "no oracle"
    figure = f"{oracle}; {early} oracle turns cut early by a stop string, {late} not ended by one"
    if problems or early:
        advice = "; ".join(problems) or "a stop string ends the oracle's turn before its end: the model's would too"
        return Check("env contract", FAIL, f"{figure}; {'; '.join(problems) or 'stop strings'}", advice)
    if played and wins < played:
        return Check("env contract", WARN, figure, "an oracle that fails makes demonstrations and tests wrong")
    return Check("env contract", PASS, f"check_env, seeding and stop strings hold; {figure}")


# ------------------------------------------------------------------------------------ cost
def cost(agent: Any, batch: Trajectories, collect_seconds: float, total_episodes: int | None) -> Check:
    """Memory before activations, and the seconds an update takes here: its collect (scaled from
    the doctor's batch) and a timed forward and backward pass over the batch (times the epochs)."""
    from lmgym.agents.models import format_memory

    config = agent.config
    agent.scorer(batch, with_reference=False)
    derived = agent.derive(batch)
    started = time.perf_counter()
    padded = derived.loss_inputs(config.tis_cap, agent.accelerator.device, config.mask_truncated)
    for lo in range(0, len(batch), config.mini_batch_size):
        rows = torch.arange(lo, min(len(batch), lo + config.mini_batch_size))
        loss, _ = agent.loss(padded.rows(rows, int(padded.attention_mask[rows].sum(-1).max())))
        loss.backward()
    agent.optimizer.zero_grad()
    backward = time.perf_counter() - started
    scale = config.episodes_per_update / len(batch)
    update = scale * (collect_seconds + backward * (config.n_epochs + 0.5))  # + scoring: about half a pass
    memory = agent.memory_estimate()
    total = sum(memory[k] for k in ("weights", "gradients", "optimizer", "reference"))
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    run = ""
    if total_episodes:
        updates = -(-total_episodes // config.episodes_per_update)
        run = f"; {updates} updates of {config.episodes_per_update}: about {updates * update / 60:.0f} min"
    figure = f"{update:.0f} s an update here{run}; {format_memory(memory).split(': ', 1)[1]}"
    if total > physical:
        return Check("cost", FAIL, figure, "the model does not fit this machine's memory: LoRA, or a smaller model")
    return Check("cost", PASS, figure)


__all__ = ["Check", "FAIL", "PASS", "Recorder", "Report", "WARN", "doctor"]
