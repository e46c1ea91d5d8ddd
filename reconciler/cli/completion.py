"""`reconciler completion SHELL`: a shell completion script made by shtab from the CLI's own parser.

Every argument named ID completes the task ids under the tasks directory (`--tasks-dir` when the
command line gives one, else `tasks.d` here or in a folder above, as the CLI finds it), listed by
the shell itself at TAB time, so no Python process starts per keystroke.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from reconciler.cli.options import CompletionOptions
from reconciler.errors import EXIT_OK, UserError
from reconciler.files.locations import DIRECTORY_OPTIONS

SHELLS = ("bash", "zsh", "fish")

# bash and zsh: the ids under the tasks directory named by $1, one a line; `_`/`.` names skipped, as the loader does.
_LIST_IDS = r"""
_reconciler_ids_in() {
  local dir="$1" up="" file
  case "$dir" in
    /*) ;;
    *) while [ ! -d "$up$dir" ] && [ "$(cd "./$up" 2>/dev/null && pwd -P)" != / ]; do up="../$up"; done
       dir="$up$dir" ;;
  esac
  [ -d "$dir" ] || return 0
  find "$dir" -mindepth 1 -name '[._]*' -prune -o -name '*.toml' ! -type d -print 2>/dev/null |
    while IFS= read -r file; do
      file="${file#"${dir%/}"/}"
      printf '%s\n' "${file%.toml}"
    done
}
"""
# The --tasks-dir of the command line: `--tasks-dir DIR`, `--tasks-dir=DIR` (bash splits it at the =).
_TASKS_DIR_OF = r"""
  local dir=tasks.d word previous="" before=""
  for word in "${%s[@]}"; do
    case "$before $previous" in "--tasks-dir =") dir="$word" ;; esac
    case "$previous" in --tasks-dir) [ "$word" = = ] || dir="$word" ;; esac
    case "$word" in --tasks-dir=?*) dir="${word#--tasks-dir=}" ;; esac
    before="$previous" previous="$word"
  done
"""
TASK_IDS: dict[str, Any] = {
    "bash": "_reconciler_task_ids",
    "zsh": "_reconciler_task_ids",
    "fish": "(__reconciler_task_ids)",
    "preamble": {
        "bash": _LIST_IDS
        + "# $1: the word being completed\n_reconciler_task_ids() {"
        + _TASKS_DIR_OF % "COMP_WORDS"
        + '  compgen -W "$(_reconciler_ids_in "$dir")" -- "$1"\n}\n',
        "zsh": _LIST_IDS
        + "_reconciler_task_ids() {"
        + _TASKS_DIR_OF % "words"
        + '  local -a ids\n  ids=(${(f)"$(_reconciler_ids_in "$dir")"})\n'
        + "  _wanted task-ids expl 'task id' compadd -a ids\n}\n",
        "fish": r"""
function __reconciler_task_ids --description 'task ids under the tasks directory'
    set -l dir tasks.d
    set -l previous ''
    for word in (commandline -opc)
        if test "$previous" = --tasks-dir
            set dir $word
        else if string match -q -- '--tasks-dir=*' $word
            set dir (string replace -- '--tasks-dir=' '' $word)
        end
        set previous $word
    end
    if not string match -q -- '/*' $dir
        set -l up ''
        while not test -d "$up$dir"; and test (realpath "./$up") != /
            set up "../$up"
        end
        set dir "$up$dir"
    end
    test -d "$dir"; or return 0
    set -l root (string trim -r -c / -- $dir)
    set -l files (find "$dir" -mindepth 1 -name '[._]*' -prune -o -name '*.toml' ! -type d -print 2>/dev/null)
    for file in $files
        string replace -r -- '\.toml$' '' (string sub -s (math (string length -- $root) + 2) -- $file)
    end
end
""",
    },
}


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every action of the parser and of its subcommands' parsers."""
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _actions(child)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of the command line `parser` for `shell`."""
    import shtab  # here, not at the top: only this command needs it

    if shell not in SHELLS or shell not in shtab.SUPPORTED_SHELLS:
        supported = [name for name in SHELLS if name in shtab.SUPPORTED_SHELLS]
        raise UserError(f"unknown shell {shell!r}; supported: {', '.join(supported)}")
    directories = {entry.option for entry in DIRECTORY_OPTIONS}
    for action in _actions(parser):
        if action.metavar == "ID":
            action.complete = TASK_IDS  # type: ignore[attr-defined]  # shtab reads this attribute
        elif directories & set(action.option_strings):
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell)


def completion(options: CompletionOptions) -> int:
    """Print the completion script (`source <(reconciler completion bash)`)."""
    print(script(options.parser, options.shell), end="")
    return EXIT_OK
