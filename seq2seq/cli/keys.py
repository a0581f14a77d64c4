"""``seq2seq keys``: the API keys of ``seq2seq serve --api-keys`` (LibreTranslate's
``ltmanage keys``)."""

from __future__ import annotations

from seq2seq.cli.arguments import add_command

__all__ = ["add_keys"]


def add_keys(sub) -> None:
    """Add ``seq2seq keys add|list|remove``."""
    p = add_command(
        sub,
        "keys",
        "Manage the API keys of `seq2seq serve --api-keys FILE`.\n\n"
        "Keys live in an SQLite file created with mode 0600 (a file others may read is refused).\n"
        "A running server sees a key added "
        "or removed at its next request, without a restart.",
        "seq2seq keys add --db keys.db --req-limit 60\n"
        "seq2seq keys list --db keys.db\n"
        "seq2seq keys remove KEY --db keys.db",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="create a key; it is printed alone on the last line")
    add.add_argument(
        "--req-limit",
        type=int,
        metavar="N",
        help="the key's requests per minute (default: the server's --req-limit)",
    )
    lst = actions.add_parser("list", help="print each key and its requests per minute")
    remove = actions.add_parser("remove", help="remove a key")
    remove.add_argument("key", metavar="KEY")
    for q in (add, lst, remove):
        q.add_argument("--db", required=True, metavar="FILE", help="the key database")
    p.set_defaults(run=_run_keys)


def _run_keys(args) -> int:
    from seq2seq.serve import KeyStore

    store = KeyStore(args.db, create=args.action == "add")
    try:
        if args.action == "add":
            key = store.add(args.req_limit)
            limit = f"{args.req_limit} per minute" if args.req_limit else "the server's --req-limit"
            print(f"added a key to {args.db} ({limit}):")
            print(key)
        elif args.action == "list":
            for key, limit in store.list():
                print(f"{key}\t{limit if limit is not None else 'server --req-limit'}")
        else:
            store.remove(args.key)
            print(f"removed {args.key}")
    finally:
        store.close()
    return 0
