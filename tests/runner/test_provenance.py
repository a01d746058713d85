"""runner/provenance.py: the commit a result records, dirty only when code changed."""

import subprocess

from jaxmarl_llm.runner.provenance import code_commit, unchanged_since


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_commit_is_dirty_only_when_code_changed(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / "experiments" / "results" / "r.json").write_text("{}\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = code_commit(tmp_path)
    assert head is not None and len(head) == 7 and "+" not in head
    (tmp_path / "experiments" / "results" / "r.json").write_text('{"a": 1}\n')
    assert code_commit(tmp_path) == head  # a rewritten result is not a code change
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# a page\n")
    (tmp_path / "experiments" / "claims.yaml").write_text("claims: []\n")
    _git(tmp_path, "add", ".")
    assert code_commit(tmp_path) == head  # nor is a page or the claims written about it
    assert unchanged_since(head, ("code.py",), tmp_path)
    (tmp_path / "code.py").write_text("x = 2\n")
    assert code_commit(tmp_path) == f"{head}+dirty"
    assert not unchanged_since(head, ("code.py",), tmp_path)
    assert unchanged_since(head, ("other.py",), tmp_path)  # only the paths asked about
    assert not unchanged_since(f"{head}+dirty", ("other.py",), tmp_path)  # cannot tell
    assert not unchanged_since(None, ("code.py",), tmp_path)


def test_outside_a_checkout(tmp_path):
    assert code_commit(tmp_path) is None
    assert not unchanged_since("abc1234", ("code.py",), tmp_path)


def test_kept_rows_get_the_commit_of_the_file_they_come_from(tmp_path):
    from jaxmarl_llm.runner.provenance import stamp_kept_rows

    _git(tmp_path, "init", "-q")
    table = tmp_path / "fig.json"
    table.write_text("[]\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = code_commit(tmp_path)
    rows = stamp_kept_rows([{"variant": "old"}, {"variant": "new", "commit": "abc1234"}], table)
    assert [r["commit"] for r in rows] == [head, "abc1234"]
