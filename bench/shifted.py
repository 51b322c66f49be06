"""A shifted workload for the speculator retrain (issue 32): JSON-lines records.

The lab's target, draft and heads learn from the Python standard library's sources
(models/corpus.py); JSON records of people, orders and sensor readings are a kind of text those
sources hardly hold, as a deployment's own data (its schemas, its logs) would be to a speculator
trained on public chat. Each prompt is a few records of one schema, generated from a seeded
`random.Random` (field values from small fixed vocabularies), ending where the next record
begins, so the target continues the series.

Example:
    >>> len(json_records_prompts(3, seed=0))
    3
"""

from __future__ import annotations

import json
import random

_NAMES = ("ada", "alan", "grace", "linus", "guido", "barbara", "ken", "dennis", "edsger", "donald")
_CITIES = ("lyon", "oslo", "kyoto", "quito", "perth", "cairo", "lima", "turin", "porto", "accra")
_ITEMS = ("bolt", "gear", "valve", "pump", "spring", "washer", "bearing", "hinge", "clamp", "seal")
_STATES = ("ok", "warn", "fail")


def _person(rng: random.Random, i: int) -> dict:
    return {"id": i, "name": rng.choice(_NAMES), "age": rng.randint(18, 90),
            "city": rng.choice(_CITIES), "active": rng.random() < 0.7}


def _order(rng: random.Random, i: int) -> dict:
    return {"order_id": 1000 + i, "item": rng.choice(_ITEMS), "qty": rng.randint(1, 50),
            "price": round(rng.uniform(0.5, 99.0), 2),
            "status": rng.choice(("new", "paid", "sent"))}


def _reading(rng: random.Random, i: int) -> dict:
    return {"sensor": f"s{rng.randint(1, 9)}", "t": 1700000000 + 60 * i,
            "temp_c": round(rng.uniform(-5, 35), 1), "state": rng.choice(_STATES)}


SCHEMAS = (_person, _order, _reading)


def json_records_prompts(n: int, seed: int = 0, records: int = 4) -> list[str]:
    """`n` prompts, each `records` JSON lines of one schema (cycling over `SCHEMAS`) and the
    opening brace of the next line."""
    rng = random.Random(seed)
    prompts = []
    for p in range(n):
        schema = SCHEMAS[p % len(SCHEMAS)]
        start = rng.randint(0, 500)
        lines = [json.dumps(schema(rng, start + i)) for i in range(records)]
        prompts.append("\n".join(lines) + "\n{")
    return prompts
