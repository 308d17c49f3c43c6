"""The SQL92 filter: RocketMQ's grammar and evaluation semantics, and clear errors on bad input."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferrymq.broker.filters import FilterCache, FilterError
from ferrymq.broker.sql92 import SqlFilter, SqlFilterError

MSG = {
    "huge": "9" * 5000,
    "a": "10",
    "b": "2.5",
    "s": "hello world",
    "flag": "true",
    "neg": "-3",
    "word": "abc",
    "big": "9e3",
}


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("a > 5", True),
        ("a >= 10 AND a <= 10", True),
        ("a < 5", False),
        ("a = 10", True),
        ("a = 10.0", True),  # a string property meets a number: compared as a number
        ("a <> 10", False),
        ("b > 2.0", True),
        ("b > 2", False),  # RocketMQ reads '2.5' as the literal's type, an integer: it is not one
        ("b BETWEEN 2.0 AND 3.0", True),
        ("b NOT BETWEEN 2.0 AND 3.0", False),
        ("a BETWEEN -1 AND 9", False),
        ("neg < -2", True),
        ("neg > - 2", False),
        ("-5 < a", True),
        ("big > 8000.0", True),
        ("big > 8000", False),
        ("a > b", True),  # two properties are ordered as numbers
        ("s = 'hello world'", True),
        ("s <> 'x'", True),
        ("word IN ('x', 'abc')", True),
        ("word NOT IN ('x', 'abc')", False),
        ("s CONTAINS 'lo w'", True),
        ("s NOT CONTAINS 'zzz'", True),
        ("s STARTSWITH 'hell'", True),
        ("s ENDSWITH 'world'", True),
        ("s NOT ENDSWITH 'world'", False),
        ("flag = TRUE", True),
        ("flag = FALSE", False),
        ("missing IS NULL", True),
        ("a IS NULL", False),
        ("a IS NOT NULL", True),
        ("TRUE", True),
        ("FALSE OR TRUE", True),
        ("a", False),  # a property used as a condition is not TRUE
        ("(a > 5 OR missing > 1) AND NOT (word = 'x')", True),
        ("a > 5 AND s STARTSWITH 'h' AND word IN ('abc') AND b < 3.0", True),
        ("word = 'it''s'", False),
        ("a>5/*comment*/AND b<3.0 -- trailing comment", True),
        ("A > 5", False),  # property names are case-sensitive...
        ("a > 5 and b < 3.0 Or FALSE", True),  # ...keywords are not
        ("a = 10L", True),
        ("b > .5 AND b < 2.5e1", True),
    ],
)
def test_semantics_match_rocketmq(expression, expected):
    assert SqlFilter(expression).matches(MSG) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "missing > 1",  # comparing NULL is unknown, and unknown is not a match
        "missing = 'x'",
        "missing <> 'x'",  # NOT unknown stays unknown
        "NOT (missing > 1)",
        "missing IN ('x')",
        "missing NOT IN ('x')",
        "missing CONTAINS 'x'",
        "missing NOT CONTAINS 'x'",  # RocketMQ answers FALSE for a missing operand, NOT forms too
        "missing BETWEEN 1 AND 2",
        "missing NOT BETWEEN 1 AND 2",
        "TRUE AND missing > 1",
        "word > 1",  # 'abc' is no number: the message does not match (no error, no crash)
        "word = 1",
        "s CONTAINS ''",
        "-word < 1",
        "huge = 1",  # digits beyond 64 bits are no integer
    ],
)
def test_null_and_unconvertible_values_never_match(expression):
    assert SqlFilter(expression).matches(MSG) is False


def test_three_valued_or_still_matches_when_one_side_is_true():
    assert SqlFilter("missing > 1 OR a = 10").matches(MSG)
    assert not SqlFilter("missing > 1 AND a = 10").matches(MSG)


@pytest.mark.parametrize(
    "expression, says",
    [
        ("", "empty"),
        ("a >", "expected a value"),
        ("a > 5 b", "expected AND, OR or the end"),
        ("a = NULL", "IS NULL"),
        ("a > 'x'", "only numbers"),
        ("a > TRUE", "only numbers"),
        ("(a > 1) > 2", "cannot be compared"),
        ("NOT a > 5", "cannot be compared"),  # NOT binds tighter than >, as in RocketMQ: NOT (a > 5)
        ("5 IN ('a')", "IN needs a property"),
        ("a IN (1, 2)", "expected a 'string'"),
        ("a BETWEEN 5 AND 1", "low bound is above"),
        ("a BETWEEN NULL AND 1", "cannot be NULL"),
        ("TRUE = 1", "cannot be compared"),
        ("'open", "unterminated string"),
        ("a # 1", "unexpected character '#'"),
        ("a = 99999999999999999999", "64-bit"),
        ("((((a = 1)", "expected )"),
        ("(" * 100 + "a" + ")" * 100, "nested deeper"),
        ("NOT " * 100 + "TRUE", "nested deeper"),
        ("a = 1 AND", "expected a value"),
        ("a CONTAINS b", "expected a 'string'"),
    ],
)
def test_bad_expressions_get_a_clear_error(expression, says):
    with pytest.raises(SqlFilterError) as info:
        SqlFilter(expression)
    assert says in str(info.value)


def test_long_flat_expressions_are_fine():
    """AND/OR chains are flat lists, so a long one neither recurses deeply nor fails."""
    big = (
        " AND ".join(f"a > {i}" for i in range(9))
        + " OR "
        + " OR ".join(f"word = 'w{i}'" for i in range(500))
    )
    assert SqlFilter(big).matches(MSG)


_SQL_WORDS = st.sampled_from(
    ["a", "b", "s", "NOT", "AND", "OR", "IS", "NULL", "IN", "BETWEEN", "TRUE", "FALSE", "CONTAINS", "(", ")",
     ",", "=", "<>", ">", ">=", "<", "<=", "+", "-", "'x'", "'", "1", "2.5", ".5e3", "1L", "--", "/*", "*/"]
)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(max_size=80), st.lists(_SQL_WORDS, max_size=25).map(" ".join)))
@example("(" * 5000)
@example("- " * 5000 + "1")
@example("\x00")
@example("a = " + "9" * 5000)
def test_garbage_raises_only_the_filter_error_and_evaluation_never_fails(text):
    try:
        compiled = SqlFilter(text)
    except SqlFilterError:
        return
    assert compiled.matches(MSG) in (True, False)
    assert compiled.matches({}) in (True, False)


def test_the_broker_cache_compiles_once_and_refuses_sql_when_disabled():
    cache = FilterCache(enable_property_filter=True)
    first = cache.get("a > 5", "SQL92")
    assert cache.get("a > 5", "sql92") is first and first.sql is not None
    assert cache.get("TagA || TagB", "TAG").tag_codes is not None and cache.get("*", None).tag_codes is None
    with pytest.raises(FilterError, match="bad SQL92 expression"):
        cache.get("a >", "SQL92")
    with pytest.raises(FilterError, match="unknown expression type"):
        cache.get("x", "CLASS")
    with pytest.raises(FilterError, match="enable_property_filter"):
        FilterCache(enable_property_filter=False).get("a > 5", "SQL92")
