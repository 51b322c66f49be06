"""The model lab: tokenizer, target and distilled draft built from the Python stdlib's sources.

Entry point: `python -m models.build` (see `models/README.md`);
`python -m models.speculators_report` checks a build in vLLM.

Public modules, those other packages and the docs use: the `python -m` entry points `build`,
`heads`, `speculators_report` and `tree_report` (cluster/cli.py calls the first
three's `main`; bench/lossless.py takes `speculative_config` from `speculators_report`),
`manifest` (`default_models_dir`) and `exact` (`pit_values`, `uniformity_test`). The package
imports none of them itself (most load torch or vLLM).
"""

__all__ = ["build", "exact", "heads", "manifest", "speculators_report", "tree_report"]
