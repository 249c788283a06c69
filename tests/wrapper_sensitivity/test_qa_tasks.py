"""QA task items: loaders on the real shared samples, bad input (file, row, field), the synthetic default."""

from __future__ import annotations

import json
import re
from collections import Counter

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from metamorph.errors import InputError
from metamorph.studies.wrapper_sensitivity.tasks import (
    LOADERS,
    SYNTHETIC_TASKS,
    QAItem,
    load_task,
    normalize_number,
    synth_arith_rule,
    synth_choice_rule,
    synth_compare_rule,
    synthetic_tasks,
)
from tests.conftest import shared_sample


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def raw_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_shared(task):
    path = shared_sample(task)
    return path, load_task(f"{task}:{path}")


def assert_valid_golds(items):
    for x in items:
        if x.answer_type == "choice":
            assert x.gold in x.labels, x
        elif x.answer_type == "boolean":
            assert x.gold in ("true", "false") and x.choices == ()
        else:
            assert normalize_number(x.gold) == x.gold and x.choices == ()
    assert len({x.item_id for x in items}) == len(items)


# --- real shared samples (read by path at run time, never copied) ---------------------------


def test_boolq_sample():
    path, xs = load_shared("boolq")
    assert len(xs) == 200 and {x.task for x in xs} == {"boolq"} and {x.answer_type for x in xs} == {"boolean"}
    x = xs[0]
    assert (x.item_id, x.gold, x.choices) == ("boolq-45", "true", ())
    assert x.question == "does only the winner get money on tipping point"
    assert x.passage.startswith("Tipping Point (game show) -- Tipping Point is a British television game show")
    assert Counter(x.gold for x in xs) == {"true": 123, "false": 77}
    assert [x.gold for x in xs] == [("true" if r["answer"] else "false") for r in raw_rows(path)]
    assert_valid_golds(xs)


def test_arc_challenge_sample_keeps_numeric_labels():
    path, xs = load_shared("arc_challenge")
    assert len(xs) == 200 and {x.answer_type for x in xs} == {"choice"}
    x = xs[0]
    assert (x.item_id, x.gold, x.passage) == ("Mercury_SC_413549", "B", None)
    assert x.choices == (
        ("A", "8:05 in the morning"),
        ("B", "12:05 in the afternoon"),
        ("C", "4:05 in the afternoon"),
        ("D", "7:05 in the evening"),
    )
    numbered = {x.item_id: x for x in xs if x.labels == ("1", "2", "3", "4")}
    assert sorted(numbered) == ["NYSEDREGENTS_2010_8_16", "NYSEDREGENTS_2015_8_29"]
    assert numbered["NYSEDREGENTS_2010_8_16"].gold == "2" and numbered["NYSEDREGENTS_2015_8_29"].gold == "3"
    assert Counter(len(x.choices) for x in xs) == {4: 198, 3: 2}
    assert [x.gold for x in xs] == [r["answerKey"] for r in raw_rows(path)]
    assert_valid_golds(xs)


def test_gsm8k_sample_gold_is_the_number_after_hashes():
    path, xs = load_shared("gsm8k")
    assert len(xs) == 200 and {x.answer_type for x in xs} == {"numeric"}
    x = xs[0]
    assert (x.item_id, x.gold, x.choices, x.passage) == ("gsm8k-615", "33", (), None)
    assert x.question.startswith("Scarlett found an aquarium for $10.00 at a yard sale.")
    rows = raw_rows(path)
    # the independent `final_answer` field of the sample agrees with the parsed `answer` for all rows
    assert [x.gold for x in xs] == [r["final_answer"] for r in rows]
    assert sum("," in r["answer"].rsplit("####", 1)[1] for r in rows) == 2  # thousands separators removed
    assert_valid_golds(xs)


def test_commonsense_qa_sample():
    path, xs = load_shared("commonsense_qa")
    assert len(xs) == 200 and {x.labels for x in xs} == {("A", "B", "C", "D", "E")}
    x = xs[0]
    assert (x.item_id, x.gold) == ("30a8cfd186f1aae5acd425a52d058863", "B")
    assert (
        x.choices[1] == ("B", "homes")
        and x.question == "Humans need shelter to survive.  They usually find shelter where?"
    )
    assert Counter(x.gold for x in xs) == {"B": 48, "A": 43, "D": 39, "E": 36, "C": 34}
    assert_valid_golds(xs)


def test_winogrande_sample():
    path, xs = load_shared("winogrande")
    assert len(xs) == 200 and {x.labels for x in xs} == {("1", "2")}
    x = xs[0]
    assert (x.item_id, x.gold, x.choices) == ("winogrande-1233", "2", (("1", "Leslie"), ("2", "Kenneth")))
    assert x.question == (
        "Which option correctly fills the blank (_) in this sentence?\n"
        "The girl broke Leslie's heart but not Kenneth's because _ was never in love with her."
    )
    assert Counter(x.gold for x in xs) == {"1": 105, "2": 95}
    assert_valid_golds(xs)


