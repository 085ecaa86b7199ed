"""TokenLevel: any lmgym env as a standard one-token-per-step env, for classic RL agents (SB3)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from lmgym.core import action_length


class TokenLevel(gym.Env):
    """One token per step: ``Discrete(vocab_size)`` actions, the last ``context_tokens`` context
    token ids as a fixed-size ``Box`` observation (left-padded with the pad id).

    Tokens accumulate into a turn; the turn ends at EOS, when its text holds one of the env's
    stop strings, or at ``max_action_tokens``. Then the wrapped env steps on the whole turn,
    its observation text is appended to the context, and the turn's reward arrives on that
    step. Other steps have reward 0.

    It is an env of its own that holds the text env (``.env``), not a ``gym.Wrapper``: its
    spaces and dynamics are new, and checkers take it as a raw env.

    Example:
        >>> import lmgym
        >>> env = TokenLevel(gym.make("lmgym/Echo-v0", length=1, max_action_tokens=1), context_tokens=8)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, env.action_space
        ((8,), Discrete(258))
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(self, env: gym.Env, context_tokens: int = 32):
        self.env = env
        self.render_mode = env.render_mode
        self.tokenizer = env.get_wrapper_attr("tokenizer")
        self.stops = tuple(env.get_wrapper_attr("stop_strings"))
        self.max_turn = int(env.get_wrapper_attr("max_action_tokens"))
        self.context_tokens = context_tokens
        vocab = self.tokenizer.vocab_size
        self.action_space = spaces.Discrete(vocab)
        self.observation_space = spaces.Box(0, vocab - 1, shape=(context_tokens,), dtype=np.int64)
        self.context: list[int] = []
        self.turn: list[int] = []

    def _obs(self) -> np.ndarray:
        window = self.context[-self.context_tokens :]
        pad = [self.tokenizer.pad_token_id] * (self.context_tokens - len(window))
        return np.array(pad + window, dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        prompt, info = self.env.reset(seed=seed, options=options)
        self.context, self.turn = self.tokenizer.encode(prompt), []
        return self._obs(), info

    def turn_ended(self) -> bool:
        return action_length(self.turn, self.tokenizer, self.stops, self.max_turn) is not None

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        token = int(action)
        if not 0 <= token < self.tokenizer.vocab_size:
            raise ValueError(f"token id {token} is outside the vocabulary (vocab_size={self.tokenizer.vocab_size})")
        self.turn.append(token)
        self.context.append(token)
        if not self.turn_ended():
            return self._obs(), 0.0, False, False, {}
        obs, reward, terminated, truncated, info = self.env.step(np.array(self.turn, dtype=np.int64))
        self.turn = []
        self.context += self.tokenizer.encode(obs)
        return self._obs(), float(reward), terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def get_wrapper_attr(self, name: str) -> Any:
        """Its own attribute, else the text env's (``oracle``, ``stop_strings``, ...)."""
        return getattr(self, name) if hasattr(self, name) else self.env.get_wrapper_attr(name)
