"""First-cut task classifier on clear examples of each type."""

import pytest

from router.classify import classify_text


@pytest.mark.parametrize("text, task", [
    ("def fibonacci(n):\n    ", "code"),
    ("Write a Python function that parses a JSON file and returns the keys.", "code"),
    ("import os\nimport sys\n\nclass Loader(object):", "code"),
    ("Solve the equation 3x + 5 = 20 for x.", "math"),
    ("What is 17 * 23 + 4?", "math"),
    ("Summarize the following article in three sentences: The city council met on...", "extraction"),
    ("Translate to French: the cat sleeps on the mat.", "extraction"),
    ("Write a short poem about the sea at night.", "creative"),
    ("Tell me a story about a dragon who learns to fly.", "creative"),
    ("Hi! How are you doing today?", "chat"),
    ("What do you think about remote work?", "chat"),
    ("", "chat"),
])
def test_clear_examples(text, task):
    assert classify_text(text) == task