def test_hellaswag_sample_gold_is_the_letter_of_the_label_index():
    path, xs = load_shared("hellaswag")
    assert len(xs) == 200 and {x.labels for x in xs} == {("A", "B", "C", "D")}
    x = xs[0]
    assert (x.item_id, x.gold) == ("hellaswag-43122", "C")  # label 2
    assert x.choices[2] == ("C", "continue passing the ball bath and fourth to each other.")
    assert x.passage.startswith("Playing lacrosse: Two boys are out in the yard playing ball.")
    assert x.passage.endswith("with lacrosse sticks. the boys")
    assert [x.gold for x in xs] == ["ABCD"[r["label"]] for r in raw_rows(path)]
    assert_valid_golds(xs)


def test_piqa_sample_gold_is_label_plus_one():
    path, xs = load_shared("piqa")
    assert len(xs) == 200 and {x.labels for x in xs} == {("1", "2")}
    x = xs[0]
    assert (x.item_id, x.gold) == ("piqa-729", "2")  # label 1
    assert x.choices == (
        ("1", "place a wall mirror on the floor of the cabinet"),
        ("2", "hold a hand mirror under the garbage disposable machine"),
    )
    assert x.question.startswith("Goal: to make it easier to push the reset button")
    assert Counter(x.gold for x in xs) == {"1": 98, "2": 102}
    assert_valid_golds(xs)


def test_limit_keeps_the_first_rows():
    path = shared_sample("piqa")
    assert [x.item_id for x in load_task(f"piqa:{path}", limit=3)] == ["piqa-729", "piqa-689", "piqa-1083"]


# --- other layouts: Hugging Face copies (hf://, Parquet) -------------------------------------


class _LocalHub(LocalFileSystem):
    """Stands in for the Hugging Face hub file system: hf://datasets/... -> a local folder."""

    protocol = "hf"
    root = ""

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith("hf://"):
            path = f"{cls.root}/{path[len('hf://') :]}"
        return super()._strip_protocol(path)


def test_hf_uri_with_hf_layout_choices_and_positional_ids(tmp_path):
    d = tmp_path / "datasets" / "allenai" / "ai2_arc"
    d.mkdir(parents=True)
    write_jsonl(
        d / "test.jsonl",
        [
            {
                "id": "q1",
                "question": "Q one?",
                "choices": {"text": ["x", "y", "z"], "label": ["A", "B", "C"]},
                "answerKey": "C",
            },
            {"id": "q2", "question": "Q two?", "choices": {"text": ["u", "v"], "label": ["1", "2"]}, "answerKey": "1"},
        ],
    )
    _LocalHub.root = str(tmp_path)
    fsspec.register_implementation("hf", _LocalHub, clobber=True)
    try:
        xs = load_task("arc_challenge:hf://datasets/allenai/ai2_arc/test.jsonl")
    finally:
        fsspec.register_implementation("hf", "huggingface_hub.HfFileSystem", clobber=True)
    assert [(x.item_id, x.choices, x.gold) for x in xs] == [
        ("q1", (("A", "x"), ("B", "y"), ("C", "z")), "C"),
        ("q2", (("1", "u"), ("2", "v")), "1"),
    ]


def test_parquet_hellaswag_and_gsm8k_without_ids(tmp_path):
    import pandas as pd

    hs = tmp_path / "hs.parquet"
    pd.DataFrame(
        [
            {
                "ind": 7,
                "activity_label": "Baking",
                "ctx_a": "She mixes flour.",
                "ctx_b": "she",
                "endings": ["bakes.", "swims.", "flies.", "sings."],
                "label": "0",
            }
        ]
    ).to_parquet(hs)
    (x,) = load_task(f"hellaswag:{hs}")
    assert (x.item_id, x.gold, x.passage) == ("hellaswag-7", "A", "Baking: She mixes flour. she")
    assert x.labels == ("A", "B", "C", "D")
    gs = write_jsonl(
        tmp_path / "gsm.jsonl",
        [{"question": "How many?", "answer": "2+2=4\n#### 1,250.50"}, {"question": "And now?", "answer": "#### -3"}],
    )
    assert [(x.item_id, x.gold) for x in load_task(f"gsm8k:{gs}")] == [("gsm8k-row1", "1250.5"), ("gsm8k-row2", "-3")]


# --- bad input: exact messages, all-or-nothing ------------------------------------------------

ARC_ROW = {
    "id": "a1",
    "question": "Which?",
    "choices": [{"label": k, "text": t} for k, t in zip("ABCD", "wxyz")],
    "answerKey": "B",
}


