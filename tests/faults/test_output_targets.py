"""Files satbench writes outside a run directory: the sha256 cache and `capability -o`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from satbench.errors import RunDirError, UserError
from satbench.gguf.files import sha256_file
from satbench.http.endpoint import redact_url, split_credentials
from satbench.records.manifest import write_text_atomic


def test_the_sha256_cache_is_not_written_through_a_link_at_a_temporary_name(tmp_path):
    cache_dir, precious = tmp_path / ".satbench", tmp_path / "precious"
    cache_dir.mkdir()
    precious.write_text("precious\n")
    for name in ("sha256-cache.tmp", ".sha256-cache.json.tmp"):
        (cache_dir / name).symlink_to(precious)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    digest = sha256_file(model, cache_dir / "sha256-cache.json")
    assert precious.read_text() == "precious\n"
    assert digest in (cache_dir / "sha256-cache.json").read_text()
    assert sorted(p.name for p in cache_dir.iterdir()) == [".sha256-cache.json.tmp", "sha256-cache.json",
                                                           "sha256-cache.tmp"]


def test_a_refused_output_file_outside_a_run_directory_says_choose_another(tmp_path):
    (tmp_path / "out.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunDirError) as err:
        write_text_atomic(tmp_path / "out.json", "{}\n", output_flag="-o")
    assert str(err.value).endswith("(choose another -o)"), err.value
    assert "run directory" not in str(err.value)
    assert not (tmp_path / "elsewhere").exists()


def test_a_refused_file_in_a_run_directory_keeps_its_run_directory_advice(tmp_path):
    os.mkfifo(tmp_path / "results.json")
    with pytest.raises(RunDirError, match=r"named pipe.*in a run directory \(remove it\)"):
        write_text_atomic(tmp_path / "results.json", "{}\n")


def test_a_character_device_output_is_written_directly(tmp_path):
    write_text_atomic(Path("/dev/null"), "{}\n", output_flag="-o")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name, stream", [("/dev/stdout", "out"), ("/dev/stderr", "err")])
def test_the_standard_streams_are_acceptable_output_names(capfd, name, stream):
    write_text_atomic(Path(name), '{"a": 1}\n', output_flag="-o")
    assert getattr(capfd.readouterr(), stream) == '{"a": 1}\n'


@pytest.mark.parametrize("url", ["http://[::1", "http://user:pw@[::1", "//[x", "https://[zz]:8080"])
def test_a_malformed_url_is_a_user_error_and_redacting_it_never_raises(url):
    shown = redact_url(url)
    assert "pw" not in shown
    with pytest.raises(UserError, match=r"^--url \S+: not a valid URL \("):
        split_credentials(url)


def test_a_malformed_url_in_a_lane_file_is_one_line_before_any_run_dir(tmp_path, capsys, monkeypatch):
    from satbench.cli.main import main
    from tests.faults.common import one_error_line

    monkeypatch.chdir(tmp_path)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text('[[lanes]]\nname = "a"\nruntime = "url"\nurl = "http://[::1"\n')
    assert main(["sweep", "--lanes", str(lanes), "-o", str(tmp_path / "run")]) == UserError.exit_code
    line = one_error_line(capsys.readouterr().err)
    assert "http://[::1: not a valid URL (Invalid IPv6 URL)" in line, line
    assert not (tmp_path / "run").exists()
