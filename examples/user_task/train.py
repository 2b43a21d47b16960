"""Train a decoding adapter on *your own* task, end to end, without editing the package.

    python examples/user_task/train.py --out runs/capitals          # ~10 CPU-minutes (see README)

The task is "What is the capital of X?" (``train.jsonl`` / ``test.jsonl``, written by
``make_data.py``), scored by ``check.py:score`` — a plain function ``(completion, answer, row)``
that also reads the row's ``aliases``. Nothing here is specific to capitals: point ``data`` and
``verifier`` at your own files.

What it does:
1. registers the task from Python (``register_task``): the built-in ``jsonl`` task with this
   folder's files, the ``check:score`` verifier and a one-line instruction;
2. ``train-token``: a token-level adapter (greedy / T=0.5 / T=1.0 / T=1.25 at every token),
   REINFORCE with live rollouts on the embedded SmolLM2-135M-Instruct;
3. ``evaluate``: pass@k of the adapter next to Greedy and Mixed on the test split, and the
   evaluation table added to the adapter's model card (``README.md`` in the adapter folder);
4. uses the trained adapter inside ``transformers``' own ``model.generate``.

The same from the command line (from this folder, so that ``check:score`` imports):

    decoding-adapters train-token --task jsonl --data train=train.jsonl,test=test.jsonl \
        --verifier check:score --token-budget 12 --steps 8 --out runs/capitals/adapter
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so that "check:score" imports (the verifier's worker process inherits sys.path)

from decoding_adapters import cli  # noqa: E402
from decoding_adapters.tasks import register_task  # noqa: E402
from decoding_adapters.tasks.jsonl import JsonlTask  # noqa: E402


@register_task("capitals")
@dataclass
class CapitalsTask(JsonlTask):
    """The example task: this folder's JSONL files, scored by check.py."""

    data: object = f"train={HERE / 'train.jsonl'},test={HERE / 'test.jsonl'}"
    verifier: object = "check:score"
    instruction: str | None = "Answer with the name of the city only."


def run(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/capitals", help="output folder (adapter/, eval/)")
    p.add_argument("--model", default="smollm2", help="frozen LM: the embedded default, or an HF directory")
    p.add_argument("--token-budget", type=int, default=12)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--val-problems", type=int, default=8)
    p.add_argument(
        "--filter-samples", type=int, default=2, help="probe rollouts per training prompt (0: keep every prompt)"
    )
    p.add_argument("--max-train-prompts", type=int, default=40)
    p.add_argument("--eval-k", default="1,4")
    p.add_argument("--eval-seeds", type=int, default=1)
    p.add_argument("--max-problems", type=int, default=None, help="evaluate on at most this many test problems")
    p.add_argument("--force", action="store_true",
                   help="train even when the pre-flight check (greedy on a few training problems) solves nothing")
    args = p.parse_args(argv)
    out = Path(args.out)
    adapter_dir, eval_dir = out / "adapter", out / "eval"

    common = ["--task", "capitals", "--model", args.model, "--token-budget", str(args.token_budget)]
    code = cli.main(["train-token", *common, "--out", str(adapter_dir), "--steps", str(args.steps),
                     "--prompts-per-step", str(args.prompts_per_step), "--group-size", str(args.group_size),
                     "--val-problems", str(args.val_problems), "--val-every", str(max(args.steps, 1)),
                     "--filter-samples", str(args.filter_samples),
                     *([] if args.max_train_prompts is None else ["--max-train-prompts", str(args.max_train_prompts)]),
                     *(["--force"] if args.force else [])])
    if code:
        raise SystemExit(code)
    limit = [] if args.max_problems is None else ["--max-problems", str(args.max_problems)]
    code = cli.main(["evaluate", *common, *limit, "--adapter", f"Token adapter={adapter_dir}",
                     "--baselines", "greedy,mixed", "--actions", "math-token", "--k", args.eval_k,
                     "--seeds", str(args.eval_seeds), "--no-progress", "--out", str(eval_dir)])
    if code:
        raise SystemExit(code)

    from decoding_adapters.policies.networks import add_evaluation

    card = add_evaluation(adapter_dir, eval_dir)
    print(f"model card with the evaluation table: {card}")
    show_in_transformers(adapter_dir, args.model, args.token_budget)
    return adapter_dir


def show_in_transformers(adapter_dir: Path, model: str, token_budget: int) -> None:
    """Step 4: the trained adapter deciding inside transformers' own generate loop."""
    from decoding_adapters import Adapter
    from decoding_adapters.lm.models import load_frozen_lm

    lm = load_frozen_lm(model)  # any HF causal LM + tokenizer with the adapter's hidden size and vocabulary
    adapter = Adapter.from_pretrained(adapter_dir)
    task = CapitalsTask()
    problem = task.load("test")[0]
    [ids] = lm.encode_chat([task.prompt(problem)])
    inputs = {"input_ids": lm.pad([ids])[0], "attention_mask": lm.pad([ids])[1]}
    with adapter.logits_processor(lm.model, token_budget=token_budget) as lp:
        out = lm.model.generate(**inputs, max_new_tokens=token_budget, **lp.generate_kwargs())
    text = lm.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
    actions = [adapter.action_names[int(a)] for a in lp.action_matrix[0]]
    print(f"{problem.question} -> {text!r} (reward {task.reward(problem, text)}); actions: {actions}")
    task.close()


if __name__ == "__main__":
    run()
