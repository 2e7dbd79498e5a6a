"""A `Session` whose writes are cut off by their timeout, settled by their probe (`verify`)
against a local service that keeps effects by idempotency key, answers them by key (404 when
absent) and does not dedupe: every effect is made once, nothing is left indeterminate."""

import http.server
import json
import threading
import time

import flux_tools


class Effects(http.server.BaseHTTPRequestHandler):
    """POST /effects/MODE: `applied_late` applies then answers after 3 s; `lost` answers after
    3 s without applying the first time a key comes, and applies any later time. GET /effects
    answers the key's effect, or 404."""

    effects = {}
    seen = {}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        key = self.headers.get("Idempotency-Key")
        with self.lock:
            n = self.effects.get(key)
        if n is None:
            return self._answer(404, {"error": "no such effect"})
        self._answer(200, {"key": key, "applied": True, "times": n})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        key, mode = self.headers.get("Idempotency-Key"), self.path.rsplit("/", 1)[-1]
        with self.lock:
            self.seen[key] = self.seen.get(key, 0) + 1
            first = self.seen[key] == 1
        if mode == "lost" and first:
            time.sleep(3)
            return self._answer(200, {"late": True})
        with self.lock:
            self.effects[key] = self.effects.get(key, 0) + 1
        if mode == "applied_late":
            time.sleep(3)
        self._answer(200, {"key": key})


def test_a_sessions_cut_off_writes_are_settled_and_each_effect_is_made_once(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Effects)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    manifest = tmp_path / "tools.toml"
    manifest.write_text(f"""
[tools.pay]
kind = "http"
method = "POST"
url = "{base}/effects/{{mode}}"
effect = "write"
timeout = "500ms"
verify = "find_pay"
[tools.pay.args]
mode = {{ type = "string", required = true }}

[tools.find_pay]
kind = "http"
url = "{base}/effects"
effect = "read"
""")
    try:
        with flux_tools.Session(manifest=str(manifest)) as session:
            doc = session.turn([{"id": "a", "tool": "pay", "args": {"mode": "applied_late"}},
                                {"id": "b", "tool": "pay", "args": {"mode": "lost"}}])
        got = [(r["status"], r.get("settled")) for r in doc["results"]]
        assert got == [("ok", "applied"), ("ok", "not_applied")], doc
        assert doc["stats"]["settled"] == {"applied": 1, "not_applied": 1, "unknown": 0}, doc
        assert sorted(Effects.effects.values()) == [1, 1], Effects.effects
    finally:
        server.shutdown()
