"""An attempt adapter that carries an abandon rule, used live: through the Python API (and the
server) it makes, on a sample table's problems with the table's seeds, exactly the attempts, cuts,
decisions, answers and token counts of ``evaluation.abandon.replay`` on that table; every response
lists each attempt's arm, tokens and where it was cut."""

import httpx
import numpy as np
import pytest
import torch
from test_server import BackgroundServer

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.abandon import replay
from decoding_adapters.evaluation.sample_table import build_sample_table
from decoding_adapters.policies.abandon import ABANDON_JSON, save_abandon_rule
from decoding_adapters.policies.attempt import AttemptInputs, AttemptPolicy, save_attempt_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app
from decoding_adapters.tasks import get_task
from decoding_adapters.training.abandon import train_prefix_verifier
from decoding_adapters.training.attempt import AttemptTrainConfig, policy_config_from_table
from decoding_adapters.training.verifier import VerifierTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BUDGET, EVERY = 10, 3
LIMITS = ServerLimits(max_tokens_limit=32, max_batch=8, max_prompt_chars=1000, max_queue=64, batch_wait_ms=5)


@pytest.fixture(scope="module")
def setting(tiny_lm, tmp_path_factory):
    """A table with checkpoints, a rule cutting about half the prefixes, and the adapter carrying it."""
    root = tmp_path_factory.mktemp("live-abandon")
    task = get_task("arithmetic")
    problems = task.load("validation")[:5]
    arms = [GREEDY, DecodingAction(temperature=1.0)]
    table = build_sample_table(tiny_lm, task, problems, arms, samples=3, token_budget=BUDGET, split="validation",
                               path=root / "table", hidden=True, progress=False, checkpoints=EVERY,
                               stop_at_answer=False)
    rule = train_prefix_verifier(table, VerifierTrainConfig(steps=5))
    scores = rule.table_scores(table)
    rule = rule.with_thresholds([float(np.nanmedian(scores[..., c])) if np.isfinite(scores[..., c]).any() else 0.0
                                 for c in range(scores.shape[-1])])
    config = policy_config_from_table(table, AttemptTrainConfig(features=("confidence", "hidden"), max_attempts=4))
    torch.manual_seed(1)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    with torch.no_grad():  # a policy that goes on for a while and varies its arm
        for p in policy.stop_net.parameters():
            p.normal_(0, 1.0)
        policy.stop_net[-1].bias[0] = -3.0
    directory = save_attempt_adapter(root / "adapter", policy, table.header["actions"],
                                     base_model=str(save_tiny_base(tiny_lm, root / "base")), task="arithmetic",
                                     stop_at_answer=False)
    save_abandon_rule(directory, rule)
    return task, problems, table, policy, rule, directory


def _expected_cuts(rule, table, paths):
    """Per problem, per attempt of ``paths``: the tokens at which the rule cuts it on the table."""
    cuts = rule.cuts(table)
    out = []
    for i, path in enumerate(paths):
        seen, row = [0] * table.shape[1], []
        for arm in path:
            c = int(cuts[i, arm, seen[arm]])
            row.append(None if c < 0 else (c + 1) * EVERY)
            seen[arm] += 1
        out.append(row)
    return out


