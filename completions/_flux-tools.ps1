
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'flux-tools' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'flux-tools'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'flux-tools' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Execute a batch')
            [CompletionResult]::new('plan', 'plan', [CompletionResultType]::ParameterValue, 'Dry run: phases, dependency graph, lanes, critical path; executes nothing')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Pin what the model is shown in tools.lock beside the manifest: every tool''s definition (and a whole server''s prompts and resource templates), hashed')
            [CompletionResult]::new('validate', 'validate', [CompletionResultType]::ParameterValue, 'Check the manifest (and batches) and report every problem with its location')
            [CompletionResult]::new('approvals', 'approvals', [CompletionResultType]::ParameterValue, 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each')
            [CompletionResult]::new('approve', 'approve', [CompletionResultType]::ParameterValue, 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it')
            [CompletionResult]::new('deny', 'deny', [CompletionResultType]::ParameterValue, 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)')
            [CompletionResult]::new('tools', 'tools', [CompletionResultType]::ParameterValue, 'List the manifest''s tools and their declarations, or (--emit) offer them to a model')
            [CompletionResult]::new('mcp', 'mcp', [CompletionResultType]::ParameterValue, 'Work with Model Context Protocol servers')
            [CompletionResult]::new('report', 'report', [CompletionResultType]::ParameterValue, 'Draw a results document as a timeline picture, or show a run history over time')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'flux-tools;run' {
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant for the tenant lane (overrides the batch''s)')
            [CompletionResult]::new('--input-format', '--input-format', [CompletionResultType]::ParameterName, 'What the input is: a batch, JSON Lines, or a model''s reply (openai, openai-responses, anthropic, gemini)')
            [CompletionResult]::new('--max-concurrent-tools', '--max-concurrent-tools', [CompletionResultType]::ParameterName, 'Narrow the turn lane (never widens the manifest''s)')
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system''s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format [default: table on a terminal, jsonl otherwise]')
            [CompletionResult]::new('--on-tool-error', '--on-tool-error', [CompletionResultType]::ParameterName, 'What a failed call does to the run')
            [CompletionResult]::new('--deadline', '--deadline', [CompletionResultType]::ParameterName, 'End the whole run after this long (e.g. 30s, 2m)')
            [CompletionResult]::new('--max-cost', '--max-cost', [CompletionResultType]::ParameterName, 'Most the run may spend (sum of the tools'' `cost`); overrides the batch''s budget')
            [CompletionResult]::new('--max-calls', '--max-calls', [CompletionResultType]::ParameterName, 'Most calls the run may make (replaces the manifest''s [budget] max_calls; a batch may only lower it); cache hits do not count')
            [CompletionResult]::new('--history', '--history', [CompletionResultType]::ParameterName, 'Append one line about this run to the history FILE [default: $FLUX_TOOLS_HISTORY, else the manifest''s [history] path]')
            [CompletionResult]::new('--otlp', '--otlp', [CompletionResultType]::ParameterName, 'Export the run''s spans (one per run, one per call) over OTLP/HTTP to this collector [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Also write the results document (json) to FILE, atomically')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Also write the results document (json) to FILE, atomically')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'Live lane display on stderr (auto: only when stderr is a terminal and CI is unset)')
            [CompletionResult]::new('--journal', '--journal', [CompletionResultType]::ParameterName, 'Record every dispatch and result in FILE (append-only JSON lines, fsynced) or in Redis (redis://…, shared by every machine; running the same --run-id again resumes it)')
            [CompletionResult]::new('--resume', '--resume', [CompletionResultType]::ParameterName, 'Continue the run journaled in FILE (or in Redis, with --run-id): completed calls keep their results, the rest run')
            [CompletionResult]::new('--run-id', '--run-id', [CompletionResultType]::ParameterName, 'Name the run: idempotency keys derive from it, so the same batch run again with the same id, on any machine, sends the same keys (with --turns, turn N is ID-N)')
            [CompletionResult]::new('--trace', '--trace', [CompletionResultType]::ParameterName, 'Write a Chrome trace-event file of the run (open it in Perfetto)')
            [CompletionResult]::new('--record', '--record', [CompletionResultType]::ParameterName, 'Write a cassette of every call''s fingerprint and result to FILE')
            [CompletionResult]::new('--replay', '--replay', [CompletionResultType]::ParameterName, 'Answer calls from the cassette FILE without invoking any tool')
            [CompletionResult]::new('--approve', '--approve', [CompletionResultType]::ParameterName, 'Answer approvals in advance: `all`, `none`, or a comma-separated list of tools or of calls as ID@HASH (that call, only for the arguments with that hash, as `approvals` shows them); others are asked on the terminal, or refused when there is none. With --resume it answers the calls a paused run waits on')
            [CompletionResult]::new('--emit', '--emit', [CompletionResultType]::ParameterName, 'Write the results as the messages to send back to the model: openai (tool messages), openai-responses (function_call_output items), anthropic (one user message of tool_result blocks), gemini (one content of functionResponse parts); one per line with --stream')
            [CompletionResult]::new('--max-processes', '--max-processes', [CompletionResultType]::ParameterName, 'The most command calls in flight at once [default: derived from ulimit -n and -u]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--literal', '--literal', [CompletionResultType]::ParameterName, 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model''s reply is always read so)')
            [CompletionResult]::new('--no-cache', '--no-cache', [CompletionResultType]::ParameterName, 'Answer nothing from the read cache and store nothing in it')
            [CompletionResult]::new('--refresh', '--refresh', [CompletionResultType]::ParameterName, 'Ignore cached results from earlier runs, but store this run''s')
            [CompletionResult]::new('--stream', '--stream', [CompletionResultType]::ParameterName, 'Emit each result as a JSON line as soon as it and every earlier call have resolved')
            [CompletionResult]::new('--turns', '--turns', [CompletionResultType]::ParameterName, 'One turn per line of stdin (a model''s reply or a batch on one line), each run as a batch and answered with one line (the --emit answer, or the results document); MCP sessions, HTTP connections, lanes and the cache are kept between turns')
            [CompletionResult]::new('--run-id-from-reply', '--run-id-from-reply', [CompletionResultType]::ParameterName, 'Name the run after the model reply''s own id (chatcmpl-…, msg_…, resp_…, responseId)')
            [CompletionResult]::new('--retry-indeterminate', '--retry-indeterminate', [CompletionResultType]::ParameterName, 'With --resume: send non-idempotent calls that were in flight again, with the same idempotency key (by default they are reported indeterminate)')
            [CompletionResult]::new('--no-resend', '--no-resend', [CompletionResultType]::ParameterName, 'A write cut off in flight that its probe (`verify`) finds never landed is reported `not_applied` instead of being sent again once with the same idempotency key')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;plan' {
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant for the tenant lane (overrides the batch''s)')
            [CompletionResult]::new('--input-format', '--input-format', [CompletionResultType]::ParameterName, 'What the input is: a batch, JSON Lines, or a model''s reply (openai, openai-responses, anthropic, gemini)')
            [CompletionResult]::new('--max-concurrent-tools', '--max-concurrent-tools', [CompletionResultType]::ParameterName, 'Narrow the turn lane (never widens the manifest''s)')
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system''s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format [default: table on a terminal, json otherwise]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--literal', '--literal', [CompletionResultType]::ParameterName, 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model''s reply is always read so)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;lock' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--check', '--check', [CompletionResultType]::ParameterName, 'Write nothing: exit 1 and name each change when the servers differ from the lock')
            [CompletionResult]::new('--update', '--update', [CompletionResultType]::ParameterName, 'Accept every change: write the lock as the servers are now')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;validate' {
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;approvals' {
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'Where the gateways keep their parked calls: their `--lane-store` (redis://… for replicas on one Redis) [default: this machine''s]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;approve' {
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'The gateways'' `--lane-store` (redis://… for replicas on one Redis)')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;deny' {
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'The gateways'' `--lane-store` (redis://… for replicas on one Redis)')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;tools' {
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format [default: table]')
            [CompletionResult]::new('--emit', '--emit', [CompletionResultType]::ParameterName, 'Print the tools as PROVIDER''s request takes them (a JSON Schema per tool)')
            [CompletionResult]::new('--tools', '--tools', [CompletionResultType]::ParameterName, 'Only these tools (comma-separated; manifest or exported names)')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--strict', '--strict', [CompletionResultType]::ParameterName, 'OpenAI''s strict mode for every tool whose schema allows it (stderr names the others)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;mcp' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste')
            [CompletionResult]::new('login', 'login', [CompletionResultType]::ParameterValue, 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in')
            [CompletionResult]::new('logout', 'logout', [CompletionResultType]::ParameterValue, 'Forget a server''s sign-in (its kept tokens)')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'flux-tools;mcp;import' {
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Name each tool PREFIX.name (with `tool = "name"`), so two servers'' tools of the same name fit in one manifest')
            [CompletionResult]::new('--reads', '--reads', [CompletionResultType]::ParameterName, 'Import the tools whose names match GLOB (`*`, `?`; comma-separated or repeated) as reads (effect = "read", idempotent), whatever their server declares')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;mcp;login' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--no-browser', '--no-browser', [CompletionResultType]::ParameterName, 'Print the URL to open instead of opening a browser')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'Show which servers are signed in, until when and with which scopes (never a token)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;mcp;logout' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;mcp;serve' {
            [CompletionResult]::new('--http', '--http', [CompletionResultType]::ParameterName, 'Serve Streamable HTTP on ADDR (path /mcp), e.g. 127.0.0.1:8808, instead of stdio')
            [CompletionResult]::new('--otlp', '--otlp', [CompletionResultType]::ParameterName, 'Export each call''s span over OTLP/HTTP to this collector, in the client''s trace when its request carries `_meta.traceparent` [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]')
            [CompletionResult]::new('--tools', '--tools', [CompletionResultType]::ParameterName, 'Only these tools (comma-separated; manifest or exported names)')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'The tenant of every call (stdio; over HTTP a bearer token names it)')
            [CompletionResult]::new('--max-concurrent-tools', '--max-concurrent-tools', [CompletionResultType]::ParameterName, 'Narrow each client''s turn lane (never widens the manifest''s max_concurrent_tools)')
            [CompletionResult]::new('--lane-store', '--lane-store', [CompletionResultType]::ParameterName, 'Where the tenant, tool and shared lanes and the read cache live (see `run --lane-store`)')
            [CompletionResult]::new('--allow-host', '--allow-host', [CompletionResultType]::ParameterName, 'Also accept this Host (HTTP; loopback names are always accepted). Repeatable')
            [CompletionResult]::new('--allow-origin', '--allow-origin', [CompletionResultType]::ParameterName, 'Accept requests from this browser Origin, e.g. https://app.example.com:443 (HTTP; without one, a request that carries an Origin is refused). Repeatable')
            [CompletionResult]::new('--grace', '--grace', [CompletionResultType]::ParameterName, 'On SIGTERM, how long calls in flight may take to finish before they are cancelled')
            [CompletionResult]::new('--max-processes', '--max-processes', [CompletionResultType]::ParameterName, 'The most calls in flight in this gateway''s command tools [default: from ulimit]')
            [CompletionResult]::new('--audit', '--audit', [CompletionResultType]::ParameterName, 'Write the audit trail — every call allowed or refused, approval asked and answered, token rejected — as JSON lines to FILE (appended), or - for stderr')
            [CompletionResult]::new('--workers', '--workers', [CompletionResultType]::ParameterName, 'The gateway''s worker threads [default: 1 over stdio (one client; its tools and upstreams are processes of their own), a core each over HTTP]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('--no-cache', '--no-cache', [CompletionResultType]::ParameterName, 'Answer nothing from the read cache and store nothing in it')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Reload the manifest when its file changes (it is always reloaded on SIGHUP)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;mcp;help' {
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste')
            [CompletionResult]::new('login', 'login', [CompletionResultType]::ParameterValue, 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in')
            [CompletionResult]::new('logout', 'logout', [CompletionResultType]::ParameterValue, 'Forget a server''s sign-in (its kept tokens)')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'flux-tools;mcp;help;import' {
            break
        }
        'flux-tools;mcp;help;login' {
            break
        }
        'flux-tools;mcp;help;logout' {
            break
        }
        'flux-tools;mcp;help;serve' {
            break
        }
        'flux-tools;mcp;help;help' {
            break
        }
        'flux-tools;report' {
            [CompletionResult]::new('--svg', '--svg', [CompletionResultType]::ParameterName, 'Write an SVG here: a Gantt chart of a results document, or width and cost over time of a history')
            [CompletionResult]::new('--history', '--history', [CompletionResultType]::ParameterName, 'A run history (run --history): turns, fan-out width, speed-up, lane peaks, 429s and cost per turn, per period, and the first period whose width moved')
            [CompletionResult]::new('--by', '--by', [CompletionResultType]::ParameterName, 'Group the history by hour or day [default: day when it spans more than three days]')
            [CompletionResult]::new('--min-turns', '--min-turns', [CompletionResultType]::ParameterName, 'Runs a period (and the periods before it) needs before a width shift is judged')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format for a history [default: table]')
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'flux-tools;completions' {
            [CompletionResult]::new('--manifest', '--manifest', [CompletionResultType]::ParameterName, 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to use color (NO_COLOR is honoured)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print no summary or warnings on stderr (errors still show)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'flux-tools;help' {
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Execute a batch')
            [CompletionResult]::new('plan', 'plan', [CompletionResultType]::ParameterValue, 'Dry run: phases, dependency graph, lanes, critical path; executes nothing')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Pin what the model is shown in tools.lock beside the manifest: every tool''s definition (and a whole server''s prompts and resource templates), hashed')
            [CompletionResult]::new('validate', 'validate', [CompletionResultType]::ParameterValue, 'Check the manifest (and batches) and report every problem with its location')
            [CompletionResult]::new('approvals', 'approvals', [CompletionResultType]::ParameterValue, 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each')
            [CompletionResult]::new('approve', 'approve', [CompletionResultType]::ParameterValue, 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it')
            [CompletionResult]::new('deny', 'deny', [CompletionResultType]::ParameterValue, 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)')
            [CompletionResult]::new('tools', 'tools', [CompletionResultType]::ParameterValue, 'List the manifest''s tools and their declarations, or (--emit) offer them to a model')
            [CompletionResult]::new('mcp', 'mcp', [CompletionResultType]::ParameterValue, 'Work with Model Context Protocol servers')
            [CompletionResult]::new('report', 'report', [CompletionResultType]::ParameterValue, 'Draw a results document as a timeline picture, or show a run history over time')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'flux-tools;help;run' {
            break
        }
        'flux-tools;help;plan' {
            break
        }
        'flux-tools;help;lock' {
            break
        }
        'flux-tools;help;validate' {
            break
        }
        'flux-tools;help;approvals' {
            break
        }
        'flux-tools;help;approve' {
            break
        }
        'flux-tools;help;deny' {
            break
        }
        'flux-tools;help;tools' {
            break
        }
        'flux-tools;help;mcp' {
            [CompletionResult]::new('import', 'import', [CompletionResultType]::ParameterValue, 'Print [tools.*] TOML for a server''s tools (effect, idempotent, argument schema), ready to paste')
            [CompletionResult]::new('login', 'login', [CompletionResultType]::ParameterValue, 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server''s sign-in')
            [CompletionResult]::new('logout', 'logout', [CompletionResultType]::ParameterValue, 'Forget a server''s sign-in (its kept tokens)')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the manifest''s tools as an MCP server (stdio, or Streamable HTTP with --http): every client''s calls share the lanes, the cache and the upstream servers')
            break
        }
        'flux-tools;help;mcp;import' {
            break
        }
        'flux-tools;help;mcp;login' {
            break
        }
        'flux-tools;help;mcp;logout' {
            break
        }
        'flux-tools;help;mcp;serve' {
            break
        }
        'flux-tools;help;report' {
            break
        }
        'flux-tools;help;completions' {
            break
        }
        'flux-tools;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
