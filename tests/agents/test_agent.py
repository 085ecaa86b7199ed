from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from helpers import CharTokenizer, tiny_model

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.generation import cut_action
from lmgym.agents.policy import token_logprobs
from lmgym.core import LMEnv
from lmgym.tokenizers import ByteTokenizer


def byte_agent(seed=0, **config):
    model = tiny_model(258, 256, seed=seed, n_layer=1, n_embd=32)
    return PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(seed=seed, **config))


class RecordingEngine:
    """Wraps the agent's engine and remembers every action it generated: the one door for how
    tokens are sampled (what overriding ``PPOAgent.generate`` did in earlier releases)."""

    def __init__(self, engine):
        self.engine, self.generated = engine, []

    def __getattr__(self, name):  # exact, sync_weights, reset, close: the wrapped engine's
        return getattr(self.engine, name)

    def generate(self, contexts, stop_strings, max_new_tokens, keys=None, **kwargs):
        actions = self.engine.generate(contexts, stop_strings, max_new_tokens, keys=keys, **kwargs)
        self.generated += [list(a) for a in actions]
        return actions


def recording_agent(config=None):
    agent = PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=32), tokenizer=ByteTokenizer(), config=config)
    agent.engine = RecordingEngine(agent.engine)
    return agent


class TwoTurnEnv(LMEnv):
    """Two model calls; env text between them; reward after the second."""

    max_action_tokens = 4

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return "Q:", {}

    def step_text(self, text):
        self.turn += 1
        if self.turn == 1:
            self.first = text
            return " ok, again:", 0.0, False, False, {}
        return "", float(len(self.first)), True, False, {}


def test_collect_stores_sampled_tokens_and_masks_env_text():
    agent = recording_agent()
    batch = agent.collect(TwoTurnEnv(), num_episodes=3)
    generated = agent.engine.generated
    assert len(batch) == 3 and len(generated) == 6
    tok = ByteTokenizer()
    for i, e in enumerate(batch):
        first, second = generated[2 * i], generated[2 * i + 1]
        expected = tok.encode("Q:") + first + tok.encode(" ok, again:") + second
        assert e.tokens.tolist() == expected
        mask = [False] * 2 + [True] * len(first) + [False] * 11 + [True] * len(second)
        assert e.action_mask.tolist() == mask
        assert e.turn_ends == [1 + len(first), len(expected) - 1]
        assert e.rewards == [0.0, float(len(tok.decode(first)))]
        assert e.terminated and not e.truncated
        assert (e.logprobs[~e.action_mask] == 0).all() and (e.logprobs[e.action_mask] < 0).all()


def test_logprobs_and_values_match_a_plain_forward_pass():
    agent = byte_agent(rollout={"generation_kwargs": {"temperature": 0.7}})
    batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=4)
    agent.score(batch)  # fills the reference log-probs (the engine gave the others)
    model = agent.model
    for e in batch:
        logits = model(e.tokens[None]).logits
        expected = token_logprobs(logits, e.tokens[None], temperature=0.7)[0]
        assert torch.allclose(e.logprobs[e.action_mask], expected[e.action_mask], atol=1e-5)
        assert torch.allclose(e.ref_logprobs, e.logprobs, atol=1e-5)  # the ref is a copy
        hidden = model(e.tokens[None], output_hidden_states=True).hidden_states[-1]
        values = agent.policy.value_head(hidden)[0, :, 0]
        positions = e.action_mask.nonzero()[:, 0]
        assert torch.allclose(e.values[positions], values[positions - 1], atol=1e-6)


def test_stop_strings_end_turns_even_mid_token():
    tok = ByteTokenizer(added_tokens=["c>!!"])
    ids = tok.encode("1+1</cal") + [tok.encode("c>!!")[0]] + tok.encode("more")
    cut = cut_action(ids, tok, ["</calc>"], 64)
    assert cut == ids[:-4] and tok.decode(cut) == "1+1</calc>!!"  # the whole token is kept
    assert cut_action(tok.encode("ab") + [256] + tok.encode("cd"), tok, [], 64) == tok.encode("ab") + [256]
    assert cut_action(tok.encode("abcdef"), tok, ["</calc>"], 3) == tok.encode("abc")


