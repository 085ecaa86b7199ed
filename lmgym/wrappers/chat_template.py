"""ChatTemplate: the prompt and observations as chat turns, in the tokenizer's own format."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from lmgym.core import decode_action
from lmgym.spaces import AnyText
from lmgym.tokenizers import HFTokenizer, is_hf_tokenizer

MARK = "\ue000lmgym-assistant-turn\ue000"  # a private-use placeholder for the model's turn

PROBE = """
import json
from transformers.utils.chat_template_utils import render_jinja_template
template, special, conversations = json.loads({payload!r})
for messages, prompt in conversations:
    render_jinja_template([messages], chat_template=template, add_generation_prompt=prompt, **special)
"""


def template_problem(tokenizer: Any, seconds: float = 30.0, memory_mb: int = 1024) -> str | None:
    """Why an HF tokenizer's chat template cannot be used (``None`` when it can): rendered once,
    on the conversations ``ChatTemplate`` renders, in the Python tool's sandbox (a subprocess with
    time and memory limits), it did not finish within ``seconds`` (a loop that never ends), went
    past ``memory_mb`` (``{{ 'x' * 5000000000 }}``) or raised (an include, ``raise_exception``).
    A template is code: one written to behave otherwise on other text is not caught; review a
    template you did not write. ``lmgym train`` and ``lmgym eval`` check a model's this way."""
    import json

    from lmgym.tools.python import PythonTool

    hf = tokenizer.hf if isinstance(tokenizer, HFTokenizer) else tokenizer
    template = getattr(hf, "chat_template", None)
    if not isinstance(template, str):
        return "it has no chat template (or several, by name)"
    turns = [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}, {"role": "user", "content": "y"}]
    system = [{"role": "system", "content": "s"}]
    conversations = [(turns[:2], False), (turns, True), (system + turns, True), (turns[:1], True)]
    payload = json.dumps([template, dict(hf.special_tokens_map), conversations])
    result = PythonTool(timeout=seconds, memory_mb=memory_mb, pool_size=0).run(PROBE.format(payload=payload))
    if result.timed_out:
        return f"it did not render a short conversation within {seconds:g} s"
    if result.returncode != 0 or result.error:
        said = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return f"rendering it failed ({said[-1][:200] if said else result.error or result.returncode})"
    return None


class ChatTemplate(gym.Wrapper):
    """Wraps the env's text in the chat template of an HF tokenizer, so a chat model sees the
    format it was trained on while the episode's token stream stays exact.

    ``reset`` returns the rendered conversation up to the assistant's turn (system prompt,
    the env's prompt as the user turn, the generation prompt). The model's action is its turn;
    it ends at the template's end-of-turn token, which joins ``stop_strings``. Each later
    observation is the rest of the template after that token: the env's text as the next user
    turn and the next generation prompt. Only env text is rendered; the model's tokens are
    never re-encoded.

    A turn the model ended otherwise (a stop string, the length limit) gets the template's
    end-of-turn from the env, so the token stream is always the rendered conversation.

    Args:
        env: an lmgym env.
        tokenizer: an HF tokenizer with a chat template (default: the env's, if it is HF).
        system: an optional system message.
        tool_role: the role of a tool's answer (e.g. ``"tool"``, when the template renders one);
            ``None`` renders every observation as a user turn.
    """

    def __init__(self, env: gym.Env, tokenizer: Any = None, system: str | None = None, tool_role: str | None = None):
        super().__init__(env)
        self.tool_role = tool_role
        tok = tokenizer if tokenizer is not None else env.get_wrapper_attr("tokenizer")
        self.hf = tok.hf if isinstance(tok, HFTokenizer) else tok
        if not is_hf_tokenizer(self.hf) or not getattr(self.hf, "chat_template", None):
            raise ValueError("ChatTemplate needs an HF tokenizer with a chat_template")
        self.system = system
        self.messages: list[dict[str, str]] = []
        self.partial = ""  # the model's turn so far, while ToolUse continues it (info["continued"])
        rendered = self._render([{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}])
        suffix = rendered[rendered.index(MARK) + len(MARK) :]
        special = sorted((t for t in self.hf.all_special_tokens if suffix.lstrip().startswith(t)), key=len)
        self.end_of_turn = special[-1] if special else suffix.strip()
        if not self.end_of_turn:
            raise ValueError("could not find the chat template's end-of-turn marker")
        inner = getattr(env.observation_space, "max_length", None)
        if inner is not None:  # the template's own text around the env's: a larger space
            empty = [{"role": role, "content": ""} for role in ("user", "assistant", tool_role or "user")]
            self.observation_space = AnyText(inner + len(self._render(empty, generation_prompt=True)) + 256)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        inner = tuple(self.env.get_wrapper_attr("stop_strings"))
        return inner + (self.end_of_turn,) if self.end_of_turn not in inner else inner

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool = False) -> str:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return str(
            self.hf.apply_chat_template(system + messages, tokenize=False, add_generation_prompt=generation_prompt)
        )

    def reset(self, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        prompt, info = self.env.reset(**kwargs)
        self.messages, self.partial = [{"role": "user", "content": prompt}], ""
        return self._render(self.messages, generation_prompt=True), info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        tokenizer = self.env.get_wrapper_attr("tokenizer")
        text = decode_action(tokenizer, action)
        ids = [int(i) for i in action]
        ended_turn = bool(ids) and self.hf.decode(ids[-1:], skip_special_tokens=False) == self.end_of_turn
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info.get("continued") and not (terminated or truncated):  # the same turn goes on: nothing rendered
            self.partial += text
            return obs, float(reward), terminated, truncated, info
        text, self.partial = self.partial + text, ""
        if terminated:  # nothing follows; a truncated episode's last text is rendered (the bootstrap state)
            return obs, float(reward), terminated, truncated, info
        role = self.tool_role if self.tool_role and "tool" in info else "user"
        turn = [{"role": "assistant", "content": MARK}]
        before = self._render(self.messages + turn)
        after = self._render(self.messages + turn + [{"role": role, "content": obs}], generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("the chat template renders earlier turns differently once a turn is added")
        closing = before[before.index(MARK, len(self._render(self.messages))) + len(MARK) :]
        if ended_turn and closing.lstrip().startswith(self.end_of_turn):  # the model wrote it: not twice
            closing = closing.lstrip()[len(self.end_of_turn) :]
        self.messages += [{"role": "assistant", "content": text}, {"role": role, "content": obs}]
        return closing + after[len(before) :], float(reward), terminated, truncated, info
