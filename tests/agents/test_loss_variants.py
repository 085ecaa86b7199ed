"""The loss family as PPOConfig fields (loss_type, clip_range_high, importance_sampling_level,
scale_rewards, dynamic_sampling, mask_truncated), each against values computed by hand on a tiny
batch, single-turn and multi-turn, and each reachable as a ``lmgym train`` flag."""

import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from helpers import tiny_model

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.advantages import group_advantages
from lmgym.agents.loss import aggregate, clipped_policy_loss
from lmgym.agents.trajectories import Episode, Trajectories
from lmgym.tokenizers import ByteTokenizer

MASK = torch.tensor([[True, True, True, False], [True, False, False, False]])  # episode 0: 3 tokens, 1: 1
LOSSES = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])


def test_each_loss_type_averages_its_tokens_as_trl_defines_it():
    by_hand = {
        "bnpo": (1 + 2 + 3 + 4) / 4,  # the minibatch's active tokens
        "grpo": ((1 + 2 + 3) / 3 + 4 / 1) / 2,  # each sequence's mean, then the mean of sequences
        "dapo": (1 + 2 + 3 + 4) / 20,  # the mean optimizer step's active tokens (20, from minibatches)
        "dr_grpo": (1 + 2 + 3 + 4) / (2 * 8),  # rows x the constant length (8)
    }
    normalizers = {"bnpo": None, "grpo": None, "dapo": 20.0, "dr_grpo": 16.0}
    for loss_type, expected in by_hand.items():
        assert float(aggregate(LOSSES, MASK, loss_type, normalizers[loss_type])) == pytest.approx(expected), loss_type


def test_clip_range_high_clips_only_above():
    log_ratio = torch.log(torch.tensor([[1.25, 0.7]]))
    mask, adv = torch.ones(1, 2, dtype=torch.bool), torch.tensor([[1.0, -1.0]])
    symmetric, *_ = clipped_policy_loss(log_ratio, torch.zeros(1, 2), adv, mask, 0.2)
    higher, *_ = clipped_policy_loss(log_ratio, torch.zeros(1, 2), adv, mask, 0.2, clip_range_high=0.28)
    # token 0 (A = 1): min(1.25 A, clip(1.25) A): 1.2 symmetric, 1.25 under 1 + 0.28; token 1 (A = -1): 0.8 both
    assert float(symmetric) == pytest.approx(-(1.2 - 0.8) / 2)
    assert float(higher) == pytest.approx(-(1.25 - 0.8) / 2)


