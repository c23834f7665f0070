"""Small commands for the shell: `bantam config`, `bantam sessions`, `bantam completion`.

    bantam config                      every key, its effective value and where it came from
    bantam sessions                    saved sessions, newest first
    bantam sessions show|export|delete ID
    bantam completion bash|zsh|fish    a completion script: eval "$(bantam completion bash)"
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from . import config, transcripts
from .errors import ConfigError
from .options import SUBCOMMANDS, Parser
from .sanitize import visible


def config_main(argv: list[str]) -> int:
    from .options import common_options, flags
    parser = common_options(Parser(
        prog="bantam config", description="Show every configuration key, its value and where it came "
        f"from: flags > .bantam.cfg (else model.cfg) > {config.user_config_path()} > environment > defaults."))
    args = parser.parse_args(argv)
    given = flags(args)
    cfg = config.load(given)
    # keys, values and warnings come from a project's file as it wrote them: shown `visible`
    for line in cfg.warning.splitlines():  # a misspelled key, among others
        print(f"bantam: warning: {visible(line)}", file=sys.stderr)
    raw, _, _ = config.layers(given, ".", os.environ)
    for key in config.known_keys():
        value = getattr(cfg, key)
        where = raw[key][1] if key in raw else _implied(key, value, cfg)
        print(f"{key} = {visible(_shown(key, value))}  ({visible(where)})")
    for key, (text, where, _) in sorted(raw.items()):
        if key not in config.PARSERS:  # aliases, fields sent to the API and unknown keys
            used = config.value_of(cfg, key) is not None
            print(f"{visible(key)} = {visible(_shown(key, text))}  "
                  f"({visible(where)}{'' if used else '; not a configuration key, ignored'})")
    return 0


def _shown(key: str, value: Any) -> str:
    return config.shown(key, value) or "(unset)"


def _implied(key: str, value: Any, cfg: config.Config) -> str:
    """Where a value that no layer named comes from: a key variable, the provider, a default."""
    if key == "api_key" and value:
        names = ("LLM_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")
        return next((f"environment variable {n}" for n in names if os.environ.get(n) == value), "environment")
    if key in ("provider", "endpoint", "temperature") and value != getattr(config.Config(), key):
        return "implied by the other keys"
    return "default"


def sessions_main(argv: list[str]) -> int:
    parser = Parser(prog="bantam sessions", description="Saved sessions "
                                     f"({transcripts.sessions_dir()}): list, show, export to Markdown, delete.")
    parser.add_argument("action", nargs="?", choices=("list", "show", "export", "delete"), default="list")
    parser.add_argument("id", nargs="?", help="a session id, the start of one, or its project folder's name")
    parser.add_argument("-o", "--output", metavar="FILE", help="export: write here instead of stdout")
    args = parser.parse_args(argv)
    if args.action == "list":
        return _list_sessions()
    if not args.id:
        raise ConfigError(f"bantam sessions {args.action}: which session? (bantam sessions lists them)")
    try:
        session_id, messages = transcripts.load(args.id, lambda text: print(f"bantam: {text}", file=sys.stderr))
    except transcripts.SessionError as e:
        raise ConfigError(str(e).replace("; /list shows them", "; bantam sessions lists them")) from None
    if args.action == "delete":
        transcripts.delete(session_id)
        print(f"deleted {session_id}", file=sys.stderr)
        return 0
    text = to_markdown(session_id, messages)
    if args.action == "export" and args.output:
        from .fsutil import atomic_write
        atomic_write(args.output, text.encode("utf-8"), mode=0o600)
        print(f"exported {session_id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _list_sessions() -> int:
    here = transcripts.project_id()
    listing = transcripts.listing()
    if not listing:  # on stderr: the completion scripts read ids from stdout
        print(transcripts.NO_SESSIONS, file=sys.stderr)
    for info in listing:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.updated))
        mark = "*" if info.id == here else " "  # this project's autosave: bantam -c continues it
        about = info.problem or f"{info.count} messages  {info.summary[:60]}"
        where = f"{Path(info.project).name or '/'}  " if info.project else ""  # a name to give instead of the id
        print(f"{mark} {info.id}  {when}  {where}{about}")
    return 0


def to_markdown(session_id: str, messages: list[dict]) -> str:
    """A readable transcript: each message under a heading, tool calls and results in code blocks."""
    parts = [f"# Session {session_id}\n"]
    for m in messages:
        role, content = m.get("role", ""), m.get("content")
        if role == "system":
            continue
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role == "tool":
            parts.append(f"**Tool result**\n\n```\n{content}\n```\n")
            continue
        if content:
            parts.append(f"## {role.capitalize()}\n\n{content}\n")
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(f"**Tool call** `{function.get('name', '')}`\n\n```json\n{function.get('arguments', '')}\n```\n")
    return "\n".join(parts)


COMMANDS = tuple(SUBCOMMANDS)  # the subcommands' words, from the one table (options.py)


def completion_main(argv: list[str]) -> int:
    parser = Parser(prog="bantam completion", description="Print a shell completion "
                                     'script: eval "$(bantam completion bash)", or save it where your shell looks.')
    parser.add_argument("shell", choices=("bash", "zsh", "fish"))
    shell = parser.parse_args(argv).shell
    if shell == "fish":
        print(fish_script())
        return 0
    print(("autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else "") + bash_script())
    return 0


def _global_options() -> dict[str, tuple[str, bool]]:
    """Every option of `bantam` itself -> (its long name, whether it takes a value), read from
    the parser the command line uses: a new option is completed without an edit here."""
    from .options import Parser, global_options, option_table
    return option_table(global_options(Parser(prog="bantam")))


def bash_script() -> str:
    """The bash (and zsh, through bashcompinit) completion, made from the tables it completes."""
    options = _global_options()
    valued = "|".join(name for name, (_, value) in options.items() if value)
    cases = []
    for name, spec in SUBCOMMANDS.items():
        words = " ".join((*spec.actions, *spec.takes, "--help"))
        files = "" if spec.actions else ' $(compgen -f -- "$cur")'  # an action comes first, not a file
        reply = f'COMPREPLY=($(compgen -W "{words}" -- "$cur"){files})'
        if name == "sessions":  # a session's id after show, export or delete
            reply = f'case "$prev" in show|export|delete) COMPREPLY=($(compgen -W "{SESSION_IDS}" -- "$cur"));; ' \
                    f'*) {reply};; esac'
        cases.append(f"        {name}) {reply};;")
    return BASH.format(keys=" ".join(f"{k}=" for k in config.known_keys()), providers=" ".join(config.PROVIDERS),
                       valued=valued, top=" ".join((*SUBCOMMANDS, *options)), cases="\n".join(cases))


SESSION_IDS = "$(bantam sessions 2>/dev/null | cut -c3- | cut -d' ' -f1)"
BASH = """_bantam() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} word="" i
    case "$prev" in
        --set) COMPREPLY=($(compgen -W "{keys}" -- "$cur")); compopt -o nospace 2>/dev/null; return;;
        --provider) COMPREPLY=($(compgen -W "{providers}" -- "$cur")); return;;
        {valued}) return;;
    esac
    for ((i = 1; i < COMP_CWORD; i++)); do  # the subcommand: the first word not an option or its value
        case "${{COMP_WORDS[i]}}" in
            {valued}) ((i++));;
            -*) ;;
            *) word=${{COMP_WORDS[i]}}; break;;
        esac
    done
    case "$word" in
        "") COMPREPLY=($(compgen -W "{top}" -- "$cur") $(compgen -f -- "$cur"));;
{cases}
        *) COMPREPLY=($(compgen -f -- "$cur"));;
    esac
}}
complete -F _bantam bantam"""


def fish_script() -> str:
    options = _global_options()
    lines = ["complete -c bantam -f -n __fish_use_subcommand -a '" + " ".join(SUBCOMMANDS) + "'"]
    values = {"--set": " ".join(f"{k}=" for k in config.known_keys()), "--provider": " ".join(config.PROVIDERS)}
    for long in dict.fromkeys(long for long, _ in options.values()):
        shorts = "".join(f" -s {n[1:]}" for n, (name, _) in options.items() if name == long and not n.startswith("--"))
        takes_value = options[long][1]
        choices = f" -a '{values[long]}'" if long in values else ""
        lines.append(f"complete -c bantam{shorts} -l {long[2:]}{' -x' if takes_value else ''}{choices}")
    for name, spec in SUBCOMMANDS.items():
        if spec.actions:
            lines.append(f"complete -c bantam -n '__fish_seen_subcommand_from {name}' -x -a '{' '.join(spec.actions)}'")
    lines.append("complete -c bantam -n '__fish_seen_subcommand_from show export delete' -x "
                 "-a '(bantam sessions 2>/dev/null | string sub -s 3 | string split -f1 \" \")'")
    return "\n".join(lines)


# --- bantam trust: one store and one question for every file a project supplies (trust.py) ----

TRUST_USAGE = """usage: bantam trust [list | revoke [DIR]]

    bantam trust          trust this folder's .bantam.cfg / model.cfg, .mcp.json and the tools folder
                          its config names, as they are now (an edit asks again)
    bantam trust list     every trusted folder, and which of its files changed since
    bantam trust revoke [DIR]   forget a folder (default: this one)

