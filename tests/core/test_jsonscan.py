"""metamorph.jsonscan: the one string-aware scanner both JSON-reading studies use (hand-written cases)."""

from __future__ import annotations

from metamorph.jsonscan import fence_bodies, object_spans


def test_object_spans_are_string_aware():
    assert object_spans('x {"a": "}{"} y {"b": 1}') == ['{"a": "}{"}', '{"b": 1}']
    assert object_spans("{'a': '}'} tail") == ["{'a': '}'}"]
    assert object_spans('pre {"a": "cut') == ['{"a": "cut']  # unclosed: runs to the end
    assert object_spans("no braces") == []


def test_a_fence_inside_a_json_string_does_not_end_the_fence():
    text = '```json\n{"answer": "B", "why": "use ```code``` here"}\n```'
    assert fence_bodies(text) == ['{"answer": "B", "why": "use ```code``` here"}']


def test_the_closing_fence_after_the_object_closes_it_and_later_fences_are_found():
    text = '```\n{"answer": "B", "why": "a ``` b"}\n``` and ```json\n{"answer": "C"}\n```\nbye'
    assert fence_bodies(text) == ['{"answer": "B", "why": "a ``` b"}', '{"answer": "C"}']


def test_a_non_json_body_runs_to_the_next_fence_and_an_unclosed_one_to_the_end():
    assert fence_bodies('```python\nprint(1)\n```\nthen ```\n  {"a": 1') == ["print(1)\n", '{"a": 1']
    assert fence_bodies("plain text") == []
