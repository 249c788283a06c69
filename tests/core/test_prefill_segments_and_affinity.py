"""Where a local prompt is cut into batches (``prefix_segments``: the system prompt, two
paragraphs, the rest but the last token), and which worker a call goes to (``WorkerPool``'s
affinity: a prompt asked again goes to the worker that computed it). The pool runs real worker
processes; a call answers with the worker's process id."""

import os
import threading
import time
from dataclasses import dataclass

from metamorph.providers.llama_cpp import MIN_PREFIX_TOKENS, PREFIX_PARAGRAPHS, prefix_segments
from metamorph.providers.llama_workers import WorkerPool


def chars(text: str) -> list[int]:
    """A tokenizer of one token per character."""
    return [ord(c) for c in text]


LEAD = "S" * 20
#: the lead (20 tokens), a paragraph ending at 40, another ending at 72, then 13 tokens
PROMPT = LEAD + "A" * 18 + "\n\n" + "B" * 30 + "\n\n" + "C" * 10 + "\n\nD"


def test_segments_end_after_the_lead_two_paragraphs_and_before_the_last_token():
    assert (MIN_PREFIX_TOKENS, PREFIX_PARAGRAPHS, len(PROMPT)) == (16, 2, 85)
    segments = prefix_segments(PROMPT, LEAD, chars)
    assert [len(s) for s in segments] == [20, 40, 72, 84]
    assert all(s == tuple(chars(PROMPT))[: len(s)] for s in segments)


def test_a_prompt_ending_one_token_after_its_last_paragraph_has_no_segment_of_its_own():
    prompt = PROMPT[:73]
    assert [len(s) for s in prefix_segments(prompt, LEAD, chars)] == [20, 40, 72]


def test_a_short_leading_segment_joins_the_next_and_no_lead_is_one_batch():
    short = "S" * 10  # 10 < 16 tokens: no segment of its own
    prompt = short + "A" * 18 + "\n\n" + "B" * 30 + "\n\n" + "C" * 5
    assert [len(s) for s in prefix_segments(prompt, short, chars)] == [30, 62, 66]
    assert prefix_segments(PROMPT, None, chars) == ()
    assert prefix_segments(PROMPT, "not in the prompt", chars) == ()


@dataclass(frozen=True)
class PidSpec:
    """Workers whose one call, ``("pid", seconds)``, sleeps that long and answers its process id."""

    label = "pid"
    kind = "test worker"

    def calls(self) -> dict:
        def pid(seconds: float) -> int:
            time.sleep(seconds)
            return os.getpid()

        return {"pid": pid}


def test_a_prompt_asked_again_goes_to_the_worker_that_computed_it():
    pool = WorkerPool(2, PidSpec())
    try:
        # one caller: without an affinity the longest-idle worker takes each call (a, b, a)
        a, b, a2 = (pool._call("pid", 0) for _ in range(3))
        assert a != b and a2 == a
        # with one: every call of P on the worker that took P first, Q on the other one
        p = [pool._call("pid", 0, affinity="P") for _ in range(3)]
        q = pool._call("pid", 0, affinity="Q")
        assert p == [p[0]] * 3 and q != p[0]
        assert [pool._call("pid", 0, affinity=k) for k in ("P", "Q", "P")] == [p[0], q, p[0]]
    finally:
        pool.close()


def test_a_call_whose_worker_stays_busy_is_computed_by_an_idle_one():
    pool = WorkerPool(2, PidSpec())
    try:
        first = pool._call("pid", 0, affinity="P")
        busy = threading.Thread(target=pool._call, args=("pid", 3.0), kwargs={"affinity": "P"})
        busy.start()
        time.sleep(0.2)  # the slow call of P is on the worker that computed P
        other = pool._call("pid", 0, affinity="P")
        assert other != first and busy.is_alive()  # taken by the idle worker, not after the slow call
        busy.join()
    finally:
        pool.close()
