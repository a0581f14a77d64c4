"""``seq2seq keys``: the API keys of ``seq2seq serve --api-keys FILE`` or ``--redis URL``
(LibreTranslate's ``ltmanage keys``)."""

from __future__ import annotations

from seq2seq.cli.arguments import add_command

__all__ = ["add_keys"]


def add_keys(sub) -> None:
    """Add ``seq2seq keys add|list|remove``."""
    p = add_command(
        sub,
        "keys",
        "Manage the API keys of `seq2seq serve --api-keys FILE` or `--redis URL`.\n\n"
        "Keys live in an SQLite file created with mode 0600 (--db; a file others may read is\n"
        "refused), or in the Redis that servers share (--redis). A running server sees a key\n"
        "added or removed within a second, without a restart (every replica, with Redis).",
        "seq2seq keys add --db keys.db --req-limit 60\n"
        "seq2seq keys list --db keys.db\n"
        "seq2seq keys remove KEY --db keys.db\n"
        "seq2seq keys add --redis redis://127.0.0.1:6379/0 --req-limit 60",
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
        where = q.add_mutually_exclusive_group(required=True)
        where.add_argument("--db", metavar="FILE", help="the key database (SQLite)")
        where.add_argument("--redis", metavar="URL", help="the Redis of `serve --redis URL`")
    p.set_defaults(run=_run_keys)


def _run_keys(args) -> int:
    if args.redis:
        from seq2seq.serve import RedisKeyStore

        store = RedisKeyStore(args.redis)
    else:
        from seq2seq.serve import KeyStore

        store = KeyStore(args.db, create=args.action == "add")
    try:
        if args.action == "add":
            key = store.add(args.req_limit)
            limit = f"{args.req_limit} per minute" if args.req_limit else "the server's --req-limit"
            print(f"added a key to {store.where} ({limit}):")
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
