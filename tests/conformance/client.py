#!/usr/bin/env python3
"""flux-tools as the client of the MCP conformance suite's client scenarios.

    conformance client --command "python3 tests/conformance/client.py" --scenario auth/metadata-default

The suite appends the server's URL and sets MCP_CONFORMANCE_SCENARIO (and, for client
credentials, MCP_CONFORMANCE_CONTEXT). This only writes a manifest and calls flux-tools: an
`auth/*` scenario signs in with `flux-tools mcp login s --no-browser`, here the "browser" that
follows the printed URL (the suite's authorization server approves at once and redirects to
flux-tools' loopback listener); then every tool the server lists is called once.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

FLUX = os.environ.get("FLUX_TOOLS", "flux-tools")


def manifest(url, scenario, ctx):
    # This suite release checks that a client offers 2025-11-25 (flux-tools offers 2026-07-28
    # and takes a server's answer down to any revision it speaks).
    lines = ["[mcp_servers.s]", f"url = {json.dumps(url)}", "whole = true", 'prefix = ""',
             'protocol_version = "2025-11-25"']
    if ctx.get("private_key_pem"):
        lines += ['auth = "client_credentials"', f"client_id = {json.dumps(ctx['client_id'])}",
                  'private_key = "${env:CONFORMANCE_KEY}"', f"signing_alg = {json.dumps(ctx['signing_algorithm'])}"]
    elif scenario.startswith("auth/client-credentials"):
        lines += ['auth = "client_credentials"', f"client_id = {json.dumps(ctx['client_id'])}",
                  'client_secret = "${env:CONFORMANCE_SECRET}"']
    elif scenario.startswith("auth/"):
        lines.append('auth = "oauth"')
        if ctx.get("client_id"):
            lines.append(f"client_id = {json.dumps(ctx['client_id'])}")
        if ctx.get("client_secret"):
            lines.append('client_secret = "${env:CONFORMANCE_SECRET}"')
        if scenario == "auth/basic-cimd":
            lines.append('client_metadata_url = "https://conformance-test.local/client-metadata.json"')
    return "\n".join(lines) + "\n"


def login(env):
    """`mcp login` with the URL it prints followed by this process, as a browser would."""
    p = subprocess.Popen([FLUX, "mcp", "login", "s", "--no-browser"], env=env, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        m = re.match(r"\s+(https?://\S+)$", line)
        if m:
            try:
                urllib.request.urlopen(m.group(1), timeout=20).read()
            except Exception as e:  # the redirect's page: the login says how it went
                sys.stderr.write(f"browser: {e}\n")
    return p.wait()


def main():
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, XDG_STATE_HOME=os.path.join(work, "state"),
                   FLUX_TOOLS_MANIFEST=os.path.join(work, "tools.toml"),
                   CONFORMANCE_SECRET=ctx.get("client_secret", ""), CONFORMANCE_KEY=ctx.get("private_key_pem", ""))
        with open(env["FLUX_TOOLS_MANIFEST"], "w") as f:
            f.write(manifest(url, scenario, ctx))
        if 'auth = "oauth"' in open(env["FLUX_TOOLS_MANIFEST"]).read() and login(env) != 0:
            return 1
        listed = subprocess.run([FLUX, "tools", "--format", "json"], env=env, capture_output=True, text=True)
        sys.stderr.write(listed.stderr)
        if listed.returncode != 0:
            return listed.returncode
        tools = [t["name"] for t in json.loads(listed.stdout)["tools"]]
        args = {"add_numbers": {"a": 2, "b": 3}}
        batch = "".join(json.dumps({"tool": t, "args": args.get(t, {})}) + "\n" for t in tools)
        for attempt in range(2):
            run = subprocess.run([FLUX, "run", "-", "--format", "jsonl"], env=env, input=batch, capture_output=True, text=True)
            sys.stdout.write(run.stdout)
            sys.stderr.write(run.stderr)
            # A server that wants more scope (403 insufficient_scope): flux-tools keeps the
            # scope and says the next sign-in asks for it; sign in once more, and no more.
            if "the next sign-in asks for it" not in run.stdout or attempt == 1 or login(env) != 0:
                return run.returncode
        return 1


if __name__ == "__main__":
    sys.exit(main())
