"""Every task-library adapter stands on ``LibraryEnv``: one seeding rule (the same seed gives the
same first observation and the same task, in any order, and under threads too), one info cleaner,
one message renderer, one error rule."""

import shutil
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import lmgym  # noqa: F401
from lmgym.compat import LibraryError, installed
from lmgym.compat.library import LibraryEnv, bisection

JAVA = shutil.which("java") is not None
ADAPTERS = [
    ("lmgym/ReasoningGym-v0", {"task": "chain_sum"}, installed("reasoning_gym"), "lmgym[reasoning-gym]", True),
    ("lmgym/TextArena-v0", {"game": "GuessTheNumber-v0"}, installed("textarena"), "lmgym[textarena]", True),
    ("lmgym/GEM-v0", {"env_id": "game:GuessTheNumber-v0-easy"}, installed("gem"), "lmgym[gem]", True),
    ("lmgym/SkyRL-v0", {}, installed("skyrl_gym"), "lmgym[skyrl]", True),
    (
        "lmgym/TextWorldExpress-v0",
        {"game": "coin"},
        installed("textworld_express") and JAVA,
        "lmgym[textworld] and Java",
        False,
    ),
    (
        "lmgym/ScienceWorld-v0",
        {"task": "find-living-thing"},
        installed("scienceworld") and JAVA,
        "lmgym[scienceworld] and Java",
        False,
    ),
]


def first(env, seed):
    obs, info = env.reset(seed=seed)
    return obs, {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, dict))}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("env_id,kwargs,present,needs,threads", ADAPTERS, ids=[a[0] for a in ADAPTERS])
def test_the_same_seed_gives_the_same_first_observation_and_task(env_id, kwargs, present, needs, threads):
    if not present:
        pytest.skip(f"needs {needs}")
    envs = [gym.make(env_id, **kwargs) for _ in range(4 if threads else 2)]
    try:
        assert all(isinstance(e.unwrapped, LibraryEnv) for e in envs)
        a, b = envs[:2]
        seeds = [0, 1, 0]
        seen = [first(a, s) for s in seeds]
        assert seen[0] == seen[2] and seen[0] == first(b, 0) and seen[1] == first(b, 1)  # any order, any env
        if threads:  # envs reset in threads at once draw from their own streams
            with ThreadPoolExecutor(len(envs)) as pool:
                together = list(pool.map(first, envs, [3, 4, 3, 4]))
            assert together == [first(a, 3), first(a, 4)] * 2
    finally:
        for e in envs:
            e.close()


def test_the_shared_helpers_by_hand():
    assert LibraryEnv.plain_info({"n": 1, "word": "x", "board": [1], "none": None}) == {"n": 1, "word": "x"}
    assert LibraryEnv.plain_info("not a dict") == {}
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"text": "2+2?"}]}]
    assert (
        LibraryEnv.render_messages(messages, tools=[{"name": "calc"}])
        == 'Tools: [{"name": "calc"}]\n\nBe brief.\n\n2+2?'
    )
    assert bisection(1, 20, []) == 10 and bisection(1, 20, [("lower", 10), ("higher", 4)]) == 7


@pytest.mark.skipif(not installed("gem"), reason="pip install 'lmgym[gem]'")
def test_a_library_error_names_the_env_and_the_action(monkeypatch):
    env = gym.make("lmgym/GEM-v0", env_id="game:GuessTheNumber-v0-easy")
    env.reset(seed=0)
    monkeypatch.setattr(env.unwrapped.gem, "step", lambda text: 1 / 0)
    with pytest.raises(
        LibraryError, match=r"GEM env 'game:GuessTheNumber-v0-easy' raised ZeroDivisionError on the action"
    ):
        env.step(env.unwrapped.tokenizer.encode("\\boxed{5}"))
    env.close()
