"""What every rollout engine shares: the ``Engine`` protocol, the turn it returns
(``Generation``) and the policy it generates with (``EnginePolicy``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from lmgym.tokenizers import Tokenizer


class Generation(list):
    """One turn an engine generated for one context: the sampled token ids (a ``list`` of them,
    so code that wants only the ids can treat it as one), with what the engine knew of each.

    Attributes:
        logprobs: the sampler's log-prob of each token, at the sampling temperature (before
            top-k/top-p); ``None`` when the engine gave none.
        values: V of the state before each token (engines that run the policy's value head).
    """

    def __init__(
        self, tokens: Iterable[int] = (), logprobs: list[float] | None = None, values: list[float] | None = None
    ):
        super().__init__(tokens)
        self.logprobs, self.values = logprobs, values

    @property
    def tokens(self) -> list[int]:
        return self

    def add(self, token: int, logprob: float, value: float) -> None:
        """One more sampled token, with its log-prob and the value before it (a decode loop's)."""
        self.append(token)
        self.logprobs.append(logprob)  # type: ignore[union-attr]
        self.values.append(value)  # type: ignore[union-attr]


@dataclass
class EnginePolicy:
    """What an engine generates with: the policy, not the agent that trains it."""

    module: Any
    """The policy module (``lmgym.agents.policy.PolicyWithValue``, unwrapped): ``.model``, the
    causal LM, and ``.value_head``."""
    tokenizer: Tokenizer
    sampling: Callable[[], dict[str, Any]]
    """The default generation kwargs (``PPOConfig.rollout.sampling_kwargs``), read at each call."""
    device: torch.device
    seed: int = 0

    @property
    def model(self) -> Any:
        return self.module.model

    @property
    def sampling_kwargs(self) -> dict[str, Any]:
        return self.sampling()


class Engine(Protocol):
    """What ``PPOAgent`` needs of a rollout engine.

    ``exact`` says whether its log-probs are the trainer's own (then they serve as the old
    log-probs and no importance correction is needed). ``generate`` gets ``keys``, one int per
    context (``collect`` gives one per episode): an engine that can sample each row from its own
    random stream uses them, one that cannot ignores them.
    """

    exact: bool

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]: ...

    def sync_weights(self) -> None:
        """Pushes the policy's weights to the engine (after an update)."""

    def reset(self) -> None:
        """Drops whatever the engine cached (a KV cache, a prefix cache)."""

    def close(self) -> None:
        """Stops the engine's processes and removes its files, if it has any."""


class EngineUnavailable(RuntimeError):
    """The chosen engine cannot run on this machine (one line says why)."""


class EngineDied(RuntimeError):
    """The rollout engine's process died mid-run (killed, out of memory): the message names the
    engine and ends with the tail of its log."""


__all__ = ["Engine", "EngineDied", "EnginePolicy", "EngineUnavailable", "Generation"]
