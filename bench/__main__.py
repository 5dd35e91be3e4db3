"""`python -m bench SUBCOMMAND [ARGS]`: run one measurement (`python -m bench` lists them)."""
from __future__ import annotations

import importlib
import sys

from bench import SUBCOMMANDS, module_name


def usage() -> str:
    lines = ["python -m bench SUBCOMMAND [ARGS]   (python -m bench SUBCOMMAND --help: its options)"]
    for topic, commands in SUBCOMMANDS.items():
        lines.append(f"\n{topic}:")
        lines += [f"  {name:17s} {what}" for name, what in commands.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, known = argv[0], {n for commands in SUBCOMMANDS.values() for n in commands}
    if name not in known:
        print(f"python -m bench: no subcommand {name!r}; one of: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{module_name(name)}")
    sys.argv[0] = f"python -m bench {name}"           # what argparse prints as the program
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
