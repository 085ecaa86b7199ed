"""Rollout engines as Ray actors: N copies of the HF or vLLM engine, on their own GPUs (or CPUs)
anywhere in a Ray cluster (``pip install 'lmgym[ray]'``).

``RayEngine`` is an ``Engine`` like the others. Each actor (``EngineHost``) loads the policy (the
LM, LoRA adapters merged in, and the value head) from a directory of safetensors files the
trainer writes (``weights_dir``: a temp dir on one machine, a shared path on a cluster) and runs
an ``HFEngine`` or a ``VLLMEngine`` on it. A batch of contexts is split among the actors by each
episode's sampling key, so an episode's turns stay on one engine (its KV cache); the HF engine
samples each episode from its own keyed stream, so N actors give the episodes one engine gives.
``sync_weights`` writes the policy again and every actor reloads it: the one small interface
weights travel through (files; a GPU cluster would send them over NCCL instead, through vLLM's
weight-transfer API: not built here, where no GPU was lent).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from lmgym.agents.engines.base import EngineDied, EnginePolicy, Generation

VALUE_HEAD = "value_head.safetensors"


def write_policy(policy: EnginePolicy, directory: str) -> None:
    """The policy as a plain HF checkpoint (LoRA merged) and its value head, in ``directory``."""
    from safetensors.torch import save_file

    from lmgym.agents.engines.vllm import plain_state_dict

    model = policy.model
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.config.save_pretrained(directory)
    save_file(plain_state_dict(model), os.path.join(directory, "model.safetensors"), {"format": "pt"})
    head = {k: v.detach().to("cpu", copy=True) for k, v in policy.module.value_head.state_dict().items()}
    save_file(head, os.path.join(directory, VALUE_HEAD))


class EngineHost:
    """The Ray actor of one engine: the policy loaded from ``directory``, an engine on it."""

    def __init__(self, directory: str, tokenizer: Any, engine: str, seed: int, threads: int, kwargs: dict[str, Any]):
        from lmgym.agents.engines import make_engine
        from lmgym.agents.policy import PolicyWithValue

        torch.set_num_threads(max(1, threads))
        self.directory = directory
        self.module = PolicyWithValue(self.load_model())
        self.load_value_head()
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.module.to(device)
        policy = EnginePolicy(self.module, tokenizer, dict, device, seed)
        self.engine = make_engine(engine, policy, **kwargs)

    def load_model(self) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.directory, trust_remote_code=False).eval()

    def load_value_head(self) -> None:
        from safetensors.torch import load_file

        self.module.value_head.load_state_dict(load_file(os.path.join(self.directory, VALUE_HEAD)))

    def generate(
        self, contexts: list[list[int]], stop_strings: Sequence[str], max_new_tokens: int, keys: Any, kwargs: dict
    ) -> list[Generation]:
        return self.engine.generate(contexts, stop_strings, max_new_tokens, keys=keys, **kwargs)

    def sync_weights(self) -> None:
        from safetensors.torch import load_file

        state = load_file(os.path.join(self.directory, "model.safetensors"))
        self.module.model.load_state_dict(state, strict=False)  # tied weights are there twice
        self.load_value_head()
        self.engine.sync_weights()

    def reset(self) -> None:
        self.engine.reset()

    def close(self) -> None:
        self.engine.close()

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class RayEngine:
    """``engines`` rollout engines (``engine``: ``"hf"`` or ``"vllm"``) in Ray actors (module docs).

    Args:
        policy: the trainer's policy, written to ``weights_dir`` for the actors to load.
        engines: how many actors.
        engine: what each runs: ``"hf"`` (exact log-probs and values) or ``"vllm"``.
        num_cpus, num_gpus: Ray resources per actor (fractional allowed).
        weights_dir: where the weights travel (a path every machine of the cluster sees; a temp
            dir by default, which serves one machine).
        actor_options: more ``ray.remote`` options (e.g. ``{"resources": {"rollout": 1}}``).
        **engine_kwargs: the engine's own arguments (``VLLMEngine``'s, say).
    """

    def __init__(
        self,
        policy: EnginePolicy,
        engines: int = 2,
        engine: str = "hf",
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        weights_dir: str | None = None,
        actor_options: dict[str, Any] | None = None,
        **engine_kwargs: Any,
    ):
        from lmgym.vector.remote import require_ray

        if engines < 1:
            raise ValueError(f"engines must be >= 1, got {engines}")
        ray = require_ray()
        self.policy, self.engine_name, self.exact = policy, engine, engine == "hf"
        self.dir = weights_dir or tempfile.mkdtemp(prefix="lmgym-weights-")
        self.remove_dir = weakref.finalize(self, shutil.rmtree, self.dir, True) if weights_dir is None else None
        os.makedirs(self.dir, exist_ok=True)
        write_policy(policy, self.dir)
        options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "scheduling_strategy": "SPREAD", **(actor_options or {})}
        host = ray.remote(EngineHost).options(**options)
        threads = max(1, int(num_cpus))
        self.actors = [
            host.remote(self.dir, policy.tokenizer, engine, policy.seed + i, threads, engine_kwargs)
            for i in range(engines)
        ]
        self.call("reset")  # every actor started (an error in its start-up comes out here)

    def call(self, method: str, *args: Any) -> list[Any]:
        """``method`` on every actor at once; their results in order."""
        import ray
        from ray.exceptions import RayActorError

        try:
            return ray.get([getattr(actor, method).remote(*args) for actor in self.actors])
        except RayActorError as e:
            raise EngineDied(f"a Ray {self.engine_name} engine actor died: {str(e).splitlines()[0][:500]}") from e

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]:
        """Each context on the actor its key picks (an episode's turns on one engine), all at once."""
        import ray
        from ray.exceptions import RayActorError

        kwargs = {**self.policy.sampling_kwargs, **generation_kwargs}
        n = len(self.actors)
        owner = [int(k) % n for k in keys] if keys is not None else [i % n for i in range(len(contexts))]
        parts = {a: [i for i, o in enumerate(owner) if o == a] for a in range(n)}
        refs = {}
        for a, rows in parts.items():
            if rows:
                part_keys = None if keys is None else [keys[i] for i in rows]
                part = [contexts[i] for i in rows]
                refs[a] = self.actors[a].generate.remote(part, stop_strings, max_new_tokens, part_keys, kwargs)
        out: list[Generation] = [Generation()] * len(contexts)
        try:
            for a, ref in refs.items():
                for i, generation in zip(parts[a], ray.get(ref)):
                    out[i] = generation
        except RayActorError as e:
            raise EngineDied(f"a Ray {self.engine_name} engine actor died: {str(e).splitlines()[0][:500]}") from e
        return out

    def sync_weights(self) -> None:
        write_policy(self.policy, self.dir)
        self.call("sync_weights")

    def reset(self) -> None:
        self.call("reset")

    def close(self) -> None:
        import ray

        for actor in self.__dict__.pop("actors", []) if ray.is_initialized() else []:
            # a dead actor, or one of a Ray session that ended; one whose close hangs is killed still
            with contextlib.suppress(Exception):
                ray.get(actor.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self.remove_dir is not None:
            self.remove_dir()


__all__ = ["EngineHost", "RayEngine", "write_policy"]
