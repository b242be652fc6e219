"""How `batchd export` writes each value: times in ISO 8601, decimals exact, bytes as base64, JSON lines in
UTF-8 one object a line (a stored document passed through when it is one line), lists in a CSV cell as JSON;
Parquet's absence said in one line."""
import io
import json
import sys
from datetime import date, datetime
from decimal import Decimal

import pytest

from batchd.errors import ConfigError
from batchd.export.formats import ENCODER, INSTALL_PARQUET, ROW_ENCODER, CsvWriter, JsonLinesWriter, open_writer

ROW = (datetime(2026, 12, 7, 5, 4, 3, 120000), date(2026, 1, 2), Decimal("19.90"), b"\x00\xff", None, "ünï\n\"x\"",
       [1, {"a": 2}])
COLUMNS = ("at", "day", "price", "raw", "none", "text", "nested")


def test_json_lines_write_each_value_so_a_reader_gets_it_back():
    out = io.StringIO()
    writer = JsonLinesWriter(out, COLUMNS)
    writer.write_rows([ROW])
    writer.write_documents(['{"stored":"as is"}', '{\n "spread": 1}', {"held": "in memory"}, b'{"as":"bytes"}'])
    first, *documents = out.getvalue().splitlines()
    assert json.loads(first) == {"at": "2026-12-07T05:04:03.120000", "day": "2026-01-02", "price": "19.90",
                                 "raw": "AP8=", "none": None, "text": "ünï\n\"x\"", "nested": [1, {"a": 2}]}
    assert "ünï" in first            # UTF-8, not \u escapes
    assert ROW_ENCODER(dict(zip(COLUMNS, ROW))) == ENCODER.encode(dict(zip(COLUMNS, ROW))) == first
    assert documents == ['{"stored":"as is"}', '{"spread":1}', '{"held":"in memory"}', '{"as":"bytes"}']


def test_csv_has_a_header_and_a_cell_per_value():
    out = io.StringIO()
    CsvWriter(out, COLUMNS).write_rows([ROW])
    assert out.getvalue() == ('at,day,price,raw,none,text,nested\r\n'
                              '2026-12-07T05:04:03.120000,2026-01-02,19.90,AP8=,,"ünï\n""x""","[1,{""a"":2}]"\r\n')


def test_parquet_without_pyarrow_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)       # an import of it fails, as where it is not installed
    with pytest.raises(ConfigError) as raised:
        open_writer("parquet", io.BytesIO(), COLUMNS)
    assert str(raised.value) == INSTALL_PARQUET and "batchd[export]" in INSTALL_PARQUET