def test_the_python_api_makes_the_replay_s_attempts_and_cuts(tiny_lm, setting):
    task, problems, table, policy, rule, directory = setting
    gen = Adapter.from_pretrained(directory, lm=tiny_lm).generator()
    assert gen.abandon is not None and gen.abandon.every == EVERY
    outs = gen.generate([task.prompt(p) for p in problems], token_budget=BUDGET,
                        problem_ids=[p.id for p in problems], seed=int(table.header["seed"]))
    offline, seen = replay(policy, table, rule)
    names = table.arm_names
    assert [g.attempt_actions for g in outs] == [[names[a] for a in path] for path in offline.paths]
    assert max(g.decodes for g in outs) > 1
    assert [g.stopped_by for g in outs] == list(offline.stopped_by)
    assert [g.attempt_tokens for g in outs] == [int(t) for t in offline.tokens]
    assert [g.answer for g in outs] == [seen.answer_strings[i][a] if a >= 0 else ""
                                        for i, a in enumerate(offline.answers)]
    cut_at = [[r["cut_at"] for r in g.attempt_records] for g in outs]
    assert cut_at == _expected_cuts(rule, table, offline.paths)
    flat = [c for row in cut_at for c in row]
    assert any(c is not None for c in flat) and any(c is None for c in flat)  # cut and kept attempts both checked
    for g in outs:  # each record: the attempt's arm, its tokens (a cut one: those made before its checkpoint)
        records = g.attempt_records
        assert [r["arm"] for r in records] == g.attempt_actions
        assert sum(r["tokens"] for r in records) == g.attempt_tokens
        assert all(r["tokens"] == r["cut_at"] for r in records if r["cut_at"] is not None)
        assert g.adapter_info()["attempt_records"] == records and g.to_dict()["attempt_records"] == records


def test_without_the_rule_no_attempt_is_cut(tiny_lm, setting, tmp_path):
    task, problems, table, policy, _, directory = setting
    adapter = Adapter.from_pretrained(directory, lm=tiny_lm)
    adapter.save_pretrained(tmp_path)
    assert (tmp_path / ABANDON_JSON).is_file()  # the rule travels with the adapter
    adapter.abandon = None
    adapter.save_pretrained(tmp_path)  # and is gone from a directory saved again without it
    assert not (tmp_path / ABANDON_JSON).exists()
    outs = Adapter.from_pretrained(tmp_path, lm=tiny_lm).generator().generate(
        [task.prompt(p) for p in problems], token_budget=BUDGET, problem_ids=[p.id for p in problems])
    plain, _ = replay(policy, table, None)
    assert [g.attempt_tokens for g in outs] == [int(t) for t in plain.tokens]
    assert all(r["cut_at"] is None for g in outs for r in g.attempt_records)


def test_the_server_lists_each_attempt_s_arm_and_cut(tiny_lm, setting):
    task, problems, _, _, _, directory = setting
    gen = Adapter.from_pretrained(directory, lm=tiny_lm).generator()
    chats = [task.prompt(p) for p in problems]
    alone = [gen.generate([chat], token_budget=BUDGET, seed=7)[0] for chat in chats]  # a request's prompt 0 each
    with BackgroundServer(create_app(gen, LIMITS)) as url:
        for chat, want in zip(chats, alone):
            body = dict(model=gen.name, messages=chat, max_tokens=BUDGET, seed=7)
            info = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["decoding_adapter"]
            record = info["choices"][0]
            assert record["attempt_records"] == want.attempt_records
            assert [r["arm"] for r in record["attempt_records"]] == record["attempts"]
            assert record["stopped_by"] == want.stopped_by
    assert any(r["cut_at"] is not None for g in alone for r in g.attempt_records)


def test_problem_ids_and_rules_are_refused_where_they_do_not_apply(tiny_lm, setting, tmp_path):
    _, _, _, _, rule, directory = setting
    gen = Adapter.from_pretrained(directory, lm=tiny_lm).generator()
    with pytest.raises(ValueError, match="problem_ids must be 2 distinct"):
        gen.generate(["What is 2+3?", "What is 1+1?"], problem_ids=["a", "a"])
    sequence = make_adapter(tmp_path / "seq", tiny_lm, "sequence")
    save_abandon_rule(sequence, rule)
    with pytest.raises(ValueError, match="an abandon rule cuts sequential attempts: a sequence adapter makes none"):
        Adapter.from_pretrained(sequence, lm=tiny_lm).generator()
    (sequence / ABANDON_JSON).unlink()
    (sequence / "abandon.safetensors").unlink()
    with pytest.raises(ValueError, match="problem_ids key an attempt adapter's attempts"):
        Adapter.from_pretrained(sequence, lm=tiny_lm).generator().generate(["Hi"], problem_ids=["a"])
