"""Verifiers-v0: a verifiers v1 environment as an lmgym env (``pip install 'lmgym[verifiers]'``).

verifiers runs an episode itself: its harness (a program in its runtime) sends the task's
messages to an OpenAI-style chat endpoint and, at the end, its task's ``@vf.reward`` functions
score the trace. The bridge turns that inside out so lmgym's agent plays it through ``reset``
and ``step``. Each env serves an OpenAI-compatible endpoint on 127.0.0.1 (``/v1/chat/completions``,
streamed or not) and points the episode's client at it; a request the harness sends becomes an
observation, and the action the agent's engine sampled for it goes back as the completion. The
tokens trained are the ones sampled (the trajectory keeps the action's token ids; the harness
gets their text), and the rollout's reward comes on its last turn.

Not supported: tool calls in the endpoint's replies (``tools`` in a request are shown in the
observation, the reply is plain text), several requests in flight at once (one agent, one call
at a time), images, and logprobs returned to the harness. The harness program runs under
verifiers' own runtime (``subprocess`` by default: on this machine, in its own process, with
nothing of lmgym's sandbox); uv prepares its script once, from PyPI, under ``~/.cache``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import queue
import secrets
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lmgym.compat import LibraryError, named_errors, require
from lmgym.compat.library import LibraryEnv

Event = tuple[str, Any, "queue.Queue[str] | None"]
"""``("request", messages, reply queue)``, ``("done", episode, None)`` or ``("error", exception, None)``."""


def completion(text: str, model: str, stream: bool) -> bytes:
    """An OpenAI chat completion of ``text``: one JSON body, or server-sent events ending in ``[DONE]``."""
    head = {"id": f"lmgym-{time.monotonic_ns()}", "created": int(time.time()), "model": model}
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if not stream:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return json.dumps({**head, "object": "chat.completion", "choices": [choice], "usage": usage}).encode()
    chunk = {**head, "object": "chat.completion.chunk"}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": usage},
    ]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def uv_on_path() -> None:
    """verifiers runs its harness programs with uv, found on ``PATH`` (or installed with ``pip
    --user``, or from astral.sh): the one ``lmgym[verifiers]`` installed beside this Python
    goes on ``PATH`` when no other is there."""
    here = os.path.dirname(sys.executable)
    if shutil.which("uv") is None and shutil.which("uv", path=here):
        os.environ["PATH"] = os.pathsep.join([here, os.environ.get("PATH", "")])


MAX_BODY = 4 * 1024 * 1024
"""The largest request body the endpoint reads (a chat of a few MiB); past it, 413 unread."""


class Endpoint:
    """The OpenAI-compatible endpoint one env serves: each request is handed to the env as an
    event, and answered with the text the env puts in its reply queue.

    Only the env's harness gets in: a request must carry the endpoint's random ``key`` (as the
    API key, ``Authorization: Bearer KEY``; 401 otherwise), a body of at most ``MAX_BODY`` bytes
    (413, unread, otherwise) that is a JSON object (400 otherwise). A refused request never
    reaches the episode."""

    def __init__(self, events: queue.Queue[Event], timeout: float, key: str | None = None):
        outer = self
        self.key = key or secrets.token_urlsafe(32)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                refused = self.refusal()
                if refused is not None:
                    return self.answer(refused[0], json.dumps({"error": refused[1]}).encode(), "application/json")
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    return self.answer(400, b'{"error": "the body is not a JSON object"}', "application/json")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self.answer(404, b'{"error": "lmgym serves /v1/chat/completions only"}', "application/json")
                reply: queue.Queue[str] = queue.Queue()
                events.put(("request", body, reply))
                try:
                    text = reply.get(timeout=outer.timeout)
                except queue.Empty:
                    return self.answer(504, b'{"error": "no completion in time"}', "application/json")
                stream = bool(body.get("stream"))
                kind = "text/event-stream" if stream else "application/json"
                self.answer(200, completion(text, str(body.get("model", "lmgym")), stream), kind)

            def refusal(self) -> tuple[int, str] | None:
                """Why the request is refused, before its body is read: no key, or no or too large a length."""
                given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                if not hmac.compare_digest(given.encode(), outer.key.encode()):
                    return 401, "a request needs the endpoint's key as its API key"
                length = self.headers.get("Content-Length", "")
                if not length.isdigit():
                    return 411, "a request needs a Content-Length"
                if int(length) > MAX_BODY:
                    self.close_connection = True
                    return 413, f"a request body is at most {MAX_BODY} bytes"
                return None

            def answer(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.timeout = timeout
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True, name="lmgym-verifiers-endpoint").start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class VerifiersEnv(LibraryEnv):
    """A verifiers v1 taskset, played by lmgym's agent through a harness.

    ## Description
    A reset picks one of the taskset's tasks with the env's RNG and starts its episode (the
    harness's program, in verifiers' runtime) against this env's endpoint; each request the
    harness sends is an observation, each action the completion it gets back.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=256)``: the completion of one model call.

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: at the first call, the request's messages (system,
    then user); at the next ones, the messages after the last completion (a tool's output, the
    next user turn).

    ## Starting State
    The task the seed picks.

    ## Rewards
    The trace's reward (the task's ``@vf.reward`` functions, weighted), on the last turn; 0 before.

    ## Episode End
    Terminated when verifiers' episode ends (the harness stopped, its ``max_turns`` spent);
    truncated by the registered limit of 32 model calls. A failed episode (the harness, the
    task's setup or its reward) is one ``LibraryError``.

    ## Arguments
    ``gym.make("lmgym/Verifiers-v0", taskset="my_tasks", harness="null", max_turns=None,
    runtime="subprocess", timeout=600, tokenizer=None)``. ``taskset``: a verifiers taskset id
    (an importable module exporting one ``vf.Taskset`` subclass in ``__all__``) or a
    ``vf.TasksetConfig``; ``harness``: a verifiers harness id or ``HarnessConfig`` (``null``:
    verifiers' tool-less chat loop); ``timeout``: seconds to wait for the harness or the agent.

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 256
    max_observation_length = 16384

    def __init__(
        self,
        taskset: Any = None,
        harness: Any = "null",
        max_turns: int | None = None,
        runtime: str = "subprocess",
        timeout: float = 600.0,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        if taskset is None:
            raise ValueError("Verifiers-v0 needs taskset=: a verifiers taskset id (a module exporting a vf.Taskset)")
        vf = require("verifiers.v1", "verifiers")
        uv_on_path()
        self.what = f"verifiers taskset {getattr(taskset, 'id', taskset)!r}"
        with named_errors(self.what):
            self.vf_env = vf.SingleAgentEnv(self.env_config(vf, taskset, harness, max_turns, runtime))
            self.tasks = list(self.vf_env.taskset)
        if not self.tasks:
            raise ValueError(f"{self.what} has no tasks")
        self.timeout = float(timeout)
        self.events: queue.Queue[Event] = queue.Queue()
        self.endpoint = Endpoint(self.events, self.timeout)
        self.key_var = f"LMGYM_VERIFIERS_KEY_{id(self)}"  # the harness's API key: this env's endpoint's own
        os.environ[self.key_var] = self.endpoint.key
        self.ctx = vf.ModelContext(
            client=vf.EvalClientConfig(base_url=self.endpoint.url, api_key_var=self.key_var), model="lmgym"
        )
        self.reply: queue.Queue[str] | None = None
        self.seen = 0
        self.thread: threading.Thread | None = None
        self.task: Any = None

    @staticmethod
    def env_config(vf: Any, taskset: Any, harness: Any, max_turns: int | None, runtime: str) -> Any:
        from verifiers.v1.utils.loaders import harness_config_type

        if isinstance(harness, str):
            harness = harness_config_type(harness)(id=harness)
        runtimes = {"subprocess": vf.SubprocessConfig, "docker": vf.DockerConfig}
        if runtime not in runtimes:
            raise ValueError(f"runtime {runtime!r}: one of {sorted(runtimes)}")
        agent = vf.AgentConfig(harness=harness, runtime=runtimes[runtime](), max_turns=max_turns)
        tasks = taskset if isinstance(taskset, vf.TasksetConfig) else vf.TasksetConfig(id=str(taskset))
        return vf.SingleAgentEnvConfig(taskset=tasks, agent=agent)

    # ------------------------------------------------------------------------------ the episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.finish()
        self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        while not self.events.empty():  # what a finished episode left
            self.events.get_nowait()
        self.thread = threading.Thread(target=self.play, args=(self.task, self.events), daemon=True)
        self.thread.start()
        kind, body, _ = self.next_event()
        if kind != "request":
            raise LibraryError(f"{self.what}: the episode ended before the harness called the model")
        self.seen = len(body.get("messages") or [])
        data = self.task.data.model_dump(mode="json", exclude_defaults=True)
        return self.render_messages(body.get("messages") or [], body.get("tools")), {"task": json.dumps(data)[:2000]}

    def play(self, task: Any, events: queue.Queue[Event]) -> None:
        """verifiers' episode, in this thread's own event loop; its end is the last event."""

        async def episode() -> Any:
            async with self.vf_env.serving():
                return await self.vf_env.run_episode(task, self.ctx)

        try:
            events.put(("done", asyncio.run(episode()), None))
        except BaseException as e:  # noqa: BLE001 (reported by the step that waits for it)
            events.put(("error", e, None))

    def next_event(self) -> Event:
        try:
            kind, body, reply = self.events.get(timeout=self.timeout)
        except queue.Empty:
            raise LibraryError(f"{self.what}: the harness sent nothing in {self.timeout:.0f} s") from None
        if kind == "error":
            raise LibraryError(f"{self.what} raised {type(body).__name__}: {str(body)[:300]}") from body
        self.reply = reply
        return kind, body, reply

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.reply is None:
            raise LibraryError(f"{self.what}: no model call is waiting (reset first)")
        self.reply.put(text)
        self.reply = None
        kind, body, _ = self.next_event()
        if kind == "request":
            messages = body.get("messages") or []
            new, self.seen = messages[self.seen + 1 :], len(messages)  # after the completion just sent
            return self.render_messages(new), 0.0, False, False, {}
        self.thread = None
        return "", *self.outcome(body)

    def outcome(self, episode: Any) -> tuple[float, bool, bool, dict[str, Any]]:
        """The finished episode's reward and info; a failed one is a ``LibraryError``."""
        errors = [*episode.errors, *(t.last_error for t in episode.traces if t.has_error and t.last_error)]
        if errors:
            raise LibraryError(f"{self.what}: the episode failed: {errors[0].type}: {errors[0].message[:300]}")
        reward = float(sum(t.reward for t in episode.traces))
        reply = episode.traces[-1].last_reply if episode.traces else ""
        return reward, True, False, {"reward": reward, "correct": reward >= 1.0, "reply": reply}

    def oracle(self) -> str:
        answer = getattr(self.task.data, "answer", None) if self.task is not None else None
        if answer is None:
            raise NotImplementedError(f"{self.what}'s tasks have no answer field to play as an oracle")
        return str(answer)

    def finish(self) -> None:
        """Ends an episode still running: its waiting call gets an empty completion until it stops."""
        deadline = time.monotonic() + 60
        while self.thread is not None and self.thread.is_alive() and time.monotonic() < deadline:
            if self.reply is not None:
                self.reply.put("")
                self.reply = None
            try:
                _, _, self.reply = self.events.get(timeout=1)
            except queue.Empty:
                pass
        self.thread, self.reply = None, None

    def close(self) -> None:
        self.finish()
        self.endpoint.close()
        os.environ.pop(self.key_var, None)
        super().close()