Until a project is trusted, its files cannot loosen bantam's boundary (sandbox*, approval,
env_passthrough, mcp, bantam_tools_dir are ignored, with a line naming file:line), cannot send
your key to an endpoint they name, and its .mcp.json starts nothing."""


def trust_main(argv: list[str]) -> int:
    from . import trust
    if not argv or argv[0] in ("-h", "--help"):
        if argv:
            print(TRUST_USAGE)
            return 0
        print(trust_project("."))
        return 0
    action, rest = argv[0], argv[1:]
    if action == "list" and not rest:
        print(trusted_listing())
        return 0
    if action == "revoke" and len(rest) <= 1:
        folder = trust.folder_of(rest[0] if rest else ".")
        print(f"revoked {visible(folder)}" if trust.revoke(folder) else f"{visible(folder)} was not trusted")
        return 0
    raise ConfigError(f"bantam trust: unknown arguments {' '.join(argv)!r}\n{TRUST_USAGE}")


def untrusted_lines(directory: str | os.PathLike) -> list[str]:
    """What this folder's untrusted files would do once trusted, in full: the boundary keys a
    config file sets, the MCP servers it would start. [] when nothing waits for trust. Each line
    is `visible`: what the user is asked to trust cannot be redrawn by escape sequences in it, nor
    a line faked by a newline in a value."""
    from pathlib import Path

    from . import trust
    from .mcp import servers
    from .prompt import PROJECT_PROMPT
    ignored: list[str] = []
    config.layers({}, directory, os.environ, ignored)
    lines = [f"  {entry}" for entry in ignored]
    if lines:
        lines.insert(0, f"{config.read_config_file(directory)[0]} sets bantam's boundary:")
    prompt_file = Path(directory, PROJECT_PROMPT)
    if prompt_file.is_file() and not trust.is_trusted(prompt_file):
        lines.append(f"{PROJECT_PROMPT}: replaces bantam's system prompt")
    return [visible(line) for line in lines + servers.untrusted_lines(servers.select(directory).untrusted)]


def trust_project(directory: str | os.PathLike) -> str:
    """Trust the folder's files as they are now; say what that allows."""
    from . import trust
    from .mcp import servers
    path, entries = config.read_config_file(directory)
    tools_dir = next((value for key, value, _ in entries if key == "bantam_tools_dir"), "")
    waiting = untrusted_lines(directory)
    specs = servers.read_specs(servers.project_file(directory))
    files = trust.trust(directory, tools_dir)
    lines = [line.replace(" wants to start these MCP servers:", ": its MCP servers may start:") for line in waiting]
    lines += [visible(f"trusted {spec.name}: {spec.describe()}") for spec in specs.values()]
    names = visible(", ".join(key for key in files))
    return "\n".join([*lines, f"trusted {visible(trust.folder_of(directory))}: {names} (as they are now; "
                      "an edit asks again; `bantam trust revoke` forgets it)"])


