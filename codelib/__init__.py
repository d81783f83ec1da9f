"""codelib: RL fine-tuning of code LLMs with unit-test rewards (README.md: what it is, how to run and extend it).

Importing the package silences three messages that libraries print on every run and that say nothing about ours,
so an executed notebook's output is the run's own (tests/test_notebooks.py's smoke run checks it: `NOISE`):
- bitsandbytes' "Failed to load CPU gemm_4bit_forward" (an optional CPU kernel; 4-bit here needs CUDA anyway);
- transformers' FutureWarnings that `gradient_checkpointing*` is renamed (raised inside TRL and peft's calls).
Warnings about our own code are not filtered: a `float()` of a tensor that requires grad, or a SyntaxWarning from
compiling a completion, is fixed where it happens (`.detach()`, `codelib.extraction.parse`).
"""

import logging
import warnings


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_DropMessage("Failed to load CPU gemm_4bit_forward"))
warnings.filterwarnings("ignore", message=r"`\w*gradient_checkpointing\w*` is deprecated", category=FutureWarning)
