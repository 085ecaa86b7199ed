"""lmgym view: the data the report reads, its colour scale, escaping, and the page in a real browser."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.recording import EPISODES_FILE
from lmgym.agents.records import episode_record, token_pieces
from lmgym.agents.trajectories import Episode
from lmgym.agents.warmstart import tiny_gpt2
from lmgym.report import build_report, color_scale, diverging_color, read_jsonl, report_data, script_json

ARTIFACTS = Path(os.environ.get("LMGYM_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))
TAGS = ["<calc>", "</calc>", "<answer>", "</answer>", "<result>", "</result>"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A short real run on Calculator-v0 with learn's defaults for recording."""
    torch.manual_seed(0)
    tokenizer = lmgym.ByteTokenizer(TAGS)
    config = PPOConfig(
        episodes_per_update=16, mini_batch_size=8, learning_rate=1e-3, run={"record_episodes": 4}, seed=0
    )
    agent = PPOAgent(tiny_gpt2(tokenizer, n_layer=1, n_embd=32), tokenizer, config=config)
    envs = gym.make_vec("lmgym/Calculator-v0", num_envs=8, tokenizer=tokenizer, min_digits=1, max_digits=1)
    path = tmp_path_factory.mktemp("run")
    agent.learn(envs, total_episodes=48, log_dir=path, progress_bar=False)
    return path


def test_learn_keeps_a_bounded_number_of_episodes_at_several_points(run_dir):
    records, _ = read_jsonl(run_dir / EPISODES_FILE)
    by_update = {}
    for r in records:
        by_update.setdefault(r["update"], []).append(r["kind"])
    assert sorted(by_update) == [0, 1, 2, 3]  # before training, then each of the 3 updates (every=1 here)
    assert by_update[0] == ["held-out"] * 4  # nothing trained yet
    assert all(sorted(kinds) == ["held-out"] * 4 + ["train"] * 4 for u, kinds in by_update.items() if u)
    held_out_seeds = {
        u: [r["seed"] for r in records if r["update"] == u and r["kind"] == "held-out"] for u in by_update
    }
    assert len({tuple(s) for s in held_out_seeds.values()}) == 1  # the same seeds each time: before vs after


def test_a_record_round_trips_the_episode(run_dir):
    tokenizer = lmgym.ByteTokenizer(TAGS)
    for r in read_jsonl(run_dir / EPISODES_FILE)[0]:
        actions = sum(r["mask"])
        assert len(r["text"]) == len(r["mask"]) and len(r["turn_ends"]) == len(r["rewards"])
        assert all(r["mask"][t] for t in r["turn_ends"]) and sum(r["rewards"]) == r["return"]
        assert r["env"] == "lmgym/Calculator-v0" and r["text"][0] + r["text"][1] == "Wh"
        for key in ("logprob", "value", "kl", "adv"):
            assert len(r[key]) == actions, key
        assert all(lp <= 0 for lp in r["logprob"])
        if r["kind"] == "train":  # trained tokens: the ratio after the update, near 1
            assert len(r["ratio"]) == actions and all(0.2 < x < 5 for x in r["ratio"])
        else:
            assert r["ratio"] is None
        assert tokenizer.encode("".join(r["text"]))[:4] == tokenizer.encode("What")


def test_token_pieces_join_into_the_decoded_text(hf_tokenizer_dir):
    tok = lmgym.as_tokenizer(hf_tokenizer_dir)
    ids = tok.encode("What is 3*4? <answer>12</answer>")
    assert "".join(token_pieces(tok, ids)) == tok.decode(ids)


def test_episode_record_values_sit_on_action_tokens():
    e = Episode([1, 2, 3, 4, 5], [0, 1, 1, 0, 1], turn_ends=[2, 4], rewards=[0.0, 1.0], seed=3)
    e.logprobs = e.ref_logprobs = e.values = torch.tensor([0, -1.0, -2.0, 0, -3.0])
    r = episode_record(e, lmgym.ByteTokenizer(), update=5, kind="train", advantages=e.values)
    assert r["logprob"] == [-1.0, -2.0, -3.0] and r["kl"] == [0.0, 0.0, 0.0] and r["adv"] == [-1.0, -2.0, -3.0]
    assert r["mask"] == [0, 1, 1, 0, 1] and r["update"] == 5 and r["return"] == 1.0 and r["ratio"] is None


def test_the_colour_scale_is_diverging_and_saturates():
    assert diverging_color(0.0, 2.0) == "#f7f7f7"
    assert diverging_color(2.0, 2.0) == diverging_color(50.0, 2.0) == "#0571b0"
    assert diverging_color(-2.0, 2.0) == "#ca0020"
    half = diverging_color(1.0, 2.0)
    assert half not in ("#f7f7f7", "#0571b0") and int(half[5:7], 16) > int(half[1:3], 16)  # bluish
    assert diverging_color(None, 1.0) is None and diverging_color(float("nan"), 1.0) is None
    assert color_scale([{"adv": [0.1] * 95 + [100.0] * 5}]) == 100.0
    assert color_scale([{"adv": [0.1] * 99 + [100.0]}]) == 0.1  # one outlier does not wash out the rest
    assert color_scale([]) == 1.0