def test_generation_stops_at_env_stop_strings():
    agent = recording_agent(PPOConfig(rollout={"generation_kwargs": {"do_sample": False}}))
    out = agent.engine.generate([ByteTokenizer().encode("What")], stop_strings=[], max_new_tokens=12)
    text = ByteTokenizer().decode(out[0])
    stop = text[1:3]  # a string greedy decoding is sure to produce
    cut = agent.engine.generate([ByteTokenizer().encode("What")], stop_strings=[stop], max_new_tokens=12)
    assert ByteTokenizer().decode(cut[0]).endswith(stop) and len(cut[0]) <= 3


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_vector_env_either_autoreset_mode(mode):
    envs = gym.make_vec(
        "lmgym/Calculator-v0", num_envs=4, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )
    batch = byte_agent().collect(envs, num_episodes=6)
    assert len(batch) == 6 and len({e.seed for e in batch}) == 6
    for e in batch:
        assert e.terminated or e.truncated
        assert len(e.rewards) == len(e.turn_ends) <= 4


def test_seeds_and_groups():
    agent = byte_agent(estimator="grpo", group_size=2)
    envs = gym.make_vec("lmgym/Calculator-v0", num_envs=4)
    batch = agent.collect(envs, num_episodes=4, seeds=[11, 12])
    assert [e.seed for e in batch] == [11, 11, 12, 12] and [e.group for e in batch] == [0, 0, 1, 1]
    first_prompts = [e.tokens[:12].tolist() for e in batch]
    assert first_prompts[0] == first_prompts[1] and first_prompts[0] != first_prompts[2]
    with pytest.raises(ValueError, match="group_size"):
        agent.collect(gym.make_vec("lmgym/Calculator-v0", num_envs=3), num_episodes=4)


def test_tokenizer_mismatch_is_a_clear_error():
    agent = byte_agent()
    env = gym.make("lmgym/Echo-v0", tokenizer=ByteTokenizer(["<x>"]))
    with pytest.raises(ValueError, match="does not match the agent's"):
        agent.collect(env, 1)
    with pytest.raises(ValueError, match="token embeddings"):
        PPOAgent(tiny_model(100, 0, n_layer=1, n_embd=32), tokenizer=ByteTokenizer())
    with pytest.raises(ValueError, match="no tokenizer"):
        PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=32))


def test_plain_gymnasium_env_is_enough():
    class Plain(gym.Env):
        """Not an LMEnv: only the Gym API, a tokenizer attribute and token actions."""

        def __init__(self):
            self.tokenizer = ByteTokenizer()
            self.action_space = lmgym.TokenSequence(258, 5)
            self.observation_space = lmgym.AnyText(100)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return "go", {}

        def step(self, action):
            return "", float(len(action)), True, False, {}

    batch = byte_agent().collect(Plain(), num_episodes=2)
    assert [e.return_ for e in batch] == [float(e.num_action_tokens) for e in batch]


def test_step_with_tool_masked_responses():
    agent = byte_agent(kl_coef=0.0)
    tok = ByteTokenizer()
    query = torch.tensor(tok.encode("Q: 2+2?"))
    response = torch.tensor(tok.encode("<calc>2+2</calc><result>4</result><answer>4</answer>"))
    mask = torch.ones(len(response), dtype=torch.long)
    start = len(tok.encode("<calc>2+2</calc>"))
    mask[start : start + len(tok.encode("<result>4</result>"))] = 0
    before = agent.model(torch.cat([query, response])[None]).logits.detach()
    metrics = agent.step([query, query], [response, response[:5]], [1.0, 0.0], [mask, mask[:5]])
    assert {"loss/policy", "loss/value", "policy/approx_kl", "policy/clipfrac", "env/return"} <= set(metrics)
    assert metrics["env/return"] == 0.5
    after = agent.model(torch.cat([query, response])[None]).logits.detach()
    assert not torch.allclose(before, after)
    with pytest.raises(ValueError, match="queries"):
        agent.step([query], [response, response], [1.0])