def test_sequence_level_ratio_is_the_mean_log_ratio_of_each_row():
    logprobs = torch.tensor([[0.2, 0.4, 5.0], [0.1, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    loss, ratio, _ = clipped_policy_loss(logprobs, torch.zeros(2, 3), adv, mask, 10.0, level="sequence")
    s0, s1 = torch.exp(torch.tensor(0.3)), torch.exp(torch.tensor(0.1))  # exp(mean log-ratio) per row
    assert ratio[0, :2].tolist() == pytest.approx([float(s0)] * 2) and float(ratio[1, 0]) == pytest.approx(float(s1))
    assert float(loss) == pytest.approx(-(2 * float(s0) * 1 + float(s1) * 2) / 3)
    loss.backward()
    # row 0 adds -2 A s0 / 3 (two tokens share s0 = exp(mean)); ds0/dlogp_t = s0 / 2: -A s0 / 3 for each
    assert logprobs.grad[0, :2].tolist() == pytest.approx([-float(s0) / 3] * 2)
    assert logprobs.grad[0, 2] == 0 and float(logprobs.grad[1, 0]) == pytest.approx(-2 * float(s1) / 3)


def test_cispo_weights_the_log_prob_by_the_clipped_ratio_without_its_gradient():
    logprobs = torch.tensor([[0.0, 1.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0]])  # ratios 1 and e (2.718), capped at 1 + 0.5
    mask, adv = torch.ones(1, 2, dtype=torch.bool), torch.tensor([[1.0, 2.0]])
    loss, *_ = clipped_policy_loss(logprobs, old, adv, mask, 0.2, clip_range_high=0.5, loss_type="cispo", normalizer=2)
    assert float(loss.detach()) == pytest.approx(-(1 * 1 * 0.0 + 1.5 * 2 * 1.0) / 2)
    loss.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([-1 * 1 / 2, -1.5 * 2 / 2])  # the weight is a constant


def test_scale_rewards_group_batch_none_by_hand():
    returns, groups = torch.tensor([1.0, 0.0, 2.0, 2.0, 4.0, 0.0]), [0, 0, 1, 1, 2, 2]
    centred = [0.5, -0.5, 0.0, 0.0, 2.0, -2.0]
    assert group_advantages(returns, groups, "grpo", "none").tolist() == pytest.approx(centred)
    per_group = [0.5 / 0.5, -0.5 / 0.5, 0.0, 0.0, 2.0 / 2.0, -2.0 / 2.0]
    assert group_advantages(returns, groups, "grpo", "group", eps=0).tolist() == pytest.approx(per_group)
    batch_std = float(returns.std(unbiased=False))
    expected = [a / batch_std for a in centred]
    assert group_advantages(returns, groups, "grpo", "batch", eps=0).tolist() == pytest.approx(expected)
    assert group_advantages(returns, groups, "rloo").tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 4.0, -4.0])


def test_variants_without_meaning_under_gae_say_so():
    with pytest.raises(ValueError, match="scale_rewards scales a group estimator"):
        PPOConfig(scale_rewards="none")
    with pytest.raises(ValueError, match="dynamic_sampling .* needs a group estimator"):
        PPOConfig(dynamic_sampling=True)
    with pytest.raises(ValueError, match="loss_type must be one of 'bnpo', 'grpo', 'dapo', 'dr_grpo', 'cispo'"):
        PPOConfig(loss_type="sapo")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        PPOConfig(importance_sampling_level="episode")


def agent_for(**config):
    tok = ByteTokenizer()
    cfg = PPOConfig(seed=0, learning_rate=1e-3, kl_coef=0.0, **config)
    return PPOAgent(tiny_model(tok.vocab_size, tok.eos_token_id), tokenizer=tok, config=cfg)


def multi_turn_episode(rewards, truncated=False, budget_cut=False, group=0):
    # prompt | 2 action tokens | env token | 3 action tokens (two turns), ids from the byte vocabulary
    mask = [False, True, True, False, True, True, True][: 3 + 3 * (len(rewards) > 1) + (len(rewards) > 1)]
    tokens = torch.arange(65, 65 + len(mask))
    ends = [i for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
    return Episode(
        tokens, mask, ends, rewards, truncated=truncated, terminated=not truncated, budget_cut=budget_cut, group=group
    )


def test_mask_truncated_leaves_cut_episodes_out_of_the_policy_loss():
    batch = Trajectories(
        [
            multi_turn_episode([0.0, 1.0]),
            multi_turn_episode([0.0, 0.0], truncated=True),
            multi_turn_episode([1.0], budget_cut=True),
            multi_turn_episode([0.0]),
        ]
    )
    agent = agent_for(mask_truncated=True)
    agent.score(batch)
    inputs = agent.derive(batch).loss_inputs(2.0, torch.device("cpu"), mask_truncated=True)
    assert inputs.policy_mask.any(-1).tolist() == [True, False, False, True]
    assert torch.equal(inputs.action_mask.any(-1), torch.ones(4, dtype=torch.bool))  # the value loss keeps them
    off = agent.derive(batch).loss_inputs(2.0, torch.device("cpu"))
    assert off.policy_mask is None


def test_each_variant_trains_single_and_multi_turn_episodes():
    batches = {
        "single": [multi_turn_episode([float(i % 2)], group=i // 2) for i in range(4)],
        "multi": [multi_turn_episode([0.0, float(i % 2)], group=i // 2) for i in range(4)],
    }
    variants = [
        {"loss_type": "grpo"},
        {"loss_type": "dapo", "clip_range_high": 0.28, "gradient_accumulation_steps": 2, "mini_batch_size": 2},
        {"loss_type": "dr_grpo", "scale_rewards": "none", "whiten_advantages": False},
        {"loss_type": "cispo", "clip_range_high": 4.0},
        {"importance_sampling_level": "sequence", "clip_range": 3e-4, "clip_range_high": 4e-4},
        {"scale_rewards": "batch", "mask_truncated": True},
    ]
    for kind, episodes in batches.items():
        for variant in variants:
            agent = agent_for(estimator="grpo", group_size=2, n_epochs=1, **variant)
            before = [p.detach().clone() for p in agent.model.parameters()]
            metrics = agent.update(Trajectories(list(episodes)))
            moved = any(not torch.equal(a, p) for a, p in zip(before, agent.model.parameters()))
            assert moved and torch.isfinite(torch.tensor(metrics["loss/policy"])), (kind, variant)


def test_dapo_divides_by_the_mean_optimizer_steps_tokens_and_dr_grpo_by_a_constant():
    # two episodes of two turns (5 action tokens each), two of one turn (2 each): 14 tokens in the batch
    episodes = [multi_turn_episode([0.0, float(i % 2)][i // 2 :], group=i // 2) for i in range(4)]
    batch = Trajectories(episodes, turn_budget=8)
    for steps, expected in [(1, 14 / 4), (2, 14 / 2 / 2)]:  # accelerate divides each minibatch's loss by steps
        agent = agent_for(
            estimator="grpo",
            group_size=2,
            n_epochs=1,
            mini_batch_size=1,
            gradient_accumulation_steps=steps,
            loss_type="dapo",
        )
        agent.score(batch)
        inputs = agent.derive(batch).loss_inputs(2.0, torch.device("cpu"))
        # TRL's: the batch's tokens over its optimizer steps, the same for every step (bnpo: each its own, 5 or 2)
        assert [n for _, n in agent.minibatches(inputs, batch)] == [expected] * 4
        agent.config.n_epochs = 2
        assert [n for _, n in agent.minibatches(inputs, batch)] == [expected] * 8
    agent.config.loss_type = "dr_grpo"
    assert [n for _, n in agent.minibatches(inputs, batch)] == [1 * 8 * 2] * 8  # rows x budget x most turns


def test_dynamic_sampling_drops_flat_groups_and_collects_more():
    agent = agent_for(estimator="rloo", group_size=2, dynamic_sampling=True, dynamic_sampling_max_collects=2)
    collects = iter(
        [
            [multi_turn_episode([r], group=g) for r, g in [(1.0, 0), (1.0, 0), (0.0, 1), (1.0, 1)]],  # group 0 flat
            [multi_turn_episode([r], group=g) for r, g in [(0.0, 0), (0.0, 0), (1.0, 1), (0.0, 1)]],  # group 0 flat
        ]
    )
    asked = []

    def collect(envs, n, *args, **kwargs):
        asked.append(n)
        return Trajectories(next(collects))

    agent.collect = collect
    batch = agent.collect_varied(None, 4)
    assert asked == [4, 2] and len(batch) == 4
    assert [e.return_ for e in batch] == [0.0, 1.0, 1.0, 0.0] and len({e.group for e in batch}) == 2
    assert batch.stats()["env/dropped_groups"] == pytest.approx(2 / 4)


def test_the_variants_are_train_flags():
    from lmgym.cli import build_parser
    from lmgym.cli.spec import RunSpec, nested

    args = build_parser().parse_args(
        [
            "train",
            "lmgym/Echo-v0",
            "--estimator",
            "grpo",
            "--loss-type",
            "dapo",
            "--clip-range-high",
            "0.28",
            "--importance-sampling-level",
            "sequence",
            "--scale-rewards",
            "none",
            "--dynamic-sampling",
            "true",
            "--mask-truncated",
            "true",
            "--credit",
            "episode",
            "--reward-control",
            "shuffle",
        ]
    )
    spec = RunSpec.from_args(args)
    config = PPOConfig(estimator="grpo", **nested(spec.settings))
    assert (config.loss_type, config.clip_range_high, config.importance_sampling_level) == ("dapo", 0.28, "sequence")
    assert (config.scale_rewards, config.dynamic_sampling, config.mask_truncated) == ("none", True, True)
    assert (config.credit, config.reward_control) == ("episode", "shuffle")
    bad = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "train", "lmgym/Echo-v0", "--loss-type", "sapo"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--loss-type: invalid choice: 'sapo'" in bad.stderr


def test_gym_env_smoke_with_dapo_and_dynamic_sampling():
    agent = agent_for(
        estimator="grpo",
        group_size=2,
        loss_type="dapo",
        dynamic_sampling=True,
        episodes_per_update=4,
        mini_batch_size=4,
    )
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=4, vectorization_mode="sync")
    agent.learn(envs, total_episodes=4, progress_bar=False)
    assert agent.num_updates == 1
    envs.close()


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--estimator", "grpo", "--dynamic-sampling", "true", "--scale-rewards", "none"], None),
        (["--model", "SmolLM2-135M-Instruct.Q4_1.gguf", "--dynamic-sampling", "true"], None),  # the recipe's rloo
        (["--dynamic-sampling", "true"], "dynamic_sampling drops groups"),  # the default model's gae
        (["--estimator", "gae", "--scale-rewards", "group"], "scale_rewards scales a group estimator"),
    ],
)
def test_flags_are_checked_early_with_the_estimator_that_will_run(argv, error):
    from lmgym.cli import build_parser
    from lmgym.cli.errors import UsageError
    from lmgym.cli.options import check_inputs
    from lmgym.cli.spec import RunSpec

    spec = RunSpec.from_args(build_parser().parse_args(["train", "lmgym/Echo-v0", *argv]))
    if error is None:
        check_inputs(spec)
    else:
        with pytest.raises(UsageError, match=error):
            check_inputs(spec)
