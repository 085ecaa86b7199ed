"""Which reasoning-gym scorers can be gamed by partial credit, and each task's majority answer.

For every task (or ``--tasks a,b``): on ``--seeds`` held-out instances, the score that
``ReasoningGym-v0`` (partial credit kept, the library's default) gives to two answers that are
not an answer: the reference hidden among wrong ones (``WRONG REFERENCE WRONG``, the wrong ones
other instances' references), and every distinct reference of the probe at once. A mean above 0
is credit a policy can earn without answering; ``partial_credit=False`` pays only full credit.
Also the share of instances whose reference is the most common one: the success of always
giving that answer (a majority baseline for a learning table).

    python benchmarks/partial_credit.py [--tasks syllogism,letter_counting] [--seeds 50] [--markdown]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import warnings

import gymnasium as gym

import lmgym  # noqa: F401 (registers the envs)
from lmgym.agents.rollout import EVAL_SEED_OFFSET


def probe(task: str, seeds: int) -> dict[str, float] | None:
    try:
        env = gym.make("lmgym/ReasoningGym-v0", task=task, max_action_tokens=8192)
    except Exception:  # noqa: BLE001 (a task that needs what is not here is left out, said below)
        return None
    tok = env.get_wrapper_attr("tokenizer")
    references = []
    for s in range(seeds):
        env.reset(seed=EVAL_SEED_OFFSET + s)
        references.append(str(env.unwrapped.entry.get("answer")))
    distinct = list(dict.fromkeys(references))[:20]
    hidden, everything = [], []
    for s, reference in enumerate(references):
        wrong = [r for r in distinct if r != reference][:2] or ["0"]
        for answer, out in ((f"{wrong[0]} {reference} {wrong[-1]}", hidden), (" ".join(distinct), everything)):
            env.reset(seed=EVAL_SEED_OFFSET + s)
            out.append(float(env.step(tok.encode(f"<answer>{answer}</answer>"))[1]))
    majority = collections.Counter(references).most_common(1)[0]
    return {
        "hidden": statistics.mean(hidden),
        "everything": statistics.mean(everything),
        "majority": majority[1] / len(references),
        "majority_answer": majority[0],
    }


def main() -> None:
    from reasoning_gym.factory import DATASETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: all)")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--markdown", action="store_true", help="only the gameable tasks, as a table")
    args = parser.parse_args()
    tasks = args.tasks.split(",") if args.tasks else sorted(DATASETS)
    warnings.filterwarnings("ignore")
    rows, failed = [], []
    for task in tasks:
        try:
            result = probe(task, args.seeds)
        except Exception:  # noqa: BLE001 (a library error on an odd answer: the task is left out, said below)
            result = None
        if result is None:
            failed.append(task)
            continue
        rows.append((task, result))
        if not args.markdown:
            print(
                f"{task:32s} hidden {result['hidden']:.3f}  everything {result['everything']:.3f}  "
                f"majority {result['majority']:.0%} ({result['majority_answer'][:20]!r})",
                flush=True,
            )
    gameable = [(t, r) for t, r in rows if r["hidden"] > 0 or r["everything"] > 0]
    print(f"\n{len(gameable)} of {len(rows)} tasks give partial credit to an answer that is not one")
    print("| task | reference hidden among wrong answers | every answer at once | majority answer |")
    print("| --- | ---: | ---: | ---: |")
    for task, r in gameable:
        print(f"| `{task}` | {r['hidden']:.3f} | {r['everything']:.3f} | {r['majority']:.0%} |")
    if failed:
        print(f"\nnot probed (they fail to make here): {', '.join(failed)}")


if __name__ == "__main__":
    main()
