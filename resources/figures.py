"""Figures the Dagster UI shows on an asset's page at first sight: PNG files under
``$METAMORPH_HOME/figures``, served over HTTP by ``make ui``, linked from short markdown metadata.

Dagster 1.13's UI has no image metadata type. It renders a markdown metadata value inline (the
asset's Overview, "Latest materialization", and its Events table) only when the markdown is shorter
than 1,000 characters, else behind a "[Show Markdown]" link (ui-core ``MetadataEntry.tsx``:
``expandSmallValues && entry.mdStr.length < 1000``); a base64 PNG is never that short. Its markdown
renderer (react-markdown + rehype-sanitize, no raw HTML) shows ``![alt](http://…)`` as an image, and
the page's Content-Security-Policy does not restrict ``img-src``. So a figure is written once, named
by the sha256 of its bytes (:func:`store_png`), and its metadata is
``![<title>](<METAMORPH_FIGURES_URL>/<name>.png)`` (:func:`figure_markdown`), about 100 characters.

* ``METAMORPH_FIGURES_URL`` (default ``http://127.0.0.1:3001``): where the figure server answers,
  as the browser reaches it. ``scripts/ui.sh`` starts :func:`serve` on its host and port
  (``python -m resources.figures``) beside the UI and stops it with the UI. The URL is written into
  the metadata at materialization: a figure made under another URL is shown only where that one
  is served (rematerialize to move it).

The file name is the content hash, so a URL always shows the figure it was written for, and the
data directory can move (the URL holds no path).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from resources.paths import data_dir

DEFAULT_URL = "http://127.0.0.1:3001"
#: a figure's file name: the first 16 hex digits of the sha256 of its PNG bytes
NAME = re.compile(r"^/([0-9a-f]{16}\.png)$")


def figures_dir() -> Path:
    """``<METAMORPH_HOME>/figures`` (:func:`resources.paths.data_dir`)."""
    return data_dir() / "figures"


def figures_url() -> str:
    """``$METAMORPH_FIGURES_URL`` without a trailing slash (default :data:`DEFAULT_URL`)."""
    return (os.environ.get("METAMORPH_FIGURES_URL") or DEFAULT_URL).rstrip("/")


def store_png(png: bytes) -> str:
    """Write ``png`` to :func:`figures_dir` as ``<sha256[:16]>.png`` (once: an existing file of that
    name holds these bytes) and return the name. The write goes through a temporary file and a
    rename, so the server never serves half a file."""
    name = hashlib.sha256(png).hexdigest()[:16] + ".png"
    path = figures_dir() / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{name}.{os.getpid()}")
        tmp.write_bytes(png)
        tmp.replace(path)
    return name


def figure_markdown(png: bytes, title: str, full: bytes | None = None) -> str:
    """The markdown of a figure: ``![<title>](<figures_url>/<name>)`` for the stored ``png``; with
    ``full`` (the same figure at a higher resolution) the image links to it:
    ``[![<title>](<png URL>)](<full URL>)``. ``title`` (the alt text, shown where the image cannot
    be loaded) loses ``[`` ``]`` and newlines."""
    alt = re.sub(r"[\[\]\n\r]+", " ", title).strip() or "figure"
    image = f"![{alt}]({figures_url()}/{store_png(png)})"
    return image if full is None else f"[{image}]({figures_url()}/{store_png(full)})"


class _Handler(SimpleHTTPRequestHandler):
    """Serves ``GET /<16 hex>.png`` from the figures directory, nothing else (no listing, no other
    file); the files never change, so the browser may keep them."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if not NAME.match(self.path.split("?", 1)[0]):
            self.send_error(404)
            return
        super().do_GET()

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def end_headers(self):
        self.send_header("Cache-Control", "public, max-age=31536000, immutable")
        super().end_headers()

    def log_message(self, format, *args):  # quiet: the UI's own log is the one to read
        pass


def serve(directory: Path, host: str, port: int) -> ThreadingHTTPServer:
    """A started-on-demand figure server for ``directory`` on ``host:port`` (call
    ``serve_forever()``; ``shutdown()`` stops it). Raises OSError when the port is taken."""
    directory.mkdir(parents=True, exist_ok=True)
    return ThreadingHTTPServer((host, port), partial(_Handler, directory=str(directory)))


def main() -> int:
    """``python -m resources.figures``: serve :func:`figures_dir` at :func:`figures_url`'s host and
    port until interrupted; exits 1 with one line when that port is taken."""
    url = urlsplit(figures_url())
    host, port = url.hostname or "127.0.0.1", url.port or 80
    try:
        server = serve(figures_dir(), host, port)
    except OSError as exc:
        print(f"figures: cannot serve {figures_url()} ({exc.strerror}); figures are not shown inline", file=sys.stderr)
        return 1
    print(f"figures: serving {figures_dir()} at {figures_url()}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
