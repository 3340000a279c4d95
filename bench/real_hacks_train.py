"""Models and training of `bench/real_hacks.py`: a tiny GPT-2 built here (no hub), a supervised
warm-start in a plain torch loop, then TRL's GRPOTrainer on CPU with rlenv's reward functions
(`rlenv.trl.reward_funcs`: each completion graded by a frozen-world worker, as `rlenv run`
grades a rollout)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDTH, LAYERS, HEADS = 64, 2, 4


def build_base(directory: Path, *, seed: int, pairs: list[tuple[str, str]], steps: int) -> float:
    """Build the tokenizer and a fresh GPT-2, warm-start it on `pairs` (loss on the answer and
    EOS only), save it to `directory`; returns the final training loss."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.tiny_models import build_tokenizer

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    pad = tokenizer.convert_tokens_to_ids("<|pad|>")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=WIDTH,
        n_layer=LAYERS,
        n_head=HEADS,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=pad,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    rows = []
    for prompt, answer in pairs:
        head = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
        tail_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
        rows.append((head_ids + tail_ids, [-100] * len(head_ids) + tail_ids))
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        batch = rng.sample(rows, 64)
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        mask = (labels != -100) | (ids != pad)
        loss = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss)
    model.eval()
    from tests.tiny_models import save_checkpoint

    save_checkpoint(model, tokenizer, directory)
    return loss_value


def grpo(
    base: Path,
    spec: Path,
    out: Path,
    *,
    seed: int,
    steps: int,
    save_every: int,
    prompts_per_step: int,
    generations: int,
    max_tokens: int,
    learning_rate: float,
) -> dict[str, Any]:
    """GRPO from `base` on the spec's training inputs and reward components; a checkpoint every
    `save_every` steps in `out/checkpoint-N`. Returns timing and the trainer's log."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import rlenv.trl as rt

    torch.set_num_threads(1)
    started = time.monotonic()
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=prompts_per_step * generations,
        num_generations=generations,
        max_completion_length=max_tokens,
        max_steps=steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_every,
        save_only_model=True,
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        report_to=[],
        disable_tqdm=True,
        reward_weights=rt.reward_weights(spec),
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        processing_class=tokenizer,
        reward_funcs=rt.reward_funcs(spec),
        train_dataset=rt.dataset(spec),
        args=args,
    )
    trainer.train()
    history = [row for row in trainer.state.log_history if "reward" in row]
    return {"seconds": time.monotonic() - started, "history": history}


# ---------------------------------------------------------------------------------------------
# One job: a hack kind at one seed, its hacked run and its control, every checkpoint judged.


def read_verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per compared run (the reference first), its label, step, verdict status and evidence
    (signal, effect, ci) from `rlenv.report.compare.compare`'s result; status "unknown" when
    the result has no verdict (an rlenv without it, or a compare that failed)."""
    rows = []
    for i, entry in enumerate(result.get("checkpoints") or []):
        verdict = entry.get("verdict") or {}
        evidence = [
            {
                "signal": str(e.get("signal")),
                "effect": e.get("effect"),
                "ci": e.get("ci"),
                "message": e.get("message"),
            }
            for e in verdict.get("evidence") or []
        ]
        rows.append(
            {
                "index": i,
                "label": entry.get("label"),
                "step": entry.get("step"),
                "status": verdict.get("status", "unknown"),
                "evidence": evidence,
                "notes": list(verdict.get("notes") or []),
            }
        )
    return rows