def test_missing_question_names_file_row_and_field(tmp_path):
    p = write_jsonl(
        tmp_path / "b.jsonl",
        [
            {"id": "b1", "question": "is it?", "passage": "P.", "answer": True},
            {"id": "b2", "question": "  ", "passage": "P.", "answer": False},
        ],
    )
    with pytest.raises(InputError) as e:
        load_task(f"boolq:{p}")
    assert str(e.value) == f"{p}, row 2, field 'question': missing or empty"
    assert (e.value.row, e.value.field) == (2, "question")


def test_duplicate_id_is_rejected(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [ARC_ROW, dict(ARC_ROW, question="Other?")])
    with pytest.raises(InputError) as e:
        load_task(f"arc_challenge:{p}")
    assert str(e.value) == f"{p}, row 2, field 'id': duplicate item_id 'a1' (first at row 1)"


def test_gold_outside_choices_is_rejected(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [dict(ARC_ROW, answerKey="E")])
    with pytest.raises(InputError) as e:
        load_task(f"arc_challenge:{p}")
    assert str(e.value) == (
        f"{p}, row 1, field 'answerKey': gold label 'E' is not one of the choice labels ['A', 'B', 'C', 'D']"
    )
    q = write_jsonl(tmp_path / "p.jsonl", [{"id": "p1", "goal": "g", "sol1": "a", "sol2": "b", "label": 2}])
    with pytest.raises(InputError) as e:
        load_task(f"piqa:{q}")
    assert (
        str(e.value)
        == f"{q}, row 1, field 'label': solution index 2 is out of range (PIQA's label is 0 for sol1 or 1 for sol2)"
    )


def test_gold_copy_must_agree_with_the_source_field(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [dict(ARC_ROW, gold="C")])
    with pytest.raises(InputError) as e:
        load_task(f"arc_challenge:{p}")
    assert str(e.value) == f"{p}, row 1, field 'gold': gold 'C' disagrees with answerKey ('B')"


def test_empty_file_and_missing_path(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError) as e:
        load_task(f"gsm8k:{empty}")
    assert str(e.value) == f"{empty}: file is empty"
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(InputError) as e:
        load_task(f"gsm8k:{missing}")
    assert str(e.value) == f"{missing}: file does not exist"


@pytest.mark.parametrize(
    "task,row,message",
    [
        ("gsm8k", {"id": "g1", "question": "Q?", "answer": "it is 4"}, "field 'answer': no '####' final-answer marker"),
        (
            "gsm8k",
            {"id": "g1", "question": "Q?", "answer": "#### four"},
            "field 'answer': the text after '####' is not a number: 'four'",
        ),
        (
            "boolq",
            {"id": "b1", "question": "q", "passage": "p", "answer": "maybe"},
            "field 'answer': expected a boolean answer (true/false, yes/no, 1/0), got 'maybe'",
        ),
        (
            "winogrande",
            {"id": "w1", "sentence": "A _ and _.", "option1": "x", "option2": "y", "answer": "1"},
            "field 'sentence': expected exactly one blank '_', found 2",
        ),
        (
            "hellaswag",
            {"id": "h1", "ctx": "c", "endings": ["a", "b", "c", "d"], "label": 4},
            "field 'label': gold label 'E' is not one of the choice labels ['A', 'B', 'C', 'D']",
        ),
        (
            "commonsense_qa",
            dict(ARC_ROW, choices=[{"label": "A", "text": "x"}, {"label": "A", "text": "y"}]),
            "field 'choices': duplicate choice labels ['A', 'A']",
        ),
        ("piqa", {"id": "p1", "goal": "g", "sol1": "a", "sol2": "", "label": 0}, "field 'sol2': missing or empty"),
    ],
)
def test_bad_rows(tmp_path, task, row, message):
    p = write_jsonl(tmp_path / "x.jsonl", [row])
    with pytest.raises(InputError) as e:
        load_task(f"{task}:{p}")
    assert str(e.value) == f"{p}, row 1, {message}"


def test_one_bad_row_loads_nothing(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [ARC_ROW, dict(ARC_ROW, id="a2"), dict(ARC_ROW, id="a3", answerKey="")])
    with pytest.raises(InputError, match="row 3, field 'answerKey': missing or empty"):
        load_task(f"arc_challenge:{p}")


def test_bad_specs():
    with pytest.raises(InputError) as e:
        load_task("mmlu:/x.jsonl")
    assert str(e.value) == (
        "mmlu:/x.jsonl: unknown task 'mmlu'; known: ['arc_challenge', 'boolq', 'commonsense_qa', "
        "'gsm8k', 'hellaswag', 'piqa', 'winogrande'] and 'synthetic'"
    )
    with pytest.raises(InputError, match="a task spec is 'synthetic' or"):
        load_task("boolq")
    assert set(LOADERS) == {"boolq", "arc_challenge", "gsm8k", "commonsense_qa", "winogrande", "hellaswag", "piqa"}