def measure(agent, envs, n=64):
    return float(np.mean(agent.collect(envs, n).returns))


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["gae", "grpo"])
def test_learns_echo(estimator):
    tok = CharTokenizer()
    agent = PPOAgent(
        tiny_model(tok.vocab_size, tok.eos_token_id),
        tokenizer=tok,
        config=PPOConfig(learning_rate=1e-3, seed=0, kl_coef=0.0, estimator=estimator, episodes_per_update=32),
    )
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=16, length=2, max_action_tokens=3, tokenizer=tok)
    before = measure(agent, envs)
    agent.learn(envs, total_episodes=32 * 25, progress_bar=False)
    after = measure(agent, envs)
    assert after > before + 0.1, (before, after)


@pytest.mark.slow
def test_the_overlapped_update_learns_from_batches_one_version_stale():
    tok = CharTokenizer()
    config = PPOConfig(
        learning_rate=1e-3, seed=0, kl_coef=0.0, episodes_per_update=32, rollout={"overlap_update": True}
    )
    agent = PPOAgent(tiny_model(tok.vocab_size, tok.eos_token_id), tokenizer=tok, config=config)
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=16, length=2, max_action_tokens=3, tokenizer=tok)
    seen = []

    class Versions:
        def on_collect(self, agent, batch):
            seen.append((agent.num_updates, {int(e.versions[e.action_mask].max()) for e in batch}))

    before = measure(agent, envs)
    agent.learn(envs, total_episodes=32 * 25, callbacks=[Versions()], progress_bar=False)
    after = measure(agent, envs)
    assert after > before + 0.1, (before, after)
    assert seen[0] == (0, {0}) and all(versions == {n - 1} for n, versions in seen[1:])  # sampled one update before
    assert agent.engine_version == agent.num_updates  # the engine has the last weights again


def test_an_episode_staler_than_max_staleness_is_refused():
    tok = CharTokenizer()
    agent = PPOAgent(tiny_model(tok.vocab_size, tok.eos_token_id), tokenizer=tok, config=PPOConfig(seed=0))
    batch = agent.collect(gym.make("lmgym/Echo-v0", tokenizer=tok), num_episodes=2)
    agent.num_updates = 2  # as if two updates ran since the batch was sampled
    with pytest.raises(ValueError, match="an episode sampled 2 updates ago, more than max_staleness=1"):
        agent.update(batch)


def solved_task_run(agent, envs):
    """Greedy success on 128 held-out seeds before RL and after every second of 12 updates."""
    from lmgym.agents.evaluation import evaluate

    curve = [evaluate(agent, envs, 128)[0]["success"]]

    def every_second(agent, metrics):
        if agent.num_updates % 2 == 0:
            curve.append(evaluate(agent, envs, 128)[0]["success"])

    agent.learn(envs, total_episodes=64 * 12, callbacks=[every_second], progress_bar=False)
    return curve