def trusted_listing() -> str:
    from . import trust
    projects = trust.trusted_projects()
    if not projects:
        return "no trusted projects"
    lines = []
    for folder, files in sorted(projects.items()):
        changed = trust.changed(folder, files)
        lines.append(visible(f"{folder}  {', '.join(files)}") +
                     (f"  (changed since: {visible(', '.join(changed))})" if changed else ""))
    return "\n".join(lines)


def ask_trust(read, directory: str | os.PathLike) -> bool:
    """The terminal's one question, before the first prompt: trust what this project's files
    would do? Asked only when something waits for trust (a person is there to answer)."""
    lines = untrusted_lines(directory)
    if not lines:
        return False
    try:
        answer = read("\n".join([*lines, "Trust this project's files as they are now? [y/N] "]))
    except (KeyboardInterrupt, EOFError):
        return False
    if answer.strip().lower() not in ("y", "yes"):
        return False
    trust_project(directory)
    return True


def trust_note(directory: str | os.PathLike) -> str:
    """For a front end that cannot ask at start (the browser view): what waits, and how to trust."""
    lines = untrusted_lines(directory)
    if not lines:
        return ""
    return "\n".join(["This project's files are not trusted yet:", *lines,
                      "Read them; `/mcp trust` (or `bantam trust`) trusts them."])
