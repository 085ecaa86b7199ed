"""The text worlds (TextWorld, TextWorld Express, ScienceWorld) and skyrl-gym under gym.make: the
env contract, the oracle wins, and each step's reward is the library's own score change."""

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import lmgym
from lmgym.compat import LibraryError

pytestmark = pytest.mark.timeout(1800)  # a loaded 2-core CI machine: bound by work, not by speed


def needs(module, extra, java=False):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install 'lmgym[{extra}]'")
    if java and shutil.which("java") is None:
        pytest.skip("no java on the PATH: apt install openjdk-17-jre-headless")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache dir for the module: each TextWorld game is made once (3-8 s) and shared."""
    path = tmp_path_factory.mktemp("lmgym-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMGYM_CACHE", str(path))
        yield path


def play_oracle(env, seed):
    """The oracle's episode: (commands, rewards, last info)."""
    tok = env.unwrapped.tokenizer
    env.reset(seed=seed)
    commands, rewards = [], []
    for _ in range(60):
        command = env.unwrapped.oracle()
        _, reward, terminated, truncated, info = env.step(np.array(tok.encode(command + "\n")))
        commands.append(command)
        rewards.append(reward)
        if terminated or truncated:
            return commands, rewards, info
    raise AssertionError("the oracle did not finish")


def check_contract(env_id, **kwargs):
    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing a user cannot act on
        warnings.simplefilter("ignore", ResourceWarning)  # the libraries' own cleanup (ScienceWorld's temp dir)
        check_env(env.unwrapped, skip_render_check=True)
    assert env.reset(seed=7)[0] == env.reset(seed=7)[0]
    return env


def test_textworld_game_is_made_once_and_played_to_a_win(cache):
    needs("textworld", "textworld")
    home = Path.home() / "Inform"
    existed = home.exists()
    env = check_contract("lmgym/TextWorld-v0", challenge="tw-simple", games=1)
    obs, info = env.reset(seed=0)
    assert "$$" not in obs and obs.endswith("> ") and info["max_score"] > 0
    commands, rewards, last = play_oracle(env, 0)
    assert last["won"] and last["correct"] and sum(rewards) == last["max_score"]
    games = list((cache / "textworld").glob("*.z8"))
    assert len(games) == 1 and (cache / "textworld" / "Inform").is_dir()  # Inform's home: in the cache
    assert home.exists() == existed  # nothing in the user's home

    import textworld  # the library's own scores for the same commands: rewards are their changes

    game = textworld.start(str(games[0]), request_infos=textworld.EnvInfos(max_score=True))
    game.reset()
    scores = [game.step(command)[1] for command in commands]
    assert rewards == list(np.diff([0, *scores]).astype(float))
    game.close()
    before = os.stat(games[0]).st_mtime
    env.reset(seed=1)  # the same game again (games=1): from the cache, not made again
    assert os.stat(games[0]).st_mtime == before
    env.close()


def test_textworld_in_sync_and_async_vector_envs(cache):
    needs("textworld", "textworld")
    for mode in ("sync", "async"):
        envs = gym.make_vec("lmgym/TextWorld-v0", num_envs=2, vectorization_mode=mode, challenge="tw-simple", games=1)
        obs, _ = envs.reset(seed=[0, 0])
        assert obs[0] == obs[1]
        tok = lmgym.ByteTokenizer()
        _, rewards, *_ = envs.step((np.array(tok.encode("look\n")), np.array(tok.encode("inventory\n"))))
        assert list(rewards) == [0.0, 0.0]
        envs.close()


WORLDS = [
    ("lmgym/TextWorldExpress-v0", "textworld_express", "textworld", True, {"game": "coin"}),
    ("lmgym/ScienceWorld-v0", "scienceworld", "scienceworld", True, {"task": "find-living-thing"}),
    ("lmgym/SkyRL-v0", "skyrl_gym", "skyrl", False, {}),
]


@pytest.mark.parametrize(("env_id", "module", "extra", "java", "kwargs"), WORLDS, ids=[w[0] for w in WORLDS])
def test_worlds_in_vector_envs_take_any_action(env_id, module, extra, java, kwargs):
    """Sync and async vector envs give each seed's first observation; hostile actions (bytes that
    are not UTF-8, a 200-digit line, nothing) stay a string observation and a finite reward."""
    needs(module, extra, java)
    tok = lmgym.ByteTokenizer()
    first = gym.make(env_id, **kwargs).reset(seed=5)[0]
    hostile = [np.full(64, 0xFF), np.array(tok.encode("9" * 200)[:64]), np.array([], dtype=np.int64)]
    for mode in ("sync", "async"):
        envs = gym.make_vec(env_id, num_envs=3, vectorization_mode=mode, **kwargs)
        obs, _ = envs.reset(seed=[5, 5, 6])
        assert obs[0] == obs[1] == first
        obs, rewards, *_ = envs.step(tuple(hostile))
        assert all(isinstance(o, str) for o in obs) and np.isfinite(rewards).all()
        envs.close()


