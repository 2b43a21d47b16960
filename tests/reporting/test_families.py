"""The report's comparisons split by family: the headline comparison's per-problem values restricted
to each family's problems (the same rule, the same curve reading), and the verifier's quality."""

import pytest

from decoding_adapters.reporting.families import family_indices, family_lines, family_section


def _rule(decodes, values, validation):
    return ({"family": "fixed rule", "curve": "CGES", "decodes_per_problem": {"answer": decodes},
             "validation": {"accuracy": validation, "decodes": decodes}},
            {"answer_accuracy": [[v] for v in values]})


def _policy(decodes, values):
    return ({"family": "learned", "curve": "Attempt policy", "decodes_per_problem": {"answer": decodes}},
            {"answer_accuracy": [[v] for v in values]},
            {"decodes": {"answer": [decodes] * len(values), "by_seed": [[decodes]] * len(values)}})


def _details(families):
    methods, per_problem, compute = {}, {}, {}
    for name, (m, p) in {"CGES (1 decode)": _rule(1.0, [1, 0, 0, 0], 0.3),
                         "CGES (2 decodes)": _rule(2.0, [1, 1, 0, 0], 0.5)}.items():
        methods[name], per_problem[name] = m, p
    for name, (m, p, c) in {"Attempt policy (price 0.1)": _policy(1.0, [1, 0, 1, 0]),
                            "Attempt policy (price 0.01)": _policy(2.0, [1, 1, 1, 1])}.items():
        methods[name], per_problem[name], compute[name] = m, p, c
    return {"problems": [{"id": str(i), **({"family": f} if f else {})} for i, f in enumerate(families)],
            "methods": methods, "per_problem": per_problem, "compute": compute, "sentence_levels": [1.5],
            "verifier_quality": {"evaluated": {"all": {"attempts": 10, "right": 0.5, "auc": 0.9, "ece": 0.05},
                                               "word": {"attempts": 6, "right": 0.5, "auc": 0.95, "ece": 0.04}}}}


def test_each_family_gets_the_headline_comparison_restricted_to_its_problems():
    details = _details(["word", "word", "sums", "sums"])
    assert family_indices(details) == {"word": [0, 1], "sums": [2, 3]}
    (line,) = family_lines(details)
    # at 1.5 decodes: the policy's curve reads [1, .5, 1, .5], the rule's [1, .5, 0, 0]
    assert "at 1.5 decodes per problem against CGES" in line
    assert "word (2 problems) 75.0 vs 75.0, +0.0" in line and "sums (2 problems) 75.0 vs 0.0, +75.0" in line
    text = family_section(details)
    assert "word AUC 0.950" in text and "matched over all problems, not within a family" in text


@pytest.mark.parametrize("families", [["word"] * 4, [None] * 4])
def test_no_split_without_two_families(families):
    details = _details(families)
    assert family_lines(details) == []
    assert "AUC" in family_section(details) and "strongest rule" not in family_section(details)


def test_each_part_is_the_step_between_two_curves_at_the_same_compute():
    from decoding_adapters.reporting.parts import part_levels, parts_section

    details = _details(["word", "word", "sums", "sums"])
    verifier = _rule(1.0, [1, 1, 0, 0], 0.9)  # a rule reading the verifier: validation-best
    verifier_high = _rule(2.0, [1, 1, 1, 0], 0.95)
    for name, (m, p) in {"CGES with the verifier (1)": verifier, "CGES with the verifier (2)": verifier_high}.items():
        details["methods"][name] = {**m, "curve": "CGES with the verifier", "reads_verifier": True}
        details["per_problem"][name] = p
    for name in list(details["methods"]):
        if name.startswith("Attempt policy ("):
            single = name.replace("Attempt policy", "Attempt policy, best single arm")
            details["methods"][single] = {**details["methods"][name], "curve": "Attempt policy, best single arm"}
            details["per_problem"][single] = {"answer_accuracy": [[0.0]] * 4}
            details["compute"][single] = details["compute"][name]
    (row,) = part_levels(details)
    assert row["curves"]["plain rule"]["name"] == "CGES" and row["curves"]["verifier rule"]["name"].endswith("verifier")
    assert row["steps"]["verifier"]["diff"] == pytest.approx(0.625 - 0.375)  # [1, 1, .5, 0] vs [1, .5, 0, 0]
    assert row["steps"]["decoder"]["diff"] == pytest.approx(0.75)  # the full policy against the single arm's zeros
    assert row["steps"]["all"]["diff"] == pytest.approx(0.75 - 0.375)
    assert "| 1.5 |" in parts_section(details)
    assert parts_section({"problems": []}) == ""
