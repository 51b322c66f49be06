"""`specserve speculator retrain` on the tiny models (issue 32, parts 2-3), through the CLI:
captured traffic of a shifted kind (JSON records, bench/shifted.py) in the real capture store, the
lab's EAGLE-3 head trained further, vLLM measuring both heads, the versioned candidate written only
past the gate; and the refusals, named.

The captured rows are what capture records for greedy requests: the prompt's token ids and the
target's greedy continuation (models.distill.continue_tokens, the lab's writer).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from bench.shifted import json_records_prompts
from cluster.cli import main as cli
from core.capture_config import CaptureConfig
from core.capture_store import CaptureStore
from models.distill import continue_tokens

pytestmark = pytest.mark.engine

PROMPT_LEN, OUTPUT_LEN = 40, 64


def _config(tmp: Path, uri: str, **speculator) -> Path:
    data = yaml.safe_load(Path("cluster/examples/eagle3.yaml").read_text())
    data["speculative"]["speculator"].update(speculator)
    data["capture"] = {"enabled": True, "uri": uri}
    data["model"]["dtype"] = "float32"  # as the captured rows were written (the gate serves it so)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def captured(lab, tmp_path_factory) -> str:
    """A capture store of 160 greedy JSON-records requests, as the pools record them."""
    target_dir = Path(lab) / "target"
    tok = PreTrainedTokenizerFast.from_pretrained(target_dir)
    target = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    prompts = torch.tensor([tok(p).input_ids[-PROMPT_LEN:]
                            for p in json_records_prompts(160, seed=7)])
    with torch.no_grad():
        ids = continue_tokens(target, prompts, OUTPUT_LEN, 0.0)
    uri = str(tmp_path_factory.mktemp("capture"))
    rows = [{"time": float(i), "pool": "speculative", "task": "extraction", "temperature": 0.0,
             "prompt_token_ids": r[:PROMPT_LEN].tolist(),
             "output_token_ids": r[PROMPT_LEN:].tolist(),
             "finish_reason": "length"} for i, r in enumerate(ids)]
    assert CaptureStore(CaptureConfig(enabled=True, uri=uri)).write(rows) == (160, 0)
    return uri


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in sorted(folder.iterdir()))).hexdigest()


def test_retrain_raises_acceptance_on_the_shifted_traffic(lab, captured, tmp_path):
    serving = Path(lab) / "eagle3"
    before = _digest(serving)
    out = tmp_path / "heads"
    rc = cli(["speculator", "retrain", "--config", str(_config(tmp_path, captured)),
              "--out", str(out), "--steps", "60", "--vllm-prompts", "6",
              "--prompt-len", "32", "--output-len", "48", "--report", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    vllm = report["vllm"]
    # vLLM measured both heads on held-out captured prompts: the retrained head accepts more.
    cap = vllm["captured_heldout"]
    assert cap["candidate"] >= 1.1 * cap["serving"], report["gate"]
    assert report["windows"]["replay"] == report["windows"]["train"] > 0
    assert rc == (0 if report["promoted"] else 1)
    assert report["promoted"] == (report["gate"]["captured_ratio"] >= 1.05
                                  and report["gate"]["lab_ratio"] >= 0.95)
    if report["promoted"]:
        head = out / "eagle3-v1"
        assert report["path"] == str(head)
        assert {"config.json", "model.safetensors", "report.json"} <= {
            f.name for f in head.iterdir()}
        assert json.loads((head / "report.json").read_text())["gate"] == report["gate"]
    else:
        assert not out.exists() or not list(out.iterdir())  # nothing written past a refusal
    assert _digest(serving) == before  # the serving checkpoint is never touched


def test_retrain_refusals_name_the_field(lab, captured, tmp_path, capsys):
    rc = cli(["speculator", "retrain", "--config", str(_config(
        tmp_path, captured, method="draft_model", model="${models}/draft"))])
    assert rc == 2 and "speculative.speculator.method" in capsys.readouterr().err
    rc = cli(["speculator", "retrain", "--config", str(_config(tmp_path, str(tmp_path / "none")))])
    err = capsys.readouterr().err
    assert rc == 2 and "capture: 0 train and 0 held-out windows from 0 rows" in err
    rc = cli(["speculator", "retrain", "--config", str(_config(tmp_path, captured)),
              "--output-len", "1000"])
    assert rc == 2 and "--output-len" in capsys.readouterr().err
