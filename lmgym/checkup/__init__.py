"""``lmgym doctor``: the silent failures of LLM RL, found in seconds before they cost a run.

``doctor(agent, envs)`` plays a small batch (a few groups, sampled; a few held-out episodes,
greedy) through the agent's own engine and reports one line per check, with the figure it
measured, PASS / WARN / FAIL, and what to do about a failure (``docs/guides/doctor.md`` says what each
catches):

- ``loss mask``: exactly the tokens the engine sampled are trained, no env, tool or template token;
- ``token identity``: the context each turn was sampled from is the episode's token stream, and,
  with a chat template, the stream is what rendering the whole conversation at once gives;
- ``log-probs``: the engine's sampling log-probs against the trainer's, recomputed at the
  sampling temperature, within a bound of the model's dtype;
- ``truncation``: episodes cut by a turn or token budget are ``truncated``, not ``terminated``;
  a budget that cuts most replies is a warning;
- ``signal``: sampled and greedy success with 95% intervals, the share of groups whose rewards
  are all equal (they teach GRPO and RLOO nothing), and a verdict;
- ``env contract``: ``check_env``, determinism under ``reset(seed=)``, stop strings that end the
  oracle's turns where they end, the oracle's own success;
- ``cost``: the memory estimate, seconds an update and the run's time.
"""

from lmgym.checkup.checks import Check, Report, doctor

__all__ = ["Check", "Report", "doctor"]
