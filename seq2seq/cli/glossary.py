"""``seq2seq glossary``: named glossaries stored per API key for ``seq2seq serve --api-keys``."""

from __future__ import annotations

from seq2seq.cli.arguments import add_command
from seq2seq.core import UserError

__all__ = ["add_glossary"]


def add_glossary(sub) -> None:
    """Add ``seq2seq glossary add|list|remove``."""
    p = add_command(
        sub,
        "glossary",
        "Manage the named glossaries of `seq2seq serve --api-keys FILE`.\n\n"
        "A glossary belongs to one API key and is stored in the key database; a request with\n"
        'that key names it with "glossary": "NAME" (docs/serving.md: Glossaries). Its file\n'
        "has SOURCE<TAB>TARGET lines (as `seq2seq translate --glossary`). A running server\n"
        "sees a glossary added, replaced or removed at its next request.",
        "seq2seq glossary add --db keys.db --key KEY --name legal --file terms.tsv\n"
        "seq2seq glossary list --db keys.db --key KEY\n"
        "seq2seq glossary remove --db keys.db --key KEY --name legal",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="store (or replace) a glossary for a key")
    add.add_argument("--file", required=True, metavar="FILE", help="SOURCE<TAB>TARGET lines")
    lst = actions.add_parser("list", help="print each glossary: KEY, NAME, entries")
    remove = actions.add_parser("remove", help="remove a key's glossary")
    for q in (add, lst, remove):
        q.add_argument("--db", required=True, metavar="FILE", help="the key database")
        q.add_argument(
            "--key", required=q is not lst, metavar="KEY", help="the API key it belongs to"
        )
    for q in (add, remove):
        q.add_argument("--name", required=True, metavar="NAME", help="1-64 of A-Za-z0-9._-")
    p.set_defaults(run=_run_glossary)


def _run_glossary(args) -> int:
    from seq2seq.core import check_paths
    from seq2seq.decode import Glossary
    from seq2seq.serve import KeyStore, SqliteGlossaries

    check_paths(input_files=[("--db", args.db), ("--file", getattr(args, "file", None))])
    if args.key is not None:
        keys = KeyStore(args.db)
        try:
            if args.key not in {k for k, _ in keys.list()}:
                raise UserError(f"no such API key in {args.db}: {args.key}")
        finally:
            keys.close()
    store = SqliteGlossaries(args.db)
    try:
        if args.action == "add":
            entries = Glossary.load(args.file).terms.entries()  # errors name the file and line
            store.put(args.key, args.name, entries)
            print(f"stored glossary {args.name!r} ({len(entries)} entries) for {args.key}")
        elif args.action == "list":
            for key, name, n in store.names(args.key):
                print(f"{key}\t{name}\t{n}")
        elif not store.remove(args.key, args.name):
            raise UserError(f"no glossary named {args.name!r} for {args.key} in {args.db}")
        else:
            print(f"removed glossary {args.name!r} of {args.key}")
    finally:
        store.close()
    return 0