def test_model_text_cannot_inject_html():
    evil = "</script><script>window.pwned=1</script><img src=x onerror=alert(1)><!--"
    e = Episode([0, 1], [0, 1], turn_ends=[1], rewards=[1.0])
    record = {**episode_record(e, lmgym.ByteTokenizer(), 0, "train"), "text": ["Q", evil]}
    html = script_json(report_data([record]))
    assert "<" not in html and ">" not in html and "</script" not in html
    assert json.loads(html)["episodes"][0]["text"][1] == evil


def test_view_writes_a_self_contained_report(run_dir):
    result = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "view", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    html = (run_dir / "report.html").read_text()
    assert "DATA = {" in html and not re.search(r"(src|href)=\"https?://", html)  # nothing fetched
    bad = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "view", str(run_dir / "nope")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "no run directory" in bad.stderr


def test_trajectories_to_html(tmp_path):
    tokenizer = lmgym.ByteTokenizer(TAGS)
    agent = PPOAgent(tiny_gpt2(tokenizer, n_layer=1, n_embd=16), tokenizer, config=PPOConfig(seed=0))
    batch = agent.collect(gym.make("lmgym/Calculator-v0", tokenizer=tokenizer), num_episodes=2)
    agent.update(batch)
    path = batch.to_html(tmp_path / "batch.html", advantages=agent.last_update.advantages)
    data = json.loads(re.search(r"const DATA = (.*);\n", path.read_text()).group(1))
    assert len(data["episodes"]) == 2 and all(len(e["colors"]) == sum(e["mask"]) for e in data["episodes"])
    assert any(c is not None for c in data["episodes"][0]["colors"])  # advantages from the update


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.timeout(600)
def test_the_report_renders_in_a_real_browser(run_dir):
    """Also makes the README's screenshot: LMGYM_REPORT_RUN=runs/train LMGYM_TEST_ARTIFACTS=docs
    python -m pytest tests/test_report.py -k browser (a real `lmgym train` run instead of the tiny one)."""
    run_dir = Path(os.environ.get("LMGYM_REPORT_RUN", run_dir))
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium when it can)")
    report, _ = build_report(run_dir)
    errors = []
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=flags)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)  # a first start on a fresh machine builds Chromium's font cache
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(report.as_uri())
        records, _ = read_jsonl(run_dir / EPISODES_FILE)
        assert page.locator(".episode").count() == len(records)
        assert page.locator(".chart svg polyline.series").count() >= 6  # success, return, tool rate, KL, ...
        assert page.locator("svg[data-metric='success'] polyline[data-key='env/success']").count() == 1
        page.locator(".episode .tok").nth(2).hover()
        tip = page.locator("#tooltip")
        assert tip.is_visible() and "adv" in tip.inner_text() and "logprob" in tip.inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"))
        page.select_option("#f-kind", "held-out")
        assert page.locator(".episode").count() == sum(r["kind"] == "held-out" for r in records)
        page.select_option("#f-kind", "")
        page.fill("#f-search", "zzz-not-in-any-transcript")
        assert page.locator(".episode").count() == 0
        page.fill("#f-search", "")
        page.select_option("#f-kind", "held-out")
        seed = page.locator(".episode .head a").first
        seed_text = seed.inner_text()
        seed.click()  # one held-out task at every recorded update: before and after
        heads = page.locator(".episode .head").all_inner_texts()
        assert heads and all(seed_text in h for h in heads)
        page.locator(".episode .tok").last.hover()
        assert tip.is_visible() and tip.bounding_box()["y"] + tip.bounding_box()["height"] <= 900  # in view
        page.screenshot(path=str(ARTIFACTS / "report_seed.png"))
        browser.close()
    assert errors == []
    assert all((ARTIFACTS / name).stat().st_size > 10_000 for name in ("report.png", "report_seed.png"))


def test_token_pieces_cost_is_linear_in_the_episode():
    class Counting(lmgym.ByteTokenizer):
        calls = 0

        def decode(self, ids):
            Counting.calls += 1
            return super().decode(ids)

    tok = Counting()
    ids = tok.encode("abcdefgh" * 50)  # 400 tokens
    pieces = token_pieces(tok, ids)
    assert "".join(pieces) == tok.decode(ids) and len(pieces) == 400
    assert Counting.calls <= 2 * 400 + 2  # two short decodings a token and one check; by prefix: 400 of length 1..400