# --- canonical values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1,250.00", "1250"),
        ("0.50", "0.5"),
        (" 18 ", "18"),
        (18, "18"),
        (2.5, "2.5"),
        ("-0", "0"),
        ("-3.10", "-3.1"),
        ("1e3", "1000"),
        ("0.125", "0.125"),
    ],
)
def test_normalize_number(raw, expected):
    assert normalize_number(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "nan", "inf", "1/2", True, None])
def test_normalize_number_rejects(raw):
    with pytest.raises(ValueError):
        normalize_number(raw)


def test_qaitem_invariants():
    with pytest.raises(ValueError, match="gold 'C' is not one of the choice labels"):
        QAItem("i", "t", "choice", "Q?", (("A", "x"), ("B", "y")), "C")
    with pytest.raises(ValueError, match="boolean gold"):
        QAItem("i", "t", "boolean", "Q?", (), "yes")
    with pytest.raises(ValueError, match="numeric gold must be normalised"):
        QAItem("i", "t", "numeric", "Q?", (), "18.0")
    with pytest.raises(ValueError, match="has no choices"):
        QAItem("i", "t", "numeric", "Q?", (("A", "x"), ("B", "y")), "1")


# --- the embedded default --------------------------------------------------------------------


def test_synthetic_rules_by_hand():
    assert synth_arith_rule(8, 18, 11) == "66.5"  # (144 - 11) / 2
    assert synth_arith_rule(2, 5, 2) == "4"  # (10 - 2) / 2
    assert synth_compare_rule(45, 40) == "true" and synth_compare_rule(40, 40) == "false"
    assert synth_choice_rule((("A", "12"), ("B", "99"), ("C", "9"), ("D", "98"))) == "B"


def test_synthetic_tasks_are_deterministic_and_follow_their_rule():
    a = synthetic_tasks(8, seed=0)
    assert a == synthetic_tasks(8, seed=0) and a != synthetic_tasks(8, seed=1)
    assert load_task("synthetic") == a and load_task("synthetic?n_per_task=3&seed=1") == synthetic_tasks(3, 1)
    assert [x.task for x in a] == [t for t in SYNTHETIC_TASKS for _ in range(8)]
    assert {x.task: x.answer_type for x in a} == {
        "synth_arith": "numeric",
        "synth_compare": "boolean",
        "synth_choice": "choice",
    }
    assert a[0].item_id == "synth_arith-0-0000" and a[-1].item_id == "synth_choice-0-0007"
    assert_valid_golds(a)
    for x in a:
        if x.task == "synth_arith":
            s, k, c = map(
                int,
                re.match(r"A mill fills (\d+) sacks with (\d+) kg of flour each, sells (\d+) kg", x.question).groups(),
            )
            assert x.gold == synth_arith_rule(s, k, c)
        elif x.task == "synth_compare":
            name_a, x_age, name_b, y_age = re.match(
                r"(\w+) is (\d+) years old\. (\w+) is (\d+) years old\.", x.passage
            ).groups()
            assert x.question == f"Is {name_a} older than {name_b}?"
            assert x.gold == ("true" if int(x_age) > int(y_age) else "false")
        else:
            assert x.gold == max(x.choices, key=lambda c: int(c[1]))[0]
    assert [x.gold for x in a if x.task == "synth_compare"] == ["true", "false"] * 4
    assert [x.gold for x in a if x.task == "synth_choice"] == list("ABCDABCD")
    assert any("." in x.gold for x in a if x.task == "synth_arith")  # halves occur
    with pytest.raises(ValueError):
        synthetic_tasks(0)


@pytest.mark.parametrize(
    "task", ["arc_challenge", "commonsense_qa", "hellaswag", "boolq", "gsm8k", "piqa", "winogrande"]
)
def test_each_task_reads_the_same_items_from_jsonl_json_csv_and_parquet(task, tmp_path):
    """``choices`` (ARC, CommonsenseQA) and ``endings`` (HellaSwag) are JSON text in CSV cells,
    decoded by the shared reader."""
    from metamorph.studies.wrapper_sensitivity.tasks import load_task
    from tests.conftest import shared_sample
    from tests.formats import head_rows, same_items, write_formats

    rows = head_rows(shared_sample(task), 4)
    paths = write_formats(rows, tmp_path, task)
    items = {fmt: load_task(f"{task}:{p}") for fmt, p in paths.items()}
    assert len(items["jsonl"]) == 4
    texts = same_items(items, paths)
    assert texts["json"] == texts["csv"] == texts["parquet"] == texts["jsonl"]
