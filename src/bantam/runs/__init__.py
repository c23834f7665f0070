"""Controlled runs: the model only proposes, the runtime decides.

    Goal → Plan → LLM → Parser → Gates → Tool → Observation → State
                   ↑                                          │
                   └──────── compact new context ─────────────┘

    bantam run "Read example.txt and report twice the number in it." \\
        --workspace examples/read_number/workspace --require-read example.txt
    bantam status RUN          # a run id under ./runs/, or a run directory
    bantam resume RUN [--config FILE] [--retry-blocked]

Each part is a small module with a narrow interface; `runtime.py` wires them in one place:

    settings.py   the TOML configuration ([limits] [runtime] [model] [tools] [tools.commands]),
                  read onto bantam's configuration keys and checked by config.py's checker
    schema.py     what the model may propose: a plan, a tool call, a final answer (pydantic)
    parser.py     model text -> JSON object (strict, one JSON fence, a "plan"-named call) or file text
    gates.py      deterministic checks: schema, tools, arguments, paths, commands, budgets,
                  repetition, completion
    tools.py      the allow-list over the core tools: read_file, list_files, write_file (write_paths
                  only), shell = shell_exec (named commands only), confined to the run's workspace
    context.py    the compact prompt: goal, plan, the last four observations, nothing else
    model.py      the model: any bantam provider, or scripted answers from a file
    planning.py   plan strategies (llm, files), repair strategies (llm, rewrite), plan.md
    evidence.py   what an observation proves: complete reads, passed checks, the best attempt
    state.py      state.json (authoritative) and its counters
    store.py      the run directory, its lock and its logs
    loop.py       the state transitions
    runtime.py    composition: new run, resume, the components
    cli.py        `bantam run`, `bantam status`, `bantam resume`; status.py what status shows
    chat.py       /run, /fix, /pause, /resume, /status, /files in the interactive terminal
    testing.py    a tiny test runner whose report `keep_best` understands

Control flow uses two exceptions from gates.py: `Rejected` (the proposal goes back to the model
with the reason) and `Blocked` (the run stops; `resume --retry-blocked` continues it).
Importing this package imports nothing else: pydantic is loaded only on the `bantam run` path.
"""
