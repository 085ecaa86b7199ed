"""ToolUse: gives any lmgym env tools the model calls with ``<name>input</name>``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import gymnasium as gym

from lmgym.core import call_with_timeout, check_timeout, decode_action, fit_text
from lmgym.spaces import AnyText

Tool = Callable[[str], str]


class ToolUse(gym.Wrapper):
    """Answers tool calls; passes every other action to the wrapped env.

    One syntax for all tools: the tool's name is the tag. An action holding
    ``<calc>37*412</calc>`` is a call of the tool named ``calc``; the wrapper answers with
    ``<result>15244</result>`` as the observation (``<result>error: ...</result>`` when the tool
    refuses the input or the call is not closed), reward 0, and the inner env does not see that
    turn. The first call in an action is the one answered.

    A tool is a callable ``str -> str``. A tool that also has ``run(input)`` returning a result
    with ``text`` and ``info`` (``PythonTool``) has that info reported in ``info["tool_info"]``.
    A tool that raises is re-raised as ``RuntimeError`` naming the tool, its input and the prompt;
    one that has not answered after ``tool_timeout`` seconds answers ``error: timed out``. A
    tool's answer longer than the observation space allows is cut, saying so, inside the tags.

    ``stop_strings`` add the tools' closing tags, ``special_tokens`` the tools' tags and the
    result tags, and ``oracle()`` calls the tool first when the inner env says the task needs it
    (its ``oracle_tool_call()`` returns the call), then asks the inner env's oracle.

    Wrapping an env ``gym.make`` made puts ``ToolUse`` outside its ``TimeLimit``, which then
    never sees a tool call: wrap the result in ``gym.wrappers.TimeLimit`` too, or a model that
    keeps calling a tool plays on until the context is full (``lmgym train --tools`` does).

    With ``instructions=True`` each prompt ends with a line that says how to call the tools
    (each tool's ``description``), for an env whose own prompt does not (a task library's).

    While a tool's tag is open, the inner env's stop strings do not end the model's turn: an
    action that ends on one of them (TextArena's ``]``, GEM's ``}``) inside ``<python>...`` is
    continued: the observation is empty, reward 0, ``info["continued"]``, and the next action
    carries on the same call (each continuation is a step, counted by the turn limit).

    Args:
        env: an lmgym env (anything with ``tokenizer``, ``stop_strings`` and ``oracle``).
        tools: a mapping of tag name to tool, or tools that have a ``name`` attribute.
        tool_timeout: seconds a tool call may take (``None``: no limit; ``PythonTool`` has its own).
        instructions: append how to call the tools to every prompt.

    Example:
        >>> from lmgym.envs.calculator import ArithmeticEnv
        >>> from lmgym.tools import Calculator
        >>> env = ToolUse(ArithmeticEnv(), [Calculator()])
        >>> _ = env.reset(seed=0)
        >>> env.step(env.get_wrapper_attr("tokenizer").encode("<calc>6*7</calc>"))[0]
        '<result>42</result>'
    """

    def __init__(
        self,
        env: gym.Env,
        tools: Mapping[str, Tool] | Iterable[Any],
        tool_timeout: float | None = None,
        instructions: bool = False,
    ):
        super().__init__(env)
        self.tool_timeout = check_timeout("tool_timeout", tool_timeout)
        if isinstance(tools, Mapping):
            self.tools: dict[str, Tool] = dict(tools)
        else:
            self.tools = {tool.name: tool for tool in cast(Iterable[Any], tools)}
        if not self.tools:
            raise ValueError("ToolUse needs at least one tool")
        for name in self.tools:
            if not re.fullmatch(r"[A-Za-z_][\w-]*", name):
                raise ValueError(f"tool name {name!r} is not a valid tag name")
        names = "|".join(map(re.escape, self.tools))
        self._call = re.compile(rf"<({names})>(.*?)</\1>", re.DOTALL)
        self._open = re.compile(rf"<({names})>")
        self.tool_calls = 0
        self.pending = ""  # a tool call the inner env's stop string cut: the next action continues it
        self.instructions = self.describe() if instructions else ""
        inner = getattr(env.observation_space, "max_length", None)
        if self.instructions and inner is not None:
            self.observation_space = AnyText(inner + len(self.instructions))

    def describe(self) -> str:
        """How to call the tools, one line: ``"\\nTools: ..."``."""
        parts = [getattr(t, "description", f"{name}: write <{name}>INPUT</{name}>") for name, t in self.tools.items()]
        return f"\nTools: {'; '.join(parts)}. Call one, then answer.\n"

    @property
    def stop_strings(self) -> tuple[str, ...]:
        inner = tuple(self.env.get_wrapper_attr("stop_strings"))
        return inner + tuple(f"</{n}>" for n in self.tools if f"</{n}>" not in inner)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        try:
            inner = tuple(self.env.get_wrapper_attr("special_tokens"))
        except AttributeError:
            inner = ()
        tags = [t for n in self.tools for t in (f"<{n}>", f"</{n}>")] + ["<result>", "</result>"]
        return inner + tuple(t for t in tags if t not in inner)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.tool_calls, self.pending = 0, ""
        obs, info = self.env.reset(**kwargs)
        return obs.rstrip("\n") + self.instructions if self.instructions else obs, info

    def find_call(self, text: str) -> tuple[str, str | None] | None:
        """``(tool name, input)`` of the first call in ``text``; input ``None`` if unclosed."""
        call = self._call.search(text)
        opened = self._open.search(text)
        if opened is not None and (call is None or opened.start() < call.start()):
            return opened.group(1), None
        return None if call is None else (call.group(1), call.group(2))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        tokenizer = self.env.get_wrapper_attr("tokenizer")
        action_text = decode_action(tokenizer, action)
        text, self.pending = self.pending + action_text, ""
        call = self.find_call(text)
        if call is None:
            obs, reward, terminated, truncated, inner_info = self.env.step(action)
            return obs, float(reward), terminated, truncated, inner_info
        if hasattr(self.env.unwrapped, "check_can_step"):  # the checks LMEnv.step makes
            self.env.unwrapped.check_can_step()
            decode_action(tokenizer, action, self.env.get_wrapper_attr("max_action_tokens"))
        name, tool_input = call
        inner_stops = tuple(s for s in self.env.get_wrapper_attr("stop_strings") if s)
        if tool_input is None and inner_stops and text.endswith(inner_stops):  # the tag is open: not a turn's end
            self.pending = text
            if hasattr(self.env.unwrapped, "record"):
                self.env.unwrapped.record(action_text, "")
            return "", 0.0, False, False, {"tool": name, "continued": True}
        info: dict[str, Any] = {"tool": name, "tool_input": tool_input}
        if tool_input is None:
            info["tool_output"] = f"error: <{name}> is not closed with </{name}>"
        else:
            info.update(self.call_tool(name, tool_input))
        self.tool_calls += 1
        room = getattr(self.observation_space, "max_length", 4096) - len("<result></result>")
        obs = f"<result>{fit_text(info['tool_output'], room)}</result>"
        if hasattr(self.env.unwrapped, "record"):
            self.env.unwrapped.record(action_text, obs)
        return obs, 0.0, False, False, info

    def call_tool(self, name: str, tool_input: str) -> dict[str, Any]:
        """Runs a tool: ``{"tool_output": text}``, plus ``"tool_info"`` for a tool with ``run``."""
        tool = self.tools[name]
        run = getattr(tool, "run", None)
        try:
            done, result = call_with_timeout(run if callable(run) else tool, tool_input, timeout=self.tool_timeout)
            if not done:
                return {"tool_output": "error: timed out", "tool_timeout": self.tool_timeout}
            if callable(run):
                return {"tool_output": str(result.text), "tool_info": dict(result.info)}
            return {"tool_output": str(result)}
        except Exception as e:
            transcript = self.env.unwrapped.transcript if hasattr(self.env.unwrapped, "transcript") else [""]
            raise RuntimeError(
                f"tool {name!r} raised {type(e).__name__}: {e}\n  input: {tool_input!r:.300}\n"
                f"  prompt: {transcript[0]!r:.300}"
            ) from e

    def close(self) -> None:
        """Closes the tools that can be closed (``PythonTool`` discards its waiting sandboxes), then the env."""
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if callable(close):
                close()
        super().close()

    def oracle(self) -> str:
        try:
            call = self.env.get_wrapper_attr("oracle_tool_call")()
        except AttributeError:
            call = None
        if self.tool_calls == 0 and call is not None and self.find_call(call) is not None:
            return call
        return self.env.get_wrapper_attr("oracle")()
