"""Figures shown inline in the UI: a study figure's metadata is short markdown linking a PNG stored
once under ``$METAMORPH_HOME/figures`` by content hash (Dagster's UI renders markdown metadata in
place only below 1,000 characters), and ``python -m resources.figures`` serves exactly those files."""

from __future__ import annotations

import hashlib
import socket
import threading
import urllib.error
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from assets._common import INLINE_MAX_PX, figure_md, inline_png  # noqa: E402
from resources.figures import serve  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pngs(home) -> dict[int, str]:
    """The stored figures by pixel width (PNG IHDR), each checked to be named by its content."""
    out = {}
    for f in (home / "figures").iterdir():
        data = f.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and f.name == hashlib.sha256(data).hexdigest()[:16] + ".png"
        out[int.from_bytes(data[16:20], "big")] = f.name
    return out


def test_a_wide_figure_is_shown_at_most_360_px_wide_and_links_its_full_size(metamorph_home, monkeypatch):
    monkeypatch.setenv("METAMORPH_FIGURES_URL", "http://127.0.0.1:3071/")
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.bar(["txt", "md"], [50.0, 75.0])
    ax.set_title("Accuracy by format (%)")
    md = figure_md(fig).value
    pngs = _pngs(metamorph_home)
    (inline_px, full_px) = sorted(pngs)
    assert inline_px <= INLINE_MAX_PX == 360 and full_px > 700  # 8 in at 110 dpi (cropped); inline narrowed to the pane
    inline, full = pngs[inline_px], pngs[full_px]
    assert md == f"[![Accuracy by format (%)](http://127.0.0.1:3071/{inline})](http://127.0.0.1:3071/{full})"
    assert len(md) == 1 + 26 + 22 + 20 + 3 + 22 + 20 + 1 < 1000  # "[" "![…](" URL name ")](" URL name ")"


def test_a_very_wide_figure_is_made_narrower_not_its_text_smaller():
    fig, ax = plt.subplots(figsize=(20, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("t", fontsize=5)  # 5 pt at 110 dpi: 7.6 px, raised to 10 px
    png, smallest = inline_png(fig)
    assert int.from_bytes(png[16:20], "big") <= INLINE_MAX_PX and smallest >= 10
    assert ax.title.get_fontsize() == pytest.approx(10 * 72 / 110)
    plt.close(fig)


def test_a_narrow_figure_is_one_file_and_the_same_figure_is_stored_once(metamorph_home, monkeypatch):
    monkeypatch.delenv("METAMORPH_FIGURES_URL", raising=False)

    def narrow():
        fig, ax = plt.subplots(figsize=(3, 2))  # 3 x 2 in at 110 dpi: under 360 px, text at 10 pt
        ax.hist([47.2, 47.2, 44.4, 52.8])
        ax.set_title("Accuracy (%)")
        return figure_md(fig).value

    first, again = narrow(), narrow()
    [(width, name)] = _pngs(metamorph_home).items()
    assert width < 360
    assert first == again == f"[![Accuracy (%)](http://127.0.0.1:3001/{name})](http://127.0.0.1:3001/{name})"


def test_the_figure_server_serves_stored_pngs_and_nothing_else(tmp_path):
    (tmp_path / "0123456789abcdef.png").write_bytes(b"\x89PNG\r\n\x1a\nxyz")
    (tmp_path / "notes.txt").write_text("not a figure")
    port = free_port()
    server = serve(tmp_path, "127.0.0.1", port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/0123456789abcdef.png", timeout=10) as resp:
            assert (resp.status, resp.headers["Content-Type"], resp.read()) == (
                200,
                "image/png",
                b"\x89PNG\r\n\x1a\nxyz",
            )
        for path in ("/", "/notes.txt", "/../0123456789abcdef.png", "/0123456789ABCDEF.png"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert err.value.code == 404, path
    finally:
        server.shutdown()
        server.server_close()
