"""Evaluation: pass@k of static baselines and decoding adapters, side by side, with confidence intervals.

The protocol: every sample of every method ends at its task's first complete answer
(``Task.answer_complete``, checked inside the decode loop after every token, so the tokens after the
answer are never generated): ``EvalConfig.stop_at_answer``, default
``decoding.protocol.STOP_AT_ANSWER`` (True); False decodes every sample to EOS or the budget. An
adapter's samples stop as it was trained (``AdapterConfig.stop_at_answer``). A task that does not
say what a complete answer is (code) is decoded to its end either way.

Methods (each a :class:`Method`), evaluated on the same problems and seeds:

- ``Greedy``: the greedy action. Deterministic, so it is decoded once per problem and its single
  outcome stands for all ``n`` samples and every seed (``c = n`` or ``0``): pass@k is the same for
  every k. An argmax token adapter's row whose chosen actions were all greedy is deterministic too
  and is decoded once per prompt (``EvalConfig.decode_deterministic_once``; off decodes every
  sample, with the same outcomes).
- ``Best``: the strongest static baseline: for each reported pass@k, the single strategy among
  every static candidate (the pool and greedy) with the highest validation pass@k
  (``selection.best``; ``best_per_k`` of ``select-actions``' ``actions.json``, or
  :func:`select_best_action`), so pass@1 may come from greedy's samples and pass@8 from a
  sampler's (``best_per_k_method``; ``eval_details.json`` names the action of each k).
- ``Greedy to the budget`` (``greedy_to_budget_method``): the one control that ignores the stop,
  greedy decoded to EOS or the budget; Greedy minus it is what the stop alone gains.
- ``Mixed``: every sample draws its action uniformly from an action set (seeded, per sample): the
  sequence-level Mixed. Over the token action set this per-sequence mixture has its own row
  (``Mixed per sequence (token actions)``).
- ``Mixed (per token)``: the paper's token-level Mixed, a uniform draw over the token action set at
  every token (``UniformChooser`` on the row's action stream), role 'mixed', level 'token'.
- ``Best token action``: the best single action of the token action set, chosen on validation.
- sequence adapters (w/ and w/o budget): for each ``k`` the policy picks an action from (prompt
  embedding, ``B = k``); ``n`` samples under that action give pass@k. A w/o-budget adapter picks
  the same action for every k (in argmax mode).
- token adapters (w/ budget, w/o budget, entropy-only): ``n`` samples with
  ``TokenPolicyChooser(policy)`` choosing an action at every token.

How an adapter picks (``Method.policy_mode``) is the adapter's stored ``policy_mode`` unless the
caller overrides it: 'sample' (a draw from pi; the token adapters' default) or 'argmax' (the
sequence adapters' default); see ``policies.default_policy_mode``. ``generate``, ``serve``,
``AdaptiveGenerator`` and ``Adapter`` use the same stored mode by default, so a reported number
describes what a user gets. ``eval_details.json`` records each method's mode.

The answer a user gets: every method returns one answer per problem without a verifier
(``Method.answer_rule``): at B = 1 its sample; at B > 1 a majority vote over its B samples' answers
(``Task.extract_answer``; ties to the earliest); a draft-gated method, the draft where kept, else
its re-decode (B = 1) or a vote over the draft and B - 1 re-decodes. ``answer_accuracy@k`` is that
answer's accuracy at B = k (averaged over the disjoint blocks of k of the n samples; at k = 1 it is
pass@1), reported beside pass@k (which needs a verifier to pick among the k). The format of
``eval_details.json`` is in ``runner``'s docstring.

``n = max(k_values)`` samples per problem and seed; pass@k uses the unbiased estimator
:func:`stats.pass_at_k` on those ``n``. ``mean_length`` is the mean number of generated tokens (EOS
included); for a sequence adapter it is averaged over the k values, each k weighing its own action.

Common random numbers: sample ``j`` of problem ``p`` in seed ``s`` always uses the row seed
``row_seed(config.seed, s, p.id, j, "eval")``, whatever the method. Since a row's output depends only
on its prompt, seed and action(s) (see ``decoding``), two methods that use the same action for a
sample get the *same* generation: static rows are keyed by (action, seed, problem, sample), decoded
once and shared (Best, Mixed and the sequence adapters reuse each other's generations, and greedy
rows are shared across seeds). Comparisons between methods are therefore paired and less noisy.

Compute per answer: ``eval_details.json`` ``methods[name]`` gives ``decodes_per_problem`` and
``tokens_per_problem``, ``{k: mean over problems}`` for every reported k (pass@k's answers cost
k samples), and ``compute[name]`` the per-problem values. A *decode* is one generated sequence for
one problem; *tokens* are the generated tokens summed over the problem's decodes (EOS included;
padding and forced tokens excluded). Each row reports what it cost (``DecodeResult.row_costs``:
one decode and its length for a plain row; a two-pass method, a draft and then a conditional
re-decode, reports both passes, so its count is its own, not a formula per method). pass@k's k
answers are k of the n samples; a deterministic row standing for several samples (greedy, an
all-greedy argmax token row) is decoded once, so Greedy costs one decode at every k
(``subset_cost``). A method that decodes its own rows its own way is ``kind="custom"`` with a
``rollout`` (``MethodRollout``).

Cost of the evaluation itself: ``eval_details.json`` ``cost`` gives, per method, the rows decoded
for it, their generated tokens and decode seconds (``seconds_alone`` counts shared rows in full,
``seconds_share`` splits them among the methods that use them), and the totals (decoded rows,
tokens, decode and wall seconds).

Uncertainty (``mean_ci``): for each method and metric we average each problem's value over the
seeds, then report the mean over problems with a two-sided Student-t interval (``confidence``,
default 95%) computed from the spread of those per-problem values: mean ± t_{P-1} · sd / sqrt(P).
This counts problem-to-problem variation as well as sampling noise, the right interval when the
problems are a sample of a larger population; with one problem it is undefined (null). Intervals
of pass@k are clipped to [0, 1] (then no longer symmetric: tables print ``mean [low, high]``
instead of ``mean ± half-width``). Differences between two methods on the same problems use
:func:`stats.paired_ci` (a t interval on per-problem differences), which is what the report uses to
say whether an adapter beats a baseline.

The paper's ± is a different interval: a normal-approximation binomial interval at 95%,
z · sqrt(p(1-p)/N) with z ≈ 1.96 (e.g. ±1.25 at 71.7% matches N ≈ 5,000 outcomes; it is a 95%
interval, not one standard error). It treats each outcome as an independent draw. Each pass@k
entry of ``results.json`` carries it as ``binomial_halfwidth`` (a fraction, like the mean) with
``outcomes`` = the distinct problems (a problem's seeds and samples are averaged first, by the same
``stats.problem_means`` as the Student-t interval: a problem scored once per seed is one draw, not
several), so a table can be compared with the paper's; verdicts never use it. ``eval_details.json`` also gives the
binomial standard error (``binomial_se``) and the across-seed spread (``seed_means``, ``seed_std``:
the mean over problems computed separately for each seed).

Output (``Evaluation.write``):

- ``results.json``: ``{method: {metric: {"mean", "ci_low", "ci_high"}}}``, metrics ``pass@k`` and
  ``answer_accuracy@k`` for each k and ``mean_length``; pass@k as fractions in [0, 1] (plus ``binomial_halfwidth`` and
  ``outcomes``: the paper-style interval), lengths in tokens.
- ``eval_details.json``: config, problems, method descriptions (kind, role, level, action names),
  per-problem values (``[problem][seed]``), seed means, generation lengths, action usage,
  sequence-adapter choices and a sample of trajectories (text, token ids, token strings, per-token
  action indices into the method's action list, base entropies, max-probs) for the figures.

Out of distribution: ``ood`` labels each adapter ``train task -> eval task[:split]`` and says
whether that is OOD (another task, or the ``ood`` split of held-out families).

Modules: ``methods`` (``EvalConfig``, ``Method`` and its constructors), ``keys`` (which row a
sample is), ``plans`` (how each way of decoding is decoded and scored), ``store`` (the decoded
rows), ``aggregate`` (votes, pass@k, intervals, cost), ``runner`` (decoding, ``evaluate``),
``checkpoint`` (seed checkpoints), ``table`` (the printed table), ``truncation`` (greedy lengths
and the fraction of rows a token budget cuts off, to choose the budget on validation); the
statistics are in
``decoding_adapters.core.stats``.
"""