def test_no_action_crashes_the_game_process(cache, capfd):
    """jericho's interpreter runs in this process and copied a command into a fixed buffer: 64
    tokens of U+FFFD (192 bytes) once crashed pytest itself. Commands are ASCII, 100 characters."""
    needs("textworld", "textworld")
    env = gym.make("lmgym/TextWorld-v0", challenge="tw-simple", games=1, max_action_tokens=512)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    interpreter = np.array(list(b"\\xyz"))  # a line frotz itself reads (and prints to stdout about)
    for action in [
        np.full(512, 0xFF),
        np.array(list(b"x" * 512)),
        interpreter,
        *(rng.integers(0, 256, 512) for _ in range(20)),
    ]:
        obs, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(obs, str) and reward == 0.0
        if terminated or truncated:
            env.reset(seed=0)
    env.close()
    assert "FROTZ" not in capfd.readouterr().out


def test_textworld_settings_are_checked_before_a_game_is_made(cache):
    needs("textworld", "textworld")
    with pytest.raises(ValueError, match="rewards"):
        gym.make("lmgym/TextWorld-v0", challenge="tw-simple", options={"rewards": "lots"})
    with pytest.raises(ValueError, match="tw-simple"):
        gym.make("lmgym/TextWorld-v0", challenge="tw-simpel")


def test_textworld_express_contract_and_rewards():
    needs("textworld_express", "textworld", java=True)
    env = check_contract("lmgym/TextWorldExpress-v0", game="coin", game_params={"numLocations": 3})
    commands, rewards, last = play_oracle(env, 3)
    assert last["won"] and sum(rewards) == pytest.approx(1.0)
    from textworld_express import TextWorldExpressEnv  # the library's scores for the same game and commands

    seed = int(np.random.default_rng(3).integers(2**31)) % 10**6  # the game seed the env's RNG draws
    twx = TextWorldExpressEnv(envStepLimit=100)
    twx.load(gameName="coin", gameParams="numLocations=3")
    _, first = twx.reset(seed=seed, gameFold="train", generateGoldPath=True)
    scores = [float(first["score"])] + [float(twx.step(c)[3]["score"]) for c in commands]
    assert rewards == pytest.approx(list(np.diff(scores)))
    env.close()


def test_scienceworld_contract_and_rewards():
    needs("scienceworld", "scienceworld", java=True)
    env = check_contract("lmgym/ScienceWorld-v0", task="find-living-thing", split="dev")
    obs, info = env.reset(seed=0)
    commands, rewards, last = play_oracle(env, 0)
    assert last["won"] and last["score"] == 100
    assert sum(rewards) == pytest.approx((100 - info["score"]) / 100)  # the score's changes over 100
    assert any(0 < r < 1 for r in rewards[:-1])  # it moves on subgoals: credit before the last turn
    with pytest.raises(ValueError, match="find-living-thing"):
        gym.make("lmgym/ScienceWorld-v0", task="find-living-thng")
    env.close()
    long = gym.make("lmgym/ScienceWorld-v0", task="find-non-living-thing")
    long.reset(seed=3)
    command = "move book (the foundations of the origin of species) to " + "yellow " * 12 + "box"  # gold: 141
    action = np.array(long.unwrapped.tokenizer.encode(command + "\n"))
    assert long.action_space.contains(action) and long.step(action)[4]["command"] == command  # reaches it whole
    jvm = long.unwrapped.sw._gateway.java_process.pid  # the env's JVM got the heap cap, this process did not
    assert "JAVA_TOOL_OPTIONS=-Xmx512m" in Path(f"/proc/{jvm}/environ").read_bytes().decode(errors="replace")
    assert "-Xmx" not in os.environ.get("JAVA_TOOL_OPTIONS", "")
    long.close()


def test_heap_limit_sets_the_jvm_heap_unless_the_user_did(monkeypatch):
    from lmgym.compat.worlds import heap_limit

    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    with heap_limit("1g"):
        assert os.environ["JAVA_TOOL_OPTIONS"] == "-Xmx1g"
    assert "JAVA_TOOL_OPTIONS" not in os.environ
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dfile.encoding=UTF-8")
    with heap_limit("1g"):
        assert os.environ["JAVA_TOOL_OPTIONS"] == "-Dfile.encoding=UTF-8 -Xmx1g"
    assert os.environ["JAVA_TOOL_OPTIONS"] == "-Dfile.encoding=UTF-8"
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xmx4g")
    with heap_limit("1g"), heap_limit(None):
        assert os.environ["JAVA_TOOL_OPTIONS"] == "-Xmx4g"  # the user's own heap wins


def test_a_library_failure_is_one_line(cache, monkeypatch):
    needs("textworld", "textworld")
    env = gym.make("lmgym/TextWorld-v0", challenge="tw-simple", games=1)
    env.reset(seed=0)

    def broken(command):
        raise OSError("the game process died")

    monkeypatch.setattr(env.unwrapped.game, "step", broken)
    with pytest.raises(LibraryError, match="TextWorld 'tw-simple' game raised OSError on the action 'look'"):
        env.step(np.array(env.unwrapped.tokenizer.encode("look\n")))
    env.close()


