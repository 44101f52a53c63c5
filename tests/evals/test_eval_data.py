"""Data files: checksums, record counts, and the errors for missing, changed or malformed files."""
import shutil

import pytest

from acceptmoe.evals import data
from acceptmoe.evals.data import DataError, parse_jsonl, read_records

EXPECTED_RECORDS = {"gsm8k-test": 1319, "gsm8k-train": 7473, "math500": 500, "humaneval": 164, "mbpp": 974,
                    "humaneval-plus": 164, "mbpp-plus": 378}


@pytest.mark.parametrize("name", sorted(EXPECTED_RECORDS))
def test_every_file_verifies_and_has_the_expected_count(name):
    assert len(read_records(name)) == EXPECTED_RECORDS[name]


def test_records_are_fresh_copies():
    first = read_records("math500")
    first[0]["answer"] = "tampered"
    assert read_records("math500")[0]["answer"] != "tampered"


def test_missing_file_names_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataError, match=r"data file missing: .*gsm8k/test.jsonl"):
        read_records("gsm8k-test")


def test_changed_bytes_fail_the_checksum(tmp_path, monkeypatch):
    (tmp_path / "math500").mkdir()
    target = tmp_path / "math500" / "test.jsonl"
    shutil.copyfile(data.data_path("math500"), target)
    target.write_bytes(target.read_bytes().replace(b"\\frac", b"\\dfrac", 1))
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataError, match=r"checksum mismatch for .*math500/test.jsonl: expected sha256 35dc4108"):
        read_records("math500")


def test_unknown_file_lists_known_ones():
    with pytest.raises(DataError, match="known: .*gsm8k-test"):
        read_records("gsm9k")


@pytest.mark.parametrize("text, problem", [
    ('{"question": "q", "answer": "a"}\n{"question": "q", "answer": \n', r"f\.jsonl, line 2: not valid JSON"),
    ('{"question": "q", "answer": "a"}\n\n[1, 2]\n', r"f\.jsonl, line 3: expected a JSON object, found list"),
    ('{"question": "q"}\n', r"f\.jsonl, line 1: record lacks field\(s\) \['answer'\]"),
])
def test_malformed_lines_name_file_line_and_problem(text, problem):
    with pytest.raises(DataError, match=problem):
        parse_jsonl(text, "f.jsonl", ("question", "answer"))


def test_blank_lines_are_skipped():
    assert len(parse_jsonl('{"a": 1}\n\n{"a": 2}\n', "f", ("a",))) == 2


def test_limit():
    assert data.take([1, 2, 3], 2) == [1, 2]
    assert data.take([1, 2, 3], None) == [1, 2, 3]
    with pytest.raises(ValueError, match="limit must be >= 0"):
        data.take([1], -1)
