"""LMEnv: the base class of every lmgym text environment.

A subclass writes ``reset(...) -> (prompt, info)`` and ``step_text(text) -> (obs, reward,
terminated, truncated, info)``. ``LMEnv.step`` takes the token ids the agent generated,
checks them, decodes them with the env's tokenizer and hands the text to ``step_text``; it also
keeps the transcript (``prompt + action_1 + obs_1 + ...``) that ``render()`` shows.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from lmgym.spaces import AnyText, TokenSequence
from lmgym.tokenizers import Tokenizer, as_tokenizer


def check_token_ids(action: Any, vocab_size: int, max_length: int | None = None) -> np.ndarray:
    """Returns ``action`` as a 1-D int64 array, or raises ``ValueError`` saying what is wrong.

    Example:
        >>> check_token_ids([1, 2], vocab_size=10)
        array([1, 2])
        >>> check_token_ids([1, 12], vocab_size=10)
        Traceback (most recent call last):
        ...
        ValueError: token id 12 at position 1 is outside the vocabulary (vocab_size=10)
        >>> check_token_ids([1, 2, 3], vocab_size=10, max_length=2)
        Traceback (most recent call last):
        ...
        ValueError: an action of 3 tokens is longer than max_action_tokens=2
    """
    if isinstance(action, str):
        raise ValueError("actions are token ids, not text: encode it with env.tokenizer first")
    ids = np.asarray(action.cpu() if hasattr(action, "cpu") else action)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"an action is a 1-D sequence of token ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
    if max_length is not None and ids.size > max_length:
        raise ValueError(f"an action of {ids.size} tokens is longer than max_action_tokens={max_length}")
    bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if bad.size:
        raise ValueError(
            f"token id {ids[bad[0]]} at position {bad[0]} is outside the vocabulary (vocab_size={vocab_size})"
        )
    return ids.astype(np.int64)


def decode_action(tokenizer: Tokenizer, action: Any, max_length: int | None = None) -> str:
    """The text of an action: its token ids checked (``check_token_ids``), then decoded."""
    return tokenizer.decode(check_token_ids(action, tokenizer.vocab_size, max_length).tolist())


def fit_text(text: str, max_length: int) -> str:
    """``text`` cut to at most ``max_length`` characters, saying so at its end, so that what a model
    or a tool wrote can never push an observation outside its space.

    Example:
        >>> fit_text("x" * 100, 40)
        'xxxxxxxxxxxxxxxxxx\\n[cut: 100 characters]'
        >>> len(fit_text("x" * 100, 40)), fit_text("short", 40)
        (40, 'short')
    """
    if len(text) <= max_length:
        return text
    note = f"\n[cut: {len(text)} characters]"
    return (text[: max(0, max_length - len(note))] + note)[-max_length:] if max_length > 0 else ""


ABANDONED: list[Callable[[int], None]] = []
"""Called with the thread id of a call ``call_with_timeout`` gave up on: whatever lock that
thread holds and the rest of the process needs (``lmgym.compat.OwnRNG``'s) is released to the
others here, since a Python thread cannot be killed."""


CLOSE_SECONDS = float(os.environ.get("LMGYM_CLOSE_SECONDS", "10"))
"""How long lmgym waits for an env's ``close()`` before leaving it to finish in the background
(10 s; the environment variable ``LMGYM_CLOSE_SECONDS`` sets another)."""


def close_within(env: Any, seconds: float = CLOSE_SECONDS) -> None:
    """Closes ``env`` (any object with ``close``), leaving a close that hangs to finish in a daemon
    thread after ``seconds``; an exception in it loses nothing and is not raised."""
    try:
        call_with_timeout(env.close, timeout=seconds)
    except Exception:  # noqa: BLE001 (a failing close loses nothing here)
        pass


def call_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> tuple[bool, Any]:
    """``(True, fn(*args))``, or ``(False, None)`` when ``fn`` has not returned after ``timeout``
    seconds (it is left running in a daemon thread, which cannot block the process's exit, and
    the ``ABANDONED`` hooks hear of it). An exception ``fn`` raises is raised here.
    ``timeout=None`` calls ``fn`` directly.

    Example:
        >>> import time
        >>> call_with_timeout(sum, [1, 2], timeout=1.0), call_with_timeout(time.sleep, 5, timeout=0.05)
        ((True, 3), (False, None))
    """
    if timeout is None:
        return True, fn(*args)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name=f"lmgym-call-{getattr(fn, '__name__', 'fn')}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        abandon(thread)
        return False, None
    if "error" in box:
        raise_in_caller(box["error"])
    return True, box["value"]


def raise_in_caller(error: BaseException) -> None:
    """Raises what a call in another thread raised. ``SystemExit``, ``KeyboardInterrupt`` and
    ``GeneratorExit`` raised by the called code are not this process being told to stop: they
    come out as a ``RuntimeError`` naming them (an env's ``sys.exit(0)`` must not end a run
    silently, with exit status 0)."""
    if isinstance(error, Exception):
        raise error
    raise RuntimeError(f"raised {type(error).__name__}{f': {error}' if str(error) else ''}") from error


STUCK: list[threading.Thread] = []
"""Threads running calls that were given up on (``abandon``): they cannot be killed."""
MAX_STUCK_THREADS = 64
"""More stuck threads than this at once and ``abandon`` raises ``StuckError``: an env that hangs
every time would otherwise pile up threads until the process hits its limit and dies blaming
whatever starts the next one."""


class StuckError(RuntimeError):
    """Too many calls are stuck in threads that cannot be killed (``MAX_STUCK_THREADS``)."""


def abandon(thread: threading.Thread) -> None:
    """Gives up on ``thread``'s call: the ``ABANDONED`` hooks hear of it, and it is counted among
    the stuck threads; ``StuckError`` when there are more of them than ``MAX_STUCK_THREADS``."""
    for hook in ABANDONED:
        hook(cast(int, thread.ident))
    STUCK[:] = [t for t in STUCK if t.is_alive()] + [thread]
    if len(STUCK) > MAX_STUCK_THREADS:
        raise StuckError(
            f"{len(STUCK)} calls that passed their deadline are still running in threads that cannot be "
            f"killed (more than {MAX_STUCK_THREADS}): the env hangs again and again; fix it, or run it in "
            "processes that can be killed (lmgym.vector.RayVectorEnv, gymnasium's AsyncVectorEnv)"
        )


class Worker:
    """A daemon thread that runs calls one at a time, each with a deadline: ``call_with_timeout``
    for a caller that makes many calls (an env's steps) without starting a thread for each.

    A call past its deadline is given up on: its thread is left to finish it (a Python thread
    cannot be killed; the ``ABANDONED`` hooks hear of it) and the next call starts a new thread.

    Example:
        >>> import time
        >>> worker = Worker()
        >>> worker.call(sum, [1, 2], timeout=1.0), worker.call(time.sleep, 5, timeout=0.05)
        ((True, 3), (False, None))
        >>> worker.call(abs, -4, timeout=1.0)
        (True, 4)
    """

    def __init__(self, name: str = "lmgym-worker"):
        self.name = name
        self.queues: tuple[queue.SimpleQueue, queue.SimpleQueue] | None = None  # (jobs, results)
        self.thread: threading.Thread | None = None

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> tuple[bool, Any]:
        """``(True, fn(*args, **kwargs))``, or ``(False, None)`` past ``timeout`` seconds; what
        ``fn`` raises is raised here."""
        if self.queues is None or self.thread is None:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            self.queues = jobs, queue.SimpleQueue()
            self.thread = threading.Thread(target=_serve, args=self.queues, daemon=True, name=self.name)
            self.thread.start()
            weakref.finalize(self, jobs.put, None)  # the thread ends with its worker
        jobs, results = self.queues
        jobs.put((fn, args, kwargs))
        try:
            ok, value = results.get(timeout=timeout)
        except queue.Empty:
            thread = self.thread
            self.close()  # its thread ends after the stuck call, if that ever returns
            abandon(thread)
            return False, None
        if not ok:
            raise_in_caller(value)
        return True, value

    def close(self) -> None:
        if self.queues is not None:
            self.queues[0].put(None)
        self.queues = self.thread = None


def _serve(jobs: queue.SimpleQueue, results: queue.SimpleQueue) -> None:
    while (job := jobs.get()) is not None:
        fn, args, kwargs = job
        try:
            results.put((True, fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 (raised in the caller's thread)
            results.put((False, e))


class EnvError(RuntimeError):
    """An env failed: its ``reset`` or ``step`` raised (a reward function, a transform, a tool,
    a library), or returned what the Gym API does not allow. The message names the sub-env of
    its vector env, the env id, the seed, the turn and the action (cut); the original exception
    is chained (``__cause__``)."""

    def __init__(
        self,
        problem: str,
        *,
        index: int | None = None,
        env_id: str | None = None,
        seed: int | None = None,
        turn: int | None = None,
        action: str | None = None,
    ):
        self.problem, self.index, self.env_id, self.seed, self.turn, self.action = (
            problem, index, env_id, seed, turn, action,
        )  # fmt: skip
        where = [f"sub-env {index}" if index is not None else "an env", env_id or "(no id)"]
        where += ([f"seed {seed}"] if seed is not None else []) + ([f"turn {turn}"] if turn is not None else [])
        on = f" on the action {action[:200]!r}" if action is not None else ""
        super().__init__(f"{where[0]} ({', '.join(where[1:])}){on}: {problem}")


def check_timeout(name: str, value: float | None) -> float | None:
    """``value`` as a float when it is a positive finite number of seconds, ``None`` as is."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def may_end_turn(token: int, tokenizer: Tokenizer, stop_strings: Sequence[str]) -> bool:
    """Whether ``token`` can be the last of a turn: EOS, a special token whose text is a stop
    string, or a token whose text a stop string can end in (one holding a stop string's last
    character; one with no text of its own; an incomplete UTF-8 piece, where a stop string ends
    in a non-ASCII character). An engine that stops on token ids (vLLM) stops at these and
    checks ``ends_turn``.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tok = ByteTokenizer()
        >>> [may_end_turn(t, tok, ["</calc>"]) for t in tok.encode("c>é")] + [may_end_turn(tok.eos_token_id, tok, [])]
        [False, True, False, False, True]
        >>> [may_end_turn(t, tok, ["café"]) for t in tok.encode("é")]
        [True, True]
    """
    if token == tokenizer.eos_token_id:
        return True
    if not stop_strings:
        return False
    special = getattr(tokenizer, "special_token_text", None)  # HF: a chat template's end-of-turn token
    if special is not None and special(token) in stop_strings:
        return True
    piece = tokenizer.decode([token])
    if not piece:  # decodes to text only in context (a SentencePiece "▁", say)
        return True
    if "\ufffd" in piece:  # part of a multi-byte character: it can end only a stop string that ends in one
        return not all(s[-1].isascii() for s in stop_strings) or any(s[-1] in piece for s in stop_strings)
    return any(s[-1] in piece for s in stop_strings)


def ends_turn(ids: Sequence[int], tokenizer: Tokenizer, stop_strings: Sequence[str]) -> bool:
    """Whether the last of ``ids`` (a turn so far) ends the turn: it is EOS, or it completes a
    stop string (which may end inside it). Only a window of tokens at the end is decoded: the
    ones that can hold a stop string (4 bytes a character at most), so a step costs O(1).

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tok = ByteTokenizer()
        >>> ends_turn(tok.encode("1+1</calc>"), tok, ["</calc>"]), ends_turn(tok.encode("1+1</ca"), tok, ["</calc>"])
        (True, False)
    """
    last = int(ids[-1])
    if not may_end_turn(last, tokenizer, stop_strings):
        return False
    if last == tokenizer.eos_token_id:
        return True
    window = 4 * max(map(len, stop_strings)) + 2
    text = tokenizer.decode([int(i) for i in ids[-window:]])
    special = getattr(tokenizer, "special_token_text", None)
    return any(s in text for s in stop_strings) or (special is not None and special(last) in stop_strings)


def action_length(ids: Sequence[int], tokenizer: Tokenizer, stop_strings: Sequence[str], max_tokens: int) -> int | None:
    """How many of ``ids`` make up a turn, or ``None`` if the turn has not ended yet.

    A turn ends at EOS, at the token that completes a stop string (kept whole, even when the
    stop string ends inside it), or after ``max_tokens``: the rule ``ends_turn`` applies token by
    token, as the agent's engines do while they generate.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tok = ByteTokenizer()
        >>> action_length(tok.encode("1+1</calc>junk"), tok, ["</calc>"], 64)
        10
        >>> action_length(tok.encode("1+1</ca"), tok, ["</calc>"], 64) is None
        True
    """
    for j in range(min(len(ids), max_tokens)):
        if ends_turn(ids[: j + 1], tokenizer, stop_strings):
            return j + 1
    return max_tokens if len(ids) >= max_tokens else None


class LMEnv(gym.Env[str, np.ndarray]):
    """Base class of text environments whose actions are token sequences.

    Class attributes a subclass sets:
        stop_strings: strings that end a turn (the agent stops generating after one).
        special_tokens: the env's markup tags, which a tokenizer may make single tokens.
        max_action_tokens: the longest action, in tokens (the action space's bound).

    Args:
        tokenizer: an HF tokenizer, a name or local path, an object with the tokenizer protocol,
            or ``None`` for ``ByteTokenizer``.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
        max_action_tokens: overrides the class default.
        max_observation_length: overrides the class default (characters of one observation;
            longer ones are cut, saying so, and a longer prompt is an error).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    stop_strings: tuple[str, ...] = ()
    special_tokens: tuple[str, ...] = ()
    max_action_tokens: int = 64
    max_observation_length: int = 4096

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.tokenizer: Tokenizer = as_tokenizer(tokenizer)
        if max_action_tokens is not None:
            if int(max_action_tokens) < 1:
                raise ValueError(f"max_action_tokens must be at least 1, got {max_action_tokens}")
            self.max_action_tokens = int(max_action_tokens)
        if max_observation_length is not None:
            if int(max_observation_length) < 64:
                raise ValueError(f"max_observation_length must be at least 64, got {max_observation_length}")
            self.max_observation_length = int(max_observation_length)
        # a Sequence space whose samples are 1-D arrays (stack=True): the Env's array action type
        self.action_space = TokenSequence(self.tokenizer.vocab_size, self.max_action_tokens)  # type: ignore[assignment]
        self.observation_space = AnyText(self.max_observation_length)
        self.transcript: list[str] = []
        self.ended: str | None = "has not started"  # why the episode cannot take a step, if it cannot

    def __init_subclass__(cls, **kwargs: Any):
        # Record each prompt in the transcript, whatever the subclass's reset does.
        super().__init_subclass__(**kwargs)
        if "reset" in cls.__dict__:
            cls.reset = _recording_reset(cls.__dict__["reset"])  # type: ignore[method-assign]

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The env's logic: what happens after the model wrote ``text``."""
        raise NotImplementedError

    def step(self, action: Sequence[int] | np.ndarray) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.check_can_step()
        text = decode_action(self.tokenizer, action, self.max_action_tokens)
        obs, reward, terminated, truncated, info = self.step_text(text)
        obs = fit_text(obs, self.max_observation_length)
        self.record(text, obs, "terminated" if terminated else "truncated" if truncated else None)
        return obs, float(reward), bool(terminated), bool(truncated), info

    def check_can_step(self) -> None:
        """Raises ``gymnasium.error.ResetNeeded`` before the first ``reset`` and after the env
        returned ``terminated`` or ``truncated``. (A ``TimeLimit`` truncation is the wrapper's: the
        raw env does not see it, as in Gymnasium's own envs.)"""
        if self.ended:
            raise gym.error.ResetNeeded(f"step() called but the episode {self.ended}: call reset() first")

    def record(self, action_text: str, observation: str, ended: str | None = None) -> None:
        """Appends one turn to the transcript (wrappers that answer a turn call this too); ``ended``
        says how the episode ended with it, if it did."""
        self.transcript += [action_text, observation]
        self.ended = ended and f"is over ({ended})"
        if self.render_mode == "human":
            print(action_text + observation, end="", flush=True)

    def oracle(self) -> str:
        """A good next action as text (for demonstrations, tests and warm starts)."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle")

    def render(self) -> str | None:
        text = "".join(self.transcript)
        if self.render_mode == "human":
            print(text, flush=True)
            return None
        return text


def _recording_reset(reset: Any) -> Any:
    @functools.wraps(reset)
    def recording_reset(self: LMEnv, *, seed: int | None = None, options: dict | None = None):
        prompt, info = reset(self, seed=seed, options=options)
        if len(prompt) > self.max_observation_length:
            raise ValueError(
                f"{type(self).__name__}: a prompt of {len(prompt)} characters is longer than the observation "
                f"space allows (max_observation_length={self.max_observation_length}); pass a larger one"
            )
        if self.transcript != [prompt] and self.render_mode == "human":  # a subclass's super().reset printed it
            print(prompt, end="", flush=True)
        self.transcript, self.ended = [prompt], None
        return prompt, info

    return recording_reset