# ---------------------------------------------------------------------------------- skyrl-gym
def make_db(root):
    """A spider-layout SQLite file, as skyrl-gym's text2sql reads one."""
    folder = root / "spider" / "database" / "shop"
    folder.mkdir(parents=True)
    db = sqlite3.connect(folder / "shop.sqlite")
    db.execute("CREATE TABLE items (name TEXT, price INTEGER)")
    db.executemany("INSERT INTO items VALUES (?, ?)", [("pen", 3), ("book", 12), ("cup", 5)])
    db.commit()
    db.close()
    return folder / "shop.sqlite"


def test_skyrl_text2sql_on_a_local_sqlite_file(tmp_path):
    needs("skyrl_gym", "skyrl")
    db = make_db(tmp_path)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"How many items cost more than {n}? Table items(name, price)."}],
            "db_id": "shop",
            "data": "spider",
            "reward_spec": {"ground_truth": f"SELECT count(*) FROM items WHERE price > {n}"},
        }
        for n in (2, 4, 10)
    ]
    kwargs = {"env": "text2sql", "tasks": rows, "env_config": {"db_path": str(tmp_path)}}
    env = check_contract("lmgym/SkyRL-v0", **kwargs)
    tok = env.unwrapped.tokenizer
    obs, _ = env.reset(seed=1)
    assert "How many items" in obs
    obs, reward, terminated, _, _ = env.step(np.array(tok.encode("<think>look</think><sql>SELECT * FROM items</sql>")))
    assert "pen" in obs and reward == 0 and not terminated  # a tool turn: the query's rows come back
    _, reward, terminated, _, info = env.step(np.array(tok.encode(env.unwrapped.oracle())))
    assert reward == 1.0 and terminated and info["correct"]
    env.reset(seed=1)
    _, reward, *_ = env.step(np.array(tok.encode("<think>x</think><solution>SELECT 0</solution>")))
    assert reward == 0.0
    before = db.read_bytes()
    env.reset(seed=2)
    env.step(np.array(tok.encode("<think>x</think><sql>DROP TABLE items</sql>")))
    assert db.read_bytes() == before  # rolled back: the model's SQL leaves the file as it was
    env.close()


def test_skyrl_per_turn_rewards_land_on_their_turns():
    needs("skyrl_gym", "skyrl")
    env = check_contract("lmgym/SkyRL-v0")  # gsm8k_multi_turn on its eight word problems
    tok = env.unwrapped.tokenizer
    env.reset(seed=0)
    steps = [env.step(np.array(tok.encode(text))) for text in ("#### 0", env.unwrapped.oracle())]
    (_, format_credit, *_), (_, solved, terminated, truncated, _) = steps
    assert 0 < format_credit < 0.1 and solved == 1.0 and terminated and not truncated
    env.reset(seed=0)
    ends = [env.step(np.array(tok.encode("no idea")))[2:4] for _ in range(3)]
    assert ends[-1] == (False, True)  # out of turns, unsolved: truncated


def test_skyrl_takes_a_users_own_env_class():
    needs("skyrl_gym", "skyrl")
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

    class Shout(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.max_turns = 2

        def step(self, action):
            self.turns += 1
            done = action.isupper() or self.turns >= self.max_turns
            louder = [{"role": "user", "content": "LOUDER"}]
            return BaseTextEnvStepOutput(observations=louder, reward=float(action.isupper()), done=done, metadata={})

    env = gym.make("lmgym/SkyRL-v0", env=Shout, tasks=[{"prompt": "Shout hi."}], oracle=lambda row: "HI")
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs == "Shout hi.\n"
    tok = env.unwrapped.tokenizer
    assert env.step(np.array(tok.encode("hi")))[:3] == ("LOUDER\n", 0.0, False)
    assert env.step(np.array(tok.encode(env.unwrapped.oracle())))[1:3] == (1.0, True)


# ----------------------------------------------------------------------------- the commands
def test_lmgym_train_on_textworld_end_to_end(cache, tmp_path):
    needs("textworld", "textworld")
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable, "-m", "lmgym.cli", "train", "lmgym/TextWorld-v0",
            "--env-arg", "challenge=tw-simple", "--env-arg", "games=1", "--env-arg", "max_episode_steps=4",
            "--episodes", "4", "--num-envs", "4", "--episodes-per-update", "4", "--mini-batch-size", "4",
            "--warmstart-steps", "0", "--eval-episodes", "2", "--credit", "episode", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=1500, env={**os.environ, "LMGYM_CACHE": str(cache)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "model").is_dir() and (out / "metrics.csv").is_file()
    assert json.loads((out / "summary.json").read_text())["credit"] == "episode"
    listed = subprocess.run([sys.executable, "-m", "lmgym.cli", "list"], capture_output=True, text=True, timeout=600)
    for env_id in ("lmgym/TextWorld-v0", "lmgym/TextWorldExpress-v0", "lmgym/ScienceWorld-v0", "lmgym/SkyRL-v0"):
        assert env_id in listed.stdout
    tasks = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "list", "--tasks", "textworld"], capture_output=True, text=True, timeout=600
    )
    assert tasks.stdout.split()[:2] == ["tw-simple", "tw-coin_collector"] and "express:coin" in tasks.stdout