from ..core.stats import binomial_halfwidth
from .aggregate import subset_cost, vote
from .keys import StaticKey, TokenKey
from .methods import (
    ANSWER_ACCURACY,
    FAMILIES,
    GREEDY_TO_BUDGET,
    EvalConfig,
    Method,
    MethodRollout,
    adapter_method,
    adapter_role,
    best_per_k_method,
    best_static_method,
    best_token_action_method,
    greedy_method,
    greedy_to_budget_method,
    load_best_per_k,
    mixed_method,
    resolve_best_action,
    sequence_mixture_of_token_actions,
    static_method,
    token_mixed_method,
)
from .ood import ood_label, ood_labels
from .runner import COMPUTE_FIELDS, Evaluation, details_config, evaluate, select_best_action
from .table import format_table
from .truncation import TruncationStats, choose_token_budget, greedy_truncation, truncation_stats

__all__ = [
    "EvalConfig",
    "Method",
    "MethodRollout",
    "ANSWER_ACCURACY",
    "FAMILIES",
    "GREEDY_TO_BUDGET",
    "greedy_method",
    "greedy_to_budget_method",
    "vote",
    "subset_cost",
    "COMPUTE_FIELDS",
    "static_method",
    "best_per_k_method",
    "best_static_method",
    "load_best_per_k",
    "mixed_method",
    "token_mixed_method",
    "sequence_mixture_of_token_actions",
    "best_token_action_method",
    "adapter_method",
    "adapter_role",
    "Evaluation",
    "details_config",
    "StaticKey",
    "TokenKey",
    "evaluate",
    "select_best_action",
    "resolve_best_action",
    "format_table",
    "ood_label",
    "ood_labels",
    "binomial_halfwidth",
    "TruncationStats",
    "truncation_stats",
    "greedy_truncation",
    "choose_token_budget",
]