@pytest.mark.slow
def test_rl_keeps_a_solved_task_solved_at_the_defaults():
    """The default model, warm-started until it solves Echo-v0, keeps solving it through RL. With
    the settings before the fix (advantages scaled up from a spread of 1e-2, the value head
    starting at 0) the same run fell from 100% to about 50% (measured here as the baseline)."""
    import copy

    from lmgym.agents.warmstart import WarmStartConfig

    kwargs = {"length": 5, "alphabet_size": 8}
    warm = WarmStartConfig(steps=300, seed=0)
    fixed = PPOAgent.default("lmgym/Echo-v0", env_kwargs=kwargs, warmstart=warm, use_cache=False)
    before_fix = PPOAgent(
        copy.deepcopy(fixed.model), fixed.tokenizer, config=PPOConfig.from_dict(fixed.config.to_dict())
    )
    before_fix.config.whiten_min_std = 1e-2
    before_fix.init_value_head = lambda batch: 0.0  # the head starts at 0: no shift
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=32, tokenizer=fixed.tokenizer, **kwargs)
    curve = solved_task_run(fixed, envs)
    baseline = solved_task_run(before_fix, envs)
    # one evaluation may dip (96.1% once a warm start's stale gradients stopped leaking into RL's
    # first step; 91.4% once the warm start was the model a cached one loads; then 100% again each
    # time), no other by more than 5 points; the run before the fix falls by more than 20 points
    assert curve[0] >= 0.98 and sorted(curve)[1] >= curve[0] - 0.05 and curve[-1] >= curve[0] - 0.02, curve
    assert baseline[0] == curve[0] and min(baseline) < curve[0] - 0.2, baseline  # the fix is what holds it
    assert min(curve) > min(baseline) + 0.2, (curve, baseline)


@pytest.mark.slow
def test_fsdp2_over_two_processes_gives_one_process_weights(tmp_path):
    """The update under FSDP2 (``fsdp=True``: ``fully_shard`` on a CPU device mesh, gloo) over two
    ranks, each on the same batch, ends with the weights one process gets, within 1e-5."""
    import os
    import pathlib
    import subprocess
    import sys

    script = str(pathlib.Path(__file__).parent / "scripts" / "fsdp_update.py")
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    runs = {}
    for name, launcher in [("one", []), ("two", ["-m", "torch.distributed.run", "--nproc_per_node", "2"])]:
        (tmp_path / name).mkdir()
        cmd = [sys.executable, *launcher, script, str(tmp_path / name)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = torch.load(tmp_path / name / "weights.pt")
    one, two = runs["one"], runs["two"]
    assert (one["world"], one["type"]) == (1, "PolicyWithValue")
    assert (two["world"], two["type"]) == (2, "FSDPPolicyWithValue")  # sharded, not replicated
    assert one["moved"] > 1e-4  # the update changed the weights
    gap = max((one["state"][k] - two["state"][k]).abs().max().item() for k in one["state"])
    assert gap < 1e-5, gap


class FirstCallEnv(LMEnv):
    """Reward depends only on the first call (its count of 'a'), and arrives after the second."""

    max_action_tokens = 3

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.calls = []
        return "Echo:", {}

    def step_text(self, text):
        self.calls.append(text)
        if len(self.calls) == 1:
            return "\nEcho:", 0.0, False, False, {}
        return "", self.calls[0].count("a") / 3, True, False, {}


@pytest.mark.slow
def test_multi_call_credit_trains_the_first_call():
    tok = CharTokenizer()
    agent = PPOAgent(
        tiny_model(tok.vocab_size, tok.eos_token_id, seed=1),
        tokenizer=tok,
        config=PPOConfig(learning_rate=1e-3, seed=1, kl_coef=0.0, episodes_per_update=32),
    )
    envs = gym.vector.SyncVectorEnv([lambda: FirstCallEnv(tokenizer=tok)] * 16, autoreset_mode=AutoresetMode.SAME_STEP)

    before = measure(agent, envs)  # the return is the first call's share of 'a'
    agent.learn(envs, total_episodes=32 * 20, progress_bar=False)
    after = measure(agent, envs)
    assert after > before + 0.15, (before, after)


def test_save_load_round_trip(tmp_path):
    agent = byte_agent()
    batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=2)
    agent.update(batch)
    agent.save(tmp_path / "ckpt")
    loaded = PPOAgent.load(tmp_path / "ckpt")
    assert loaded.config == agent.config
    tokens = batch[0].tokens[None]
    assert torch.equal(loaded.model(tokens).logits, agent.model(tokens).logits)
    head = loaded.accelerator.unwrap_model(loaded.policy).value_head
    assert torch.equal(head.weight, agent.accelerator.unwrap_model(agent.policy).value_head.weight)
    from transformers import AutoModelForCausalLM

    assert torch.equal(
        AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")(tokens).logits, agent.model(tokens).logits
    )
    with pytest.raises(FileNotFoundError):
        PPOAgent.load(tmp_path / "nothing")


