"""Fine-tuning models, one sub-package per method over a shared loop.

* :mod:`anygrain.train.dpr` -- DPR bi-encoders (full, or query-side against a frozen index);
* :mod:`anygrain.train.phrase` -- DensePhrases models, and query-side fine-tuning of one
  against a built phrase index;
* :mod:`anygrain.train.reader` -- extractive readers.

Each package has a ``config.py`` (its config dataclass, saved beside the run) and exposes
``train(config) -> Path``.  What they share lives here: the step loop (``loop.py``), the
run directory (``run_dir.py``), checkpoints, optimiser, saved configs and logs.
"""
