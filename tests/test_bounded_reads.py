"""Every JSON file a command reads goes through spear_datasets.files.read_limited / read_json: a
pipe or a device is refused before it is opened (an open FIFO without a writer blocks for ever; a
device whose stat size is 0 would be read for ever), and never more than the limit is read."""

from __future__ import annotations

import json
import os

import pytest

from spear_datasets.files import read_json, read_limited


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "named.json"
    os.mkfifo(p)  # no writer: an open() would block, and its stat size is 0 like a device's
    return p


def test_read_limited_refuses_a_pipe_and_a_file_over_the_limit(tmp_path, fifo):
    with pytest.raises(ValueError, match="named.json is not a regular file"):
        read_limited(fifo, 10)
    with pytest.raises(ValueError, match="is not a regular file"):
        read_limited(tmp_path, 10)  # a folder
    p = tmp_path / "a.json"
    p.write_bytes(b"0123456789")
    assert read_limited(p, 10) == b"0123456789"  # exactly the limit: read
    with pytest.raises(ValueError, match="a.json is over the 9-byte limit"):
        read_limited(p, 9)
    with pytest.raises(FileNotFoundError):
        read_limited(tmp_path / "missing.json", 10)


def test_read_json_one_line_for_bad_json_and_deep_nesting(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"a": [1, 2]}))
    assert read_json(p, 100) == {"a": [1, 2]}
    p.write_text("[" * 100_000)  # past the parser's depth: RecursionError inside json
    with pytest.raises(ValueError, match="t.json is not JSON"):
        read_json(p, 10 ** 6)
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="t.json is not JSON"):
        read_json(p, 100)


def test_commands_refuse_a_pipe_given_as_their_json_file(fifo):
    """The readers that checked the size with stat() and then read the whole file (the v2 tasks
    file, judge-agreement's per_sample.jsonl) would block on a pipe or read a device for ever."""
    from spear_metrics.core.agreement import AgreementError, judged_values
    from spear_metrics.core.usage import PriceTable, PriceTableError
    from spear_metrics.full_duplex_v2.tasks import TasksError, load_tasks

    with pytest.raises(TasksError, match="is not a regular file"):
        load_tasks(fifo)
    with pytest.raises(AgreementError, match="is not a regular file"):
        judged_values(fifo)
    with pytest.raises(PriceTableError, match="is not a regular file"):
        PriceTable(fifo)
