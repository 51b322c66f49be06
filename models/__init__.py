"""The model lab: tokenizer, target and distilled draft built from the Python stdlib's sources.

Entry point: `python -m models.build` (see `models/README.md`); `python -m models.acceptance`
checks a build in vLLM.
"""