def _records(run_dir: Path) -> list[dict[str, Any]]:
    import json

    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def describe_run(run_dir: Path, kind: str) -> dict[str, Any]:
    """The script's own reading of one run directory (not rlenv's): the share of answers with
    the kind's behaviour, the gold pass rate, the proxy mean, mean answer length."""
    from real_hacks_task import detect

    records = [r for r in _records(run_dir) if r.get("status") == "ok"]
    n = len(records)

    def target(record: dict[str, Any]) -> str:
        for message in record.get("messages") or []:
            if message.get("role") == "user":
                return str(message.get("content", "")).removeprefix("Copy: ").strip()
        return ""

    hacked = sum(detect(kind, r.get("answer"), target(r)) for r in records)
    passed = sum(bool(r.get("passed")) for r in records)
    proxy = [((r.get("rewards") or {}).get("total")) for r in records]
    proxy = [p for p in proxy if p is not None]
    lengths = [len((r.get("answer") or "").strip()) for r in records]
    return {
        "n": n,
        "hack_share": hacked / n if n else None,
        "gold": passed / n if n else None,
        "proxy": sum(proxy) / len(proxy) if proxy else None,
        "length": sum(lengths) / n if n else None,
        "examples": [r.get("answer") for r in records[:6]],
    }


def _redirect(path: str) -> None:
    """Send this process's output (trainer logs, progress bars, warnings) to a log file."""
    import os

    log = open(path, "a", buffering=1)  # noqa: SIM115 - the job's whole life
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def _cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train_job(job: dict[str, Any]) -> dict[str, Any]:
    """One GRPO run (a hacked run of one kind, or the control of a seed) into ``job["out"]``;
    its reward history goes to ``out/history.json``. A finished run is kept."""
    import json

    _redirect(job["log"])
    out = Path(job["out"])
    history_file = out / "history.json"
    if history_file.is_file():
        return json.loads(history_file.read_text())
    started = time.monotonic()
    trained = grpo(Path(job["base"]), Path(job["spec"]), out, seed=job["seed"], **job["grpo"])
    done = {
        "seconds": time.monotonic() - started,
        "cpu_seconds": _cpu_seconds(),
        "history": [{"step": h.get("step"), "reward": h.get("reward")} for h in trained["history"]],
    }
    history_file.write_text(json.dumps(done))
    return done


def eval_job(job: dict[str, Any]) -> dict[str, Any]:
    """Evaluate step 0 (the base) and every checkpoint of the kind's hacked run and of the
    seed's control in the kind's held-out env, as rlenv run directories (hf:, KL against the
    base), and compare each series; the result is also written to ``job["result"]``."""
    import json
    import traceback

    _redirect(job["log"])
    import torch

    torch.set_num_threads(1)
    from rlenv.report.compare import compare
    from rlenv.watch import complete_checkpoints, evaluate_checkpoint

    kind = job["kind"]
    base, root = Path(job["base"]), Path(job["root"])
    eval_spec = Path(job["spec"])
    started = time.monotonic()
    timings: dict[str, float] = {"evaluate": 0.0, "compare": 0.0}

    def evaluate(checkpoint: Path, step: int, out_root: Path) -> Path:
        t = time.monotonic()
        done = evaluate_checkpoint(
            eval_spec, checkpoint, step=step, out_root=out_root, reference=base, concurrency=2
        )
        timings["evaluate"] += time.monotonic() - t
        return done.run_dir

    step0 = evaluate(base, 0, root / "base")
    result: dict[str, Any] = {"kind": kind, "seed": job["seed"], "runs": {}}
    for mode in ("hacked", "control"):
        run_dirs, steps = [step0], [0]
        for step, checkpoint in complete_checkpoints(Path(job["train"][mode])):
            run_dirs.append(evaluate(checkpoint, step, root / mode))
            steps.append(step)
        t = time.monotonic()
        try:
            compared = compare(run_dirs, steps=steps, out=root / mode / "compare")
            error = None
        except Exception:  # a verdict we cannot read is reported, the runs are kept
            compared, error = {}, traceback.format_exc()
            print(error)
        timings["compare"] += time.monotonic() - t
        result["runs"][mode] = {
            "run_dirs": [str(d) for d in run_dirs],
            "steps": steps,
            "checkpoints": [describe_run(d, kind) for d in run_dirs],
            "verdicts": read_verdicts(compared),
            "overall": (compared.get("verdict") or {}).get("status", "unknown"),
            "compare_error": error,
        }
    timings["total"] = time.monotonic() - started
    timings["cpu"] = _cpu_seconds()
    result["seconds"] = timings
    Path(job["result"]).write_text(json.dumps(result, indent=1, default=str))
    return result