def test_resume_continues_the_same_run(tmp_path):
    env = gym.make("lmgym/Echo-v0")
    straight = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    straight.learn(env, total_episodes=8, progress_bar=False)

    first = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    first.learn(env, total_episodes=4, checkpoint_dir=tmp_path, progress_bar=False)
    resumed = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    resumed.learn(gym.make("lmgym/Echo-v0"), total_episodes=8, resume_from=tmp_path / "last", progress_bar=False)
    assert resumed.num_episodes == 8 and resumed.num_updates == 2
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


class StopsAtStep(gym.Wrapper):
    """Raises ``KeyboardInterrupt`` at its ``at``-th step: a run stopped in the middle of a collect."""

    def __init__(self, env, at):
        super().__init__(env)
        self.steps, self.at = 0, at

    def step(self, action):
        self.steps += 1
        if self.steps == self.at:
            raise KeyboardInterrupt
        return super().step(action)


def test_a_checkpoint_written_after_a_collect_broke_off_is_the_updates_own(tmp_path):
    straight = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    straight.learn(gym.make("lmgym/Echo-v0"), total_episodes=12, progress_bar=False)

    first = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    with pytest.raises(KeyboardInterrupt):  # in update 2's collect, its samples and seeds half drawn
        first.learn(StopsAtStep(gym.make("lmgym/Echo-v0"), at=6), total_episodes=12, progress_bar=False)
    assert first.num_updates == 1 and first.collect_began is not None
    first.rewind_collect()
    first.save_checkpoint(tmp_path, gym.make("lmgym/Echo-v0"))
    resumed = byte_agent(episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    resumed.learn(gym.make("lmgym/Echo-v0"), total_episodes=12, resume_from=tmp_path / "last", progress_bar=False)
    assert resumed.num_updates == 3
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_learn_logs_and_callbacks(tmp_path):
    seen = []

    class Stopper:
        def on_update(self, agent, metrics):
            seen.append(metrics["env/episodes"])
            return False if len(seen) == 2 else None

    agent = byte_agent(episodes_per_update=2, mini_batch_size=2)
    agent.learn(
        gym.make("lmgym/Echo-v0"),
        total_episodes=100,
        callbacks=[Stopper(), lambda a, m: None],
        log_dir=tmp_path,
        progress_bar=False,
    )
    assert seen == [2, 4]
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"step", "loss/policy", "policy/approx_kl", "env/return", "objective/kl"} <= set(header)
    assert list(tmp_path.glob("tensorboard/**/events.out.tfevents*"))


@pytest.mark.slow
def test_two_process_accelerate_launch_keeps_ranks_in_sync(tmp_path):
    import os
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).parent / "scripts" / "ddp_update.py"
    # accelerate 1.x runs `launch --cpu` as a single process; two CPU processes go through its
    # torchrun launcher with ACCELERATE_USE_CPU (gloo backend).
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "ACCELERATE_USE_CPU": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [(tmp_path / f"rank{i}.txt").read_text().split() for i in range(2)]
    assert all(r[0] == "2" and r[1] == "True" for r in ranks)  # two processes, weights moved
    assert ranks[0][2] == ranks[1][2]  # identical weights after the update
    assert ranks[0][3] != ranks[1][3]  # each rank collected its own episodes


