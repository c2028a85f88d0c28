import pytest

from edge_sdk.fsutil import staging_dir


def test_staging_publishes_on_success(tmp_path):
    final = tmp_path / "out"
    with staging_dir(final) as tmp:
        (tmp / "f").write_text("x")
        assert not final.exists()
    assert (final / "f").read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_staging_leaves_nothing_on_failure_and_keeps_old(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old").write_text("keep")
    with pytest.raises(RuntimeError):
        with staging_dir(final, force=True) as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("boom")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (final / "old").read_text() == "keep"


def test_staging_refuses_existing_without_force(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        with staging_dir(tmp_path / "out"):
            pass


def test_published_permissions_follow_umask(tmp_path):
    import os
    import stat

    from edge_sdk.fsutil import atomic_write_bytes

    old = os.umask(0o022)
    try:
        with staging_dir(tmp_path / "out") as tmp:
            atomic_write_bytes(tmp / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "out" / "f").stat().st_mode) == 0o644
