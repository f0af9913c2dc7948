"""A Hugging Face hub stand-in on localhost: serves model directories under hub ids, the part of the hub's HTTP API
that ``huggingface_hub.snapshot_download`` uses (repository info, the file tree, file downloads).

``with serve_hub({"someone/tiny": model_dir}) as endpoint:`` starts it in a thread; point ``HF_ENDPOINT`` at
``endpoint`` and an empty ``HF_HUB_CACHE`` to test a first run on a fresh cache.  ``requests`` records every path
asked for (so a test can see what was downloaded, and how often).
"""

from __future__ import annotations

import hashlib
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Mapping
from urllib.parse import unquote, urlparse

#: The commit every served repository is at.
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Hub(ThreadingHTTPServer):
    repos: dict[str, Path]
    requests: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Hub

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _files(self, root: Path) -> list[Path]:
        return sorted(p for p in root.rglob("*") if p.is_file())

    def _route(self, head: bool) -> None:
        path = unquote(urlparse(self.path).path)
        self.server.requests.append(f"{self.command} {path}")
        for repo, root in self.server.repos.items():
            api = f"/api/models/{repo}/"
            if path.startswith(api + "revision/"):
                return self._json({"id": repo, "sha": COMMIT, "siblings": [
                    {"rfilename": str(p.relative_to(root))} for p in self._files(root)]})
            if path.startswith(api + "tree/"):
                return self._json([{"type": "file", "path": str(p.relative_to(root)), "size": p.stat().st_size,
                                    "oid": hashlib.sha1(p.read_bytes()).hexdigest()} for p in self._files(root)])
            prefix = f"/{repo}/resolve/"
            if path.startswith(prefix):
                name = path[len(prefix):].split("/", 1)[1]
                file = root / name
                if not file.is_file():
                    break
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)
                return
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


@contextmanager
def serve_hub(repos: Mapping[str, Path]) -> Iterator[_Hub]:
    """A running hub stand-in serving ``repos`` (hub id -> model directory); ``hub.endpoint`` is its URL."""
    server = _Hub(("127.0.0.1", 0), _Handler)
    server.repos = {k: Path(v) for k, v in repos.items()}
    server.requests = []
    server.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
