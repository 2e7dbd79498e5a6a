
use builtin;
use str;

set edit:completion:arg-completer[flux-tools] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'flux-tools'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'flux-tools'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand run 'Execute a batch'
            cand plan 'Dry run: phases, dependency graph, lanes, critical path; executes nothing'
            cand lock 'Pin what the model is shown in tools.lock beside the manifest: every tool''s definition (and a whole server''s prompts and resource templates), hashed'
            cand validate 'Check the manifest (and batches) and report every problem with its location'
            cand approvals 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each'
            cand approve 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it'
            cand deny 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)'
            cand tools 'List the manifest''s tools and their declarations, or (--emit) offer them to a model'
            cand mcp 'Work with Model Context Protocol servers'
            cand report 'Draw a results document as a timeline picture, or show a run history over time'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'flux-tools;run'= {
            cand --tenant 'Tenant for the tenant lane (overrides the batch''s)'
            cand --input-format 'What the input is: a batch, JSON Lines, or a model''s reply (openai, openai-responses, anthropic, gemini)'
            cand --max-concurrent-tools 'Narrow the turn lane (never widens the manifest''s)'
            cand --lane-store 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system''s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now'
            cand --format 'Output format [default: table on a terminal, jsonl otherwise]'
            cand --on-tool-error 'What a failed call does to the run'
            cand --deadline 'End the whole run after this long (e.g. 30s, 2m)'
            cand --max-cost 'Most the run may spend (sum of the tools'' `cost`); overrides the batch''s budget'
            cand --max-calls 'Most calls the run may make (replaces the manifest''s [budget] max_calls; a batch may only lower it); cache hits do not count'
            cand --history 'Append one line about this run to the history FILE [default: $FLUX_TOOLS_HISTORY, else the manifest''s [history] path]'
            cand --otlp 'Export the run''s spans (one per run, one per call) over OTLP/HTTP to this collector [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]'
            cand -o 'Also write the results document (json) to FILE, atomically'
            cand --output 'Also write the results document (json) to FILE, atomically'
            cand --progress 'Live lane display on stderr (auto: only when stderr is a terminal and CI is unset)'
            cand --journal 'Record every dispatch and result in FILE (append-only JSON lines, fsynced) or in Redis (redis://…, shared by every machine; running the same --run-id again resumes it)'
            cand --resume 'Continue the run journaled in FILE (or in Redis, with --run-id): completed calls keep their results, the rest run'
            cand --run-id 'Name the run: idempotency keys derive from it, so the same batch run again with the same id, on any machine, sends the same keys (with --turns, turn N is ID-N)'
            cand --trace 'Write a Chrome trace-event file of the run (open it in Perfetto)'
            cand --record 'Write a cassette of every call''s fingerprint and result to FILE'
            cand --replay 'Answer calls from the cassette FILE without invoking any tool'
            cand --approve 'Answer approvals in advance: `all`, `none`, or a comma-separated list of tools or of calls as ID@HASH (that call, only for the arguments with that hash, as `approvals` shows them); others are asked on the terminal, or refused when there is none. With --resume it answers the calls a paused run waits on'
            cand --emit 'Write the results as the messages to send back to the model: openai (tool messages), openai-responses (function_call_output items), anthropic (one user message of tool_result blocks), gemini (one content of functionResponse parts); one per line with --stream'
            cand --max-processes 'The most command calls in flight at once [default: derived from ulimit -n and -u]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --literal 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model''s reply is always read so)'
            cand --no-cache 'Answer nothing from the read cache and store nothing in it'
            cand --refresh 'Ignore cached results from earlier runs, but store this run''s'
            cand --stream 'Emit each result as a JSON line as soon as it and every earlier call have resolved'
            cand --turns 'One turn per line of stdin (a model''s reply or a batch on one line), each run as a batch and answered with one line (the --emit answer, or the results document); MCP sessions, HTTP connections, lanes and the cache are kept between turns'
            cand --run-id-from-reply 'Name the run after the model reply''s own id (chatcmpl-…, msg_…, resp_…, responseId)'
            cand --retry-indeterminate 'With --resume: send non-idempotent calls that were in flight again, with the same idempotency key (by default they are reported indeterminate)'
            cand --no-resend 'A write cut off in flight that its probe (`verify`) finds never landed is reported `not_applied` instead of being sent again once with the same idempotency key'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;plan'= {
            cand --tenant 'Tenant for the tenant lane (overrides the batch''s)'
            cand --input-format 'What the input is: a batch, JSON Lines, or a model''s reply (openai, openai-responses, anthropic, gemini)'
            cand --max-concurrent-tools 'Narrow the turn lane (never widens the manifest''s)'
            cand --lane-store 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system''s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now'
            cand --format 'Output format [default: table on a terminal, json otherwise]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --literal 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model''s reply is always read so)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;lock'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --check 'Write nothing: exit 1 and name each change when the servers differ from the lock'
            cand --update 'Accept every change: write the lock as the servers are now'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;validate'= {
            cand --format 'Output format [default: table]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;approvals'= {
            cand --lane-store 'Where the gateways keep their parked calls: their `--lane-store` (redis://… for replicas on one Redis) [default: this machine''s]'
            cand --format 'Output format [default: table]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;approve'= {
            cand --lane-store 'The gateways'' `--lane-store` (redis://… for replicas on one Redis)'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;deny'= {
            cand --lane-store 'The gateways'' `--lane-store` (redis://… for replicas on one Redis)'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;tools'= {
            cand --format 'Output format [default: table]'
            cand --emit 'Print the tools as PROVIDER''s request takes them (a JSON Schema per tool)'
            cand --tools 'Only these tools (comma-separated; manifest or exported names)'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --strict 'OpenAI''s strict mode for every tool whose schema allows it (stderr names the others)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;mcp'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand import 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste'
            cand login 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in'
            cand logout 'Forget a server''s sign-in (its kept tokens)'
            cand serve 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'flux-tools;mcp;import'= {
            cand --prefix 'Name each tool PREFIX.name (with `tool = "name"`), so two servers'' tools of the same name fit in one manifest'
            cand --reads 'Import the tools whose names match GLOB (`*`, `?`; comma-separated or repeated) as reads (effect = "read", idempotent), whatever their server declares'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;mcp;login'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --no-browser 'Print the URL to open instead of opening a browser'
            cand --status 'Show which servers are signed in, until when and with which scopes (never a token)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;mcp;logout'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;mcp;serve'= {
            cand --http 'Serve Streamable HTTP on ADDR (path /mcp), e.g. 127.0.0.1:8808, instead of stdio'
            cand --otlp 'Export each call''s span over OTLP/HTTP to this collector, in the client''s trace when its request carries `_meta.traceparent` [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]'
            cand --tools 'Only these tools (comma-separated; manifest or exported names)'
            cand --tenant 'The tenant of every call (stdio; over HTTP a bearer token names it)'
            cand --max-concurrent-tools 'Narrow each client''s turn lane (never widens the manifest''s max_concurrent_tools)'
            cand --lane-store 'Where the tenant, tool and shared lanes and the read cache live (see `run --lane-store`)'
            cand --allow-host 'Also accept this Host (HTTP; loopback names are always accepted). Repeatable'
            cand --allow-origin 'Accept requests from this browser Origin, e.g. https://app.example.com:443 (HTTP; without one, a request that carries an Origin is refused). Repeatable'
            cand --grace 'On SIGTERM, how long calls in flight may take to finish before they are cancelled'
            cand --max-processes 'The most calls in flight in this gateway''s command tools [default: from ulimit]'
            cand --audit 'Write the audit trail — every call allowed or refused, approval asked and answered, token rejected — as JSON lines to FILE (appended), or - for stderr'
            cand --workers 'The gateway''s worker threads [default: 1 over stdio (one client; its tools and upstreams are processes of their own), a core each over HTTP]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand --no-cache 'Answer nothing from the read cache and store nothing in it'
            cand --watch 'Reload the manifest when its file changes (it is always reloaded on SIGHUP)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;mcp;help'= {
            cand import 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste'
            cand login 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in'
            cand logout 'Forget a server''s sign-in (its kept tokens)'
            cand serve 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'flux-tools;mcp;help;import'= {
        }
        &'flux-tools;mcp;help;login'= {
        }
        &'flux-tools;mcp;help;logout'= {
        }
        &'flux-tools;mcp;help;serve'= {
        }
        &'flux-tools;mcp;help;help'= {
        }
        &'flux-tools;report'= {
            cand --svg 'Write an SVG here: a Gantt chart of a results document, or width and cost over time of a history'
            cand --history 'A run history (run --history): turns, fan-out width, speed-up, lane peaks, 429s and cost per turn, per period, and the first period whose width moved'
            cand --by 'Group the history by hour or day [default: day when it spans more than three days]'
            cand --min-turns 'Runs a period (and the periods before it) needs before a width shift is judged'
            cand --format 'Output format for a history [default: table]'
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'flux-tools;completions'= {
            cand --manifest 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]'
            cand --color 'When to use color (NO_COLOR is honoured)'
            cand -q 'Print no summary or warnings on stderr (errors still show)'
            cand --quiet 'Print no summary or warnings on stderr (errors still show)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'flux-tools;help'= {
            cand run 'Execute a batch'
            cand plan 'Dry run: phases, dependency graph, lanes, critical path; executes nothing'
            cand lock 'Pin what the model is shown in tools.lock beside the manifest: every tool''s definition (and a whole server''s prompts and resource templates), hashed'
            cand validate 'Check the manifest (and batches) and report every problem with its location'
            cand approvals 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each'
            cand approve 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it'
            cand deny 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)'
            cand tools 'List the manifest''s tools and their declarations, or (--emit) offer them to a model'
            cand mcp 'Work with Model Context Protocol servers'
            cand report 'Draw a results document as a timeline picture, or show a run history over time'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'flux-tools;help;run'= {
        }
        &'flux-tools;help;plan'= {
        }
        &'flux-tools;help;lock'= {
        }
        &'flux-tools;help;validate'= {
        }
        &'flux-tools;help;approvals'= {
        }
        &'flux-tools;help;approve'= {
        }
        &'flux-tools;help;deny'= {
        }
        &'flux-tools;help;tools'= {
        }
        &'flux-tools;help;mcp'= {
            cand import 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste'
            cand login 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in'
            cand logout 'Forget a server''s sign-in (its kept tokens)'
            cand serve 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers'
        }
        &'flux-tools;help;mcp;import'= {
        }
        &'flux-tools;help;mcp;login'= {
        }
        &'flux-tools;help;mcp;logout'= {
        }
        &'flux-tools;help;mcp;serve'= {
        }
        &'flux-tools;help;report'= {
        }
        &'flux-tools;help;completions'= {
        }
        &'flux-tools;help;help'= {
        }
    ]
    $completions[$command]
}
