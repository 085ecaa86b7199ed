import pytest
import torch
from helpers import tiny_model

from lmgym.agents import (
    Episode,
    PPOAgent,
    PPOConfig,
    Trajectories,
    gae,
    grpo_advantages,
    rloo_advantages,
    whiten,
)
from lmgym.tokenizers import ByteTokenizer


def test_gae_hand_computed():
    rewards = torch.tensor([0.0, 0.0, 1.0])
    values = torch.tensor([0.5, 0.6, 0.7])
    adv, ret = gae(rewards, values, bootstrap_value=0.0, gamma=0.9, gae_lambda=0.8)
    d2 = 1.0 - 0.7
    d1 = 0.9 * 0.7 - 0.6
    d0 = 0.9 * 0.6 - 0.5
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    assert adv.tolist() == pytest.approx([a0, a1, a2])
    assert ret.tolist() == pytest.approx([a0 + 0.5, a1 + 0.6, a2 + 0.7])


def test_gae_bootstraps_on_truncation():
    adv, _ = gae(torch.tensor([0.0]), torch.tensor([0.2]), bootstrap_value=0.5, gamma=1.0, gae_lambda=0.95)
    assert adv.item() == pytest.approx(0.3)


def make_agent(**config):
    return PPOAgent(
        tiny_model(258, 256, n_layer=1, n_embd=32),
        tokenizer=ByteTokenizer(),
        config=PPOConfig(kl_coef=0.0, whiten_advantages=False, **config),
    )


def scored_episode(values, turn_rewards, mask, turn_ends, truncated=False, bootstrap=0.0, group=0):
    T = len(mask)
    e = Episode(
        torch.zeros(T, dtype=torch.long),
        torch.tensor(mask),
        turn_ends,
        turn_rewards,
        terminated=not truncated,
        truncated=truncated,
        group=group,
    )
    e.logprobs = torch.zeros(T)
    e.ref_logprobs = torch.zeros(T)
    e.values = torch.tensor(values, dtype=torch.float32)
    e.bootstrap_value = bootstrap
    return e


def test_env_gap_is_zero_time_steps():
    # prompt(1) a a | env env env | a ; reward 1 at the end. gamma=1, lambda=0.5.
    mask = [False, True, True, False, False, False, True]
    values = [0, 0.1, 0.2, 0, 0, 0, 0.4]
    e = scored_episode(values, [0.0, 1.0], mask, turn_ends=[2, 6])
    out = make_agent(gamma=1.0, gae_lambda=0.5).derive(Trajectories([e]))
    # action steps: V = [0.1, 0.2, 0.4], r = [0, 0, 1], no steps for the env tokens.
    expected, _ = gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.1, 0.2, 0.4]), 0.0, 1.0, 0.5)
    adv = out.advantages[0]
    assert adv[torch.tensor(mask)].tolist() == pytest.approx(expected.tolist())
    assert adv[~torch.tensor(mask)].abs().sum() == 0  # env tokens carry nothing
    # hand values: d = [0.1, 0.2, 0.6]; a2 = 0.6, a1 = 0.2 + 0.3 = 0.5, a0 = 0.1 + 0.25 = 0.35
    assert expected.tolist() == pytest.approx([0.35, 0.5, 0.6])


def test_truncated_episode_bootstraps_with_last_value():
    mask = [False, True, False]
    e = scored_episode([0, 0.25, 0], [0.0], mask, turn_ends=[1], truncated=True, bootstrap=0.75)
    adv = make_agent(gamma=1.0, gae_lambda=1.0).derive(Trajectories([e])).advantages[0]
    assert adv[1].item() == pytest.approx(0.5)


def test_group_estimators_hand_computed():
    returns = torch.tensor([1.0, 0.0, 0.0, 0.5, 0.5, 2.0])
    groups = [0, 0, 0, 1, 1, 1]
    assert rloo_advantages(returns, groups).tolist() == pytest.approx([1.0, -0.5, -0.5, -0.75, -0.75, 1.5])
    g = grpo_advantages(returns, groups, eps=0.0)
    std0 = torch.tensor([1.0, 0.0, 0.0]).std(unbiased=False).item()
    assert g[:3].tolist() == pytest.approx([(1 - 1 / 3) / std0, -1 / 3 / std0, -1 / 3 / std0])
    with pytest.raises(ValueError, match="group_size"):
        rloo_advantages(returns[:1], [0])


def test_group_advantage_on_every_action_token():
    mask = [False, True, True, False, True]
    e1 = scored_episode([0] * 5, [0.0, 1.0], mask, [2, 4], group=0)
    e2 = scored_episode([0] * 5, [0.0, 0.0], mask, [2, 4], group=0)
    adv = make_agent(estimator="rloo", group_size=2).derive(Trajectories([e1, e2])).advantages
    assert adv[0].tolist() == [0, 1, 1, 0, 1] and adv[1].tolist() == [0, -1, -1, 0, -1]


def test_whiten_guards_near_zero_spread():
    mask = torch.tensor([True, True, True])
    x = torch.tensor([1.0, 1.0001, 0.9999])
    assert whiten(x, mask).abs().max() < 1e-3  # centred, not blown up to +-1.2
    y = whiten(torch.tensor([0.0, 2.0, 4.0]), mask)
    assert y.mean().abs() < 1e-6 and y.std(unbiased=False).item() == pytest.approx(1.0)


def test_kl_in_reward_or_in_loss():
    mask = [False, True, True]
    e = scored_episode([0, 0, 0], [1.0], mask, turn_ends=[2])
    e.logprobs = torch.tensor([0.0, -1.0, -2.0])
    e.ref_logprobs = torch.tensor([0.0, -1.5, -1.0])
    in_reward = make_agent(kl_penalty="reward")
    in_reward.kl_controller.value = 0.1
    _, (rewards,), kl = in_reward.compute_rewards(Trajectories([e]))
    assert kl.tolist() == pytest.approx([0.5 - 1.0])  # k1 = logp - ref_logp, summed over the action tokens
    assert rewards.tolist() == pytest.approx([0.0, -0.05, 1.0 + 0.1])
    in_loss = make_agent(kl_penalty="loss")
    in_loss.kl_controller.value = 0.1
    _, (rewards,), _ = in_loss.compute_rewards(Trajectories([e]))
    assert rewards.tolist() == [0.0, 0.0, 1.0]  # the KL goes to the loss (k3) instead
    tok = ByteTokenizer()
    metrics = in_loss.step([torch.tensor(tok.encode("Q"))], [torch.tensor(tok.encode("ab"))], [1.0])
    assert metrics["loss/kl"] >= 0.0


@pytest.mark.parametrize("estimator, forwards", [("gae", 1), ("rloo", 0)])
def test_a_truncated_episode_is_forwarded_for_its_bootstrap_only_when_the_estimator_reads_values(estimator, forwards):
    agent = make_agent(estimator=estimator, group_size=1 if estimator == "gae" else 2)
    episodes = [scored_episode([0, 0.25, 0], [0.0], [False, True, False], [1], truncated=True) for _ in range(2)]
    for e in episodes:
        e.ref_logprobs = None  # unscored; the engine gave log-probs and values
    calls = []
    policy = agent.scorer.policy
    agent.scorer.policy = lambda *a: calls.append(a) or policy(*a)
    with torch.no_grad():
        agent.value_head.bias.fill_(0.5)  # V = 0.5 everywhere
    agent.score(episodes)
    assert len(calls) == forwards and all(e.scored for e in episodes)
    assert [e.bootstrap_value for e in episodes] == [pytest.approx(0.5 * forwards)] * 2  # unread by rloo: left at 0
