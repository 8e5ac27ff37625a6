"""``python -m calibflow.pipeline.report --paper KEY --source JSON``: a stored (committed) larger-profile
result as its own
page beside the pipeline's, e.g. docs/reproductions/calem_standard.json."""

from __future__ import annotations

import pytest

from calibflow.pipeline import report
from calibflow.pipeline._common import StageError
from calibflow.results import Reproduction, Table


def _stored(path, key="calem", profile="standard"):
    Reproduction(
        key=key,
        paper="A stored paper (2026)",
        profile=profile,
        tables=[Table("Table 1 <b>", ["cell", "ours"], [["g1/h1", "+1.00%"]])],
        notes=["thirty replications"],
    ).save(path)
    return path


def test_stored_result_renders_beside_the_pipeline_page(tmp_path):
    src = _stored(tmp_path / "calem_standard.json")
    out = report.run_paper("calem", tmp_path, source=src)
    assert out == tmp_path / "reports" / "pages" / "paper-calem-standard.html"
    text = out.read_text()
    assert "<title>Paper reproduction: A stored paper (2026) (standard profile, stored result " in text
    assert "calem_standard.json" in text and "thirty replications" in text
    assert "Table 1 &lt;b&gt;" in text  # table titles escaped as on every paper page
    assert not (tmp_path / "reports" / "pages" / "paper-calem.html").exists()
    # the index's page list picks it up with the distinguishing title
    links = report.page_links(tmp_path / "reports" / "pages")
    assert links == [("pages/paper-calem-standard.html", text.split("<title>")[1].split("</title>")[0])]


def test_stored_result_of_another_paper_or_missing_file_is_refused(tmp_path, capsys):
    src = _stored(tmp_path / "x.json", key="vad")
    with pytest.raises(StageError, match="holds paper 'vad', not 'calem'"):
        report.run_paper("calem", tmp_path, source=src)
    with pytest.raises(StageError, match="check the --source path"):
        report.run_paper("calem", tmp_path, source=tmp_path / "nope.json")
    with pytest.raises(SystemExit):
        report.main(["--source", str(src)])
    assert "--source needs --paper" in capsys.readouterr().err
