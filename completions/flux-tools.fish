# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_flux_tools_global_optspecs
    string join \n manifest= q/quiet color= h/help V/version
end

function __fish_flux_tools_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_flux_tools_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_flux_tools_using_subcommand
    set -l cmd (__fish_flux_tools_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c flux-tools -n "__fish_flux_tools_needs_command" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_needs_command" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_needs_command" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -s V -l version -d 'Print version'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "run" -d 'Execute a batch'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "plan" -d 'Dry run: phases, dependency graph, lanes, critical path; executes nothing'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "lock" -d 'Pin what the model is shown in tools.lock beside the manifest: every tool\'s definition (and a whole server\'s prompts and resource templates), hashed'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "validate" -d 'Check the manifest (and batches) and report every problem with its location'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "approvals" -d 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "approve" -d 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "deny" -d 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "tools" -d 'List the manifest\'s tools and their declarations, or (--emit) offer them to a model'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "mcp" -d 'Work with Model Context Protocol servers'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "report" -d 'Draw a results document as a timeline picture, or show a run history over time'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c flux-tools -n "__fish_flux_tools_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l tenant -d 'Tenant for the tenant lane (overrides the batch\'s)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l input-format -d 'What the input is: a batch, JSON Lines, or a model\'s reply (openai, openai-responses, anthropic, gemini)' -r -f -a "auto\t'Detect the model shapes below; otherwise a batch'
batch\t'A batch document, a sequence of calls, or JSON'
jsonl\t'JSON Lines: one call object per line'
openai\t'OpenAI chat completions'
openai-responses\t'The OpenAI Responses API'
anthropic\t'Anthropic Messages'
gemini\t'Google Gemini (generateContent)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l max-concurrent-tools -d 'Narrow the turn lane (never widens the manifest\'s)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l lane-store -d 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system\'s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l format -d 'Output format [default: table on a terminal, jsonl otherwise]' -r -f -a "table\t''
json\t''
jsonl\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l on-tool-error -d 'What a failed call does to the run' -r -f -a "surface\t'A failed call loses only itself'
fail_run\t'The first failure ends the run (`fail_run`; `fail-run` is accepted too)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l deadline -d 'End the whole run after this long (e.g. 30s, 2m)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l max-cost -d 'Most the run may spend (sum of the tools\' `cost`); overrides the batch\'s budget' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l max-calls -d 'Most calls the run may make (replaces the manifest\'s [budget] max_calls; a batch may only lower it); cache hits do not count' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l history -d 'Append one line about this run to the history FILE [default: $FLUX_TOOLS_HISTORY, else the manifest\'s [history] path]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l otlp -d 'Export the run\'s spans (one per run, one per call) over OTLP/HTTP to this collector [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -s o -l output -d 'Also write the results document (json) to FILE, atomically' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l progress -d 'Live lane display on stderr (auto: only when stderr is a terminal and CI is unset)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l journal -d 'Record every dispatch and result in FILE (append-only JSON lines, fsynced) or in Redis (redis://…, shared by every machine; running the same --run-id again resumes it)' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l resume -d 'Continue the run journaled in FILE (or in Redis, with --run-id): completed calls keep their results, the rest run' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l run-id -d 'Name the run: idempotency keys derive from it, so the same batch run again with the same id, on any machine, sends the same keys (with --turns, turn N is ID-N)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l trace -d 'Write a Chrome trace-event file of the run (open it in Perfetto)' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l record -d 'Write a cassette of every call\'s fingerprint and result to FILE' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l replay -d 'Answer calls from the cassette FILE without invoking any tool' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l approve -d 'Answer approvals in advance: `all`, `none`, or a comma-separated list of tools or of calls as ID@HASH (that call, only for the arguments with that hash, as `approvals` shows them); others are asked on the terminal, or refused when there is none. With --resume it answers the calls a paused run waits on' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l emit -d 'Write the results as the messages to send back to the model: openai (tool messages), openai-responses (function_call_output items), anthropic (one user message of tool_result blocks), gemini (one content of functionResponse parts); one per line with --stream' -r -f -a "openai\t'OpenAI chat completions: tool messages'
openai-responses\t'OpenAI Responses API: `function_call_output` items'
anthropic\t'Anthropic Messages: `tool_result` blocks in a user message'
gemini\t'Google Gemini: `functionResponse` parts in a user content'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l max-processes -d 'The most command calls in flight at once [default: derived from ulimit -n and -u]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l literal -d 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model\'s reply is always read so)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l no-cache -d 'Answer nothing from the read cache and store nothing in it'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l refresh -d 'Ignore cached results from earlier runs, but store this run\'s'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l stream -d 'Emit each result as a JSON line as soon as it and every earlier call have resolved'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l turns -d 'One turn per line of stdin (a model\'s reply or a batch on one line), each run as a batch and answered with one line (the --emit answer, or the results document); MCP sessions, HTTP connections, lanes and the cache are kept between turns'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l run-id-from-reply -d 'Name the run after the model reply\'s own id (chatcmpl-…, msg_…, resp_…, responseId)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l retry-indeterminate -d 'With --resume: send non-idempotent calls that were in flight again, with the same idempotency key (by default they are reported indeterminate)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -l no-resend -d 'A write cut off in flight that its probe (`verify`) finds never landed is reported `not_applied` instead of being sent again once with the same idempotency key'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l tenant -d 'Tenant for the tenant lane (overrides the batch\'s)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l input-format -d 'What the input is: a batch, JSON Lines, or a model\'s reply (openai, openai-responses, anthropic, gemini)' -r -f -a "auto\t'Detect the model shapes below; otherwise a batch'
batch\t'A batch document, a sequence of calls, or JSON'
jsonl\t'JSON Lines: one call object per line'
openai\t'OpenAI chat completions'
openai-responses\t'The OpenAI Responses API'
anthropic\t'Anthropic Messages'
gemini\t'Google Gemini (generateContent)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l max-concurrent-tools -d 'Narrow the turn lane (never widens the manifest\'s)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l lane-store -d 'Where the tenant, tool and shared lanes and the read cache live: `local` (shared by every process on this machine using the same manifest), `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (shared by every machine using that Redis; `rediss://…` over TLS, checked against the system\'s CAs or SSL_CERT_FILE; a password is shown as ***) or `memory` (this run only); `plan` looks there for the calls the cache would answer now' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l format -d 'Output format [default: table on a terminal, json otherwise]' -r -f -a "table\t''
json\t'Pretty JSON'
jsonl\t'The same JSON on one line'
dot\t'Graphviz'
mermaid\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -l literal -d 'Arguments are data: no `${…}` references or `$${` escapes in the batch (a model\'s reply is always read so)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand plan" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -l check -d 'Write nothing: exit 1 and name each change when the servers differ from the lock'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -l update -d 'Accept every change: write the lock as the servers are now'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand lock" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand validate" -l format -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
jsonl\t'The same JSON (one line)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand validate" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand validate" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand validate" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand validate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -l lane-store -d 'Where the gateways keep their parked calls: their `--lane-store` (redis://… for replicas on one Redis) [default: this machine\'s]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -l format -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
jsonl\t'The same JSON (one line)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approvals" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approve" -l lane-store -d 'The gateways\' `--lane-store` (redis://… for replicas on one Redis)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approve" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approve" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approve" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand approve" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand deny" -l lane-store -d 'The gateways\' `--lane-store` (redis://… for replicas on one Redis)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand deny" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand deny" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand deny" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand deny" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l format -d 'Output format [default: table]' -r -f -a "table\t''
json\t''
jsonl\t'The same JSON (one line)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l emit -d 'Print the tools as PROVIDER\'s request takes them (a JSON Schema per tool)' -r -f -a "openai\t'OpenAI chat completions: `{"type": "function", "function": {name, description, parameters}}`'
openai-responses\t'OpenAI Responses API: `{"type": "function", name, description, parameters, strict}`'
anthropic\t'Anthropic Messages: `{name, description, input_schema}`'
gemini\t'Google Gemini: one `{"function_declarations": [...]}` with `parameters_json_schema`'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l tools -d 'Only these tools (comma-separated; manifest or exported names)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -l strict -d 'OpenAI\'s strict mode for every tool whose schema allows it (stderr names the others)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand tools" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -f -a "import" -d 'Print [tools.*] TOML for a server\'s tools (effect, idempotent, argument schema), ready to paste'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -f -a "login" -d 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server\'s sign-in'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -f -a "logout" -d 'Forget a server\'s sign-in (its kept tokens)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -f -a "serve" -d 'Serve the manifest\'s tools as an MCP server (stdio, or Streamable HTTP with --http): every client\'s calls share the lanes, the cache and the upstream servers'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and not __fish_seen_subcommand_from import login logout serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -l prefix -d 'Name each tool PREFIX.name (with `tool = "name"`), so two servers\' tools of the same name fit in one manifest' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -l reads -d 'Import the tools whose names match GLOB (`*`, `?`; comma-separated or repeated) as reads (effect = "read", idempotent), whatever their server declares' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from import" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -l no-browser -d 'Print the URL to open instead of opening a browser'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -l status -d 'Show which servers are signed in, until when and with which scopes (never a token)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from login" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from logout" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from logout" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from logout" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from logout" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l http -d 'Serve Streamable HTTP on ADDR (path /mcp), e.g. 127.0.0.1:8808, instead of stdio' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l otlp -d 'Export each call\'s span over OTLP/HTTP to this collector, in the client\'s trace when its request carries `_meta.traceparent` [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none when unset]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l tools -d 'Only these tools (comma-separated; manifest or exported names)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l tenant -d 'The tenant of every call (stdio; over HTTP a bearer token names it)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l max-concurrent-tools -d 'Narrow each client\'s turn lane (never widens the manifest\'s max_concurrent_tools)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l lane-store -d 'Where the tenant, tool and shared lanes and the read cache live (see `run --lane-store`)' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l allow-host -d 'Also accept this Host (HTTP; loopback names are always accepted). Repeatable' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l allow-origin -d 'Accept requests from this browser Origin, e.g. https://app.example.com:443 (HTTP; without one, a request that carries an Origin is refused). Repeatable' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l grace -d 'On SIGTERM, how long calls in flight may take to finish before they are cancelled' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l max-processes -d 'The most calls in flight in this gateway\'s command tools [default: from ulimit]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l audit -d 'Write the audit trail — every call allowed or refused, approval asked and answered, token rejected — as JSON lines to FILE (appended), or - for stderr' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l workers -d 'The gateway\'s worker threads [default: 1 over stdio (one client; its tools and upstreams are processes of their own), a core each over HTTP]' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l no-cache -d 'Answer nothing from the read cache and store nothing in it'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -l watch -d 'Reload the manifest when its file changes (it is always reloaded on SIGHUP)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from serve" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from help" -f -a "import" -d 'Print [tools.*] TOML for a server\'s tools (effect, idempotent, argument schema), ready to paste'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from help" -f -a "login" -d 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server\'s sign-in'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from help" -f -a "logout" -d 'Forget a server\'s sign-in (its kept tokens)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from help" -f -a "serve" -d 'Serve the manifest\'s tools as an MCP server (stdio, or Streamable HTTP with --http): every client\'s calls share the lanes, the cache and the upstream servers'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand mcp; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l svg -d 'Write an SVG here: a Gantt chart of a results document, or width and cost over time of a history' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l history -d 'A run history (run --history): turns, fan-out width, speed-up, lane peaks, 429s and cost per turn, per period, and the first period whose width moved' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l by -d 'Group the history by hour or day [default: day when it spans more than three days]' -r -f -a "hour\t''
day\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l min-turns -d 'Runs a period (and the periods before it) needs before a width shift is judged' -r
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l format -d 'Output format for a history [default: table]' -r -f -a "table\t''
json\t''
jsonl\t'The same JSON (one line)'"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand report" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand completions" -l manifest -d 'The tool manifest [default: $FLUX_TOOLS_MANIFEST, else tools.toml here or in the nearest parent]' -r -F
complete -c flux-tools -n "__fish_flux_tools_using_subcommand completions" -l color -d 'When to use color (NO_COLOR is honoured)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c flux-tools -n "__fish_flux_tools_using_subcommand completions" -s q -l quiet -d 'Print no summary or warnings on stderr (errors still show)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand completions" -s h -l help -d 'Print help'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "run" -d 'Execute a batch'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "plan" -d 'Dry run: phases, dependency graph, lanes, critical path; executes nothing'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "lock" -d 'Pin what the model is shown in tools.lock beside the manifest: every tool\'s definition (and a whole server\'s prompts and resource templates), hashed'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "validate" -d 'Check the manifest (and batches) and report every problem with its location'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "approvals" -d 'List the calls a paused run waits to have approved (from its journal) — or, with no journal, the calls `mcp serve` holds for approval — and how to approve each'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "approve" -d 'Approve a call `mcp serve` holds for approval, or a tool definition tools.lock holds back (tool:NAME@HASH), as `flux-tools approvals` names it'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "deny" -d 'Refuse a call `mcp serve` holds for approval (it is answered approval_denied), or a held-back tool definition (tool:NAME@HASH: it stays held back)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "tools" -d 'List the manifest\'s tools and their declarations, or (--emit) offer them to a model'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "mcp" -d 'Work with Model Context Protocol servers'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "report" -d 'Draw a results document as a timeline picture, or show a run history over time'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and not __fish_seen_subcommand_from run plan lock validate approvals approve deny tools mcp report completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and __fish_seen_subcommand_from mcp" -f -a "import" -d 'Print [tools.*] TOML for a server\'s tools (effect, idempotent, argument schema), ready to paste'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and __fish_seen_subcommand_from mcp" -f -a "login" -d 'Sign in to a server with `auth = "oauth"` (authorization code with PKCE, in a browser); its tokens are kept outside the project and refreshed. --status: every server\'s sign-in'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and __fish_seen_subcommand_from mcp" -f -a "logout" -d 'Forget a server\'s sign-in (its kept tokens)'
complete -c flux-tools -n "__fish_flux_tools_using_subcommand help; and __fish_seen_subcommand_from mcp" -f -a "serve" -d 'Serve the manifest\'s tools as an MCP server (stdio, or Streamable HTTP with --http): every client\'s calls share the lanes, the cache and the upstream servers'
