"""Build tiny causal-LM checkpoints inside the tests: no downloads, seconds on a CPU.

A checkpoint is a GPT-2 model (2 layers, width 32) plus a character-level tokenizer over
printable ASCII with role tokens and a chat template, written with ``save_pretrained`` exactly
as a training run (TRL, plain transformers) would leave it.
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHARS = list(string.ascii_letters + string.digits + string.punctuation + " \n")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(*, chat_template: bool = True, chars: list[str] | None = None):
    """A character-level tokenizer (one token per printable ASCII char) wrapped for transformers.

    ``chars`` reorders or changes the character vocabulary (to build a mismatched tokenizer).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + (chars or CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|pad|>",
        unk_token="<|unk|>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(
    vocab_size: int, *, seed: int, eos_token_id: int, pad_token_id: int, n_positions: int = 512
):
    """A randomly initialised 2-layer GPT-2; a wide init so next-token distributions are peaked."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=32,
        n_layer=2,
        n_head=2,
        initializer_range=0.3,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.eval()
    return model


def perturb(model, *, seed: int, scale: float) -> None:
    """Add seeded Gaussian noise (std ``scale``) to every parameter: the fine-tuned "policy"."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)


def save_checkpoint(model, tokenizer, directory: Path) -> Path:
    """Write model and tokenizer with ``save_pretrained`` only (what a training run leaves)."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_checkpoint(
    directory: Path,
    *,
    seed: int = 0,
    perturb_seed: int | None = None,
    scale: float = 0.03,
    chat_template: bool = True,
    chars: list[str] | None = None,
    n_positions: int = 512,
) -> Path:
    """Save one checkpoint; with ``perturb_seed`` its weights are the seed's plus seeded noise."""
    tokenizer = build_tokenizer(chat_template=chat_template, chars=chars)
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    pad = tokenizer.convert_tokens_to_ids("<|pad|>")
    model = build_model(
        len(tokenizer), seed=seed, eos_token_id=eos, pad_token_id=pad, n_positions=n_positions
    )
    if perturb_seed is not None:
        perturb(model, seed=perturb_seed, scale=scale)
    return save_checkpoint(model, tokenizer, directory)


def build_pair(root: Path, *, seed: int = 0, scale: float = 0.03) -> tuple[Path, Path]:
    """Save a reference checkpoint and a policy (the reference with perturbed weights)."""
    reference = build_checkpoint(root / "reference", seed=seed)
    policy = build_checkpoint(root / "policy", seed=seed, perturb_seed=seed + 1, scale=scale)
    return policy, reference


def grpo_config(output: Path, **extra: object):
    """The GRPO settings of the suite's 2-step trainer runs on a tiny model (CPU, seeded, no
    saving or reporting unless `extra` asks for it)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=6,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        use_cpu=True,
        seed=0,
        **{"report_to": [], "save_strategy": "no", **extra},
    )


def tool_calling_model(directory: Path):
    """A tiny checkpoint with room for tool schemas in the prompt (4,096 positions), loaded
    with TRL's qwen3 chat template, which renders tool calls: (model, processing_class) for a
    GRPOTrainer with `environment_factory`."""
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    checkpoint = build_checkpoint(directory, seed=0, n_positions=4096)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    tokenizer.chat_template = template.read_text()
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    return model, add_response_schema(tokenizer)
