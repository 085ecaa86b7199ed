"""Observation helpers: token ids in ``info``, and transcripts recorded to a JSONL file."""

from __future__ import annotations

import json
import os
from typing import Any

import gymnasium as gym

from lmgym.core import decode_action


class TokenizeObservation(gym.Wrapper):
    """Adds the observation's token ids (the env's tokenizer) to ``info["observation_ids"]``."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "observation_ids": self.env.get_wrapper_attr("tokenizer").encode(obs)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ids = self.env.get_wrapper_attr("tokenizer").encode(obs)
        return obs, float(reward), terminated, truncated, {**info, "observation_ids": ids}


class RecordTranscript(gym.Wrapper):
    """The text counterpart of ``RecordVideo``: each finished episode is appended to a JSONL file.

    One JSON object per episode: ``seed``, ``prompt``, ``actions`` (decoded), ``observations``,
    ``rewards``, ``return``, ``terminated``, ``truncated`` and the whole ``transcript``.
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike):
        super().__init__(env)
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.episode: dict[str, Any] | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.episode = {"seed": kwargs.get("seed"), "prompt": obs, "actions": [], "observations": [], "rewards": []}
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.episode is not None:
            self.episode["actions"].append(decode_action(self.env.get_wrapper_attr("tokenizer"), action))
            self.episode["observations"].append(obs)
            self.episode["rewards"].append(float(reward))
            if terminated or truncated:
                self._write(terminated, truncated)
        return obs, float(reward), terminated, truncated, info

    def _write(self, terminated: bool, truncated: bool) -> None:
        assert self.episode is not None
        e = self.episode
        text = e["prompt"] + "".join(a + o for a, o in zip(e["actions"], e["observations"]))
        record = {
            **e,
            "return": sum(e["rewards"]),
            "terminated": terminated,
            "truncated": truncated,
            "transcript": text,
        }
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.episode = None