def test_peft_reference_is_the_base_with_adapters_off():
    peft = pytest.importorskip("peft")
    base = tiny_model(258, 256, n_layer=1, n_embd=32)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(learning_rate=1e-2))
    assert agent.ref_model is None  # no copy: the reference is the base model
    batch = agent.collect(gym.make("lmgym/Echo-v0"), 4)
    agent.score(batch)
    assert all(torch.allclose(e.logprobs, e.ref_logprobs, atol=1e-5) for e in batch)  # LoRA starts as a no-op
    query = torch.tensor(ByteTokenizer().encode("Echo: a\n"))
    agent.step([query, query], [torch.tensor([97]), torch.tensor([98])], [1.0, 0.0])
    trained = [n for n, p in agent.policy.named_parameters() if p.requires_grad]
    assert all("lora_" in n or "value_head" in n for n in trained)
    batch = agent.collect(gym.make("lmgym/Echo-v0"), 4)
    agent.score(batch)
    assert any(not torch.allclose(e.logprobs, e.ref_logprobs) for e in batch)


def test_a_peft_model_with_its_own_reference_survives_a_save_and_load(tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    tiny_model(258, 256, n_layer=1, n_embd=32).save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")  # its name_or_path: the base the save names
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    reference = tiny_model(258, 256, n_layer=1, n_embd=32, seed=1)
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), ref_model=reference, config=PPOConfig(learning_rate=1e-2))
    query = torch.tensor(ByteTokenizer().encode("Echo: a\n"))
    agent.step([query, query], [torch.tensor([97]), torch.tensor([98])], [1.0, 0.0])
    agent.save(tmp_path / "saved")
    loaded = PPOAgent.load(tmp_path / "saved")
    assert loaded.is_peft and loaded.ref_model is not None  # adapters on their base, and the reference kept
    for a, b in [(agent.model, loaded.model), (agent.ref_model, loaded.ref_model)]:
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_anneal_lr_goes_linearly_to_zero():
    rates = []
    agent = byte_agent(episodes_per_update=2, mini_batch_size=2, learning_rate=1e-3, anneal_lr=True)
    agent.learn(
        gym.make("lmgym/Echo-v0"),
        total_episodes=8,
        callbacks=[lambda a, m: rates.append(m["optim/learning_rate"])],
        progress_bar=False,
    )
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])


def test_target_kl_stops_the_update_once_the_policy_has_moved_past_it():
    """SB3's target_kl: the first mini-batch steps (its KL is 0), the next one is past 1.5 x a
    tiny target and the update stops there; without it every mini-batch of every epoch steps."""
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=4, vectorization_mode="sync")
    steps = {}
    for target in (None, 1e-6):
        agent = byte_agent(learning_rate=1e-2, mini_batch_size=2, n_epochs=2, target_kl=target)
        batch = agent.collect(envs, 8)
        with mock.patch.object(agent.optimizer, "step", wraps=agent.optimizer.step) as step:
            metrics = agent.update(batch)
        steps[target] = (step.call_count, metrics.get("policy/stopped_at_target_kl"))
    assert steps == {None: (8, None), 1e-6: (1, 1.0)}
    with pytest.raises(ValueError, match="target_kl must be positive"):
        PPOConfig(target_kl=0.0)


def test_a_second_learn_to_the_same_target_says_there_is_nothing_left(capsys):
    agent = byte_agent(episodes_per_update=2, mini_batch_size=2)
    env = gym.make("lmgym/Echo-v0")
    agent.learn(env, total_episodes=4, progress_bar=False)
    assert agent.num_updates == 2 and "nothing left" not in capsys.readouterr().out
    agent.learn(env, total_episodes=4, progress_bar=False)
    assert agent.num_updates == 2 and "nothing left to train: 4 episodes done" in capsys.readouterr().out
    agent.learn(env, total_episodes=6, progress_bar=False)
    assert agent.num_updates == 3  # a larger target trains the difference
