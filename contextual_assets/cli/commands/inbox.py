"""`ctx inbox`: the removals the `new_documents` sensor holds back, and an operator's confirmation of them.

A tick in which more documents are missing from the inbox listing than `CTX_INBOX_MAX_REMOVE`, or than
`CTX_INBOX_MAX_REMOVE_SHARE` of the inbox's documents, or all of them, removes none (an unmounted share is
an empty folder, an emptied prefix an empty listing) and records them. `ctx inbox held` lists them;
`ctx inbox confirm-removals` lets the next tick remove those whose file is still gone."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone

from contextual_assets.cli.main import EXIT_OK
from contextual_assets.errors import ContextualError
from contextual_assets.ingest.inbox.listing import open_inbox
from contextual_assets.deployment import configured_deployment
from contextual_assets.settings import PlatformSettings
from contextual_assets.store.inbox_state import HeldRemoval


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    help="held: list the removals the sensor holds back; confirm-removals: let "
                                         "its next tick remove them")
    held = actions.add_parser("held", help="list the removals the sensor holds back (CTX_INBOX)",
                              description="List the removals the new_documents sensor holds back, with the reason.")
    held.add_argument("--json", action="store_true", help="print them as JSON")
    confirm = actions.add_parser("confirm-removals", help="confirm held removals: the next tick removes each "
                                                          "whose file is still gone",
                                 description="Confirm the removals the new_documents sensor holds back; its next "
                                             "tick removes each document whose file is still gone.")
    confirm.add_argument("keys", nargs="*", metavar="KEY",
                         help="document keys or paths to confirm (default: every held removal)")
    confirm.add_argument("--expect", type=int, default=None, metavar="N",
                         help="confirm only if exactly N removals are held and unconfirmed (what you reviewed); "
                              "exit 2 otherwise")


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    store = configured_deployment(settings).store
    inbox = open_inbox(settings.inbox).location
    if args.action == "held":
        held = list(store.inbox_state.held_removals(inbox).values())
        if args.json:
            print(json.dumps({"inbox": inbox, "held": [h.model_dump() for h in held]}, indent=2))
        elif not held:
            print(f"no removals held for {inbox}")
        else:
            for h in held:
                print(f"{h.doc_id}  {h.path}  held {_when(h.held_at)}"
                      + (f"  confirmed {_when(h.confirmed_at)}" if h.confirmed_at is not None else ""))
            print(f"{len(held)} held: {held[-1].reason}")
        return EXIT_OK
    return _confirm(store, inbox, args)


def _confirm(store, inbox: str, args: argparse.Namespace) -> int:
    waiting = [h for h in store.inbox_state.held_removals(inbox).values() if h.confirmed_at is None]
    if args.keys:
        unknown = sorted(set(args.keys) - {h.doc_id for h in waiting} - {h.path for h in waiting})
        if unknown:
            raise ContextualError(f"not held for {inbox}: {', '.join(unknown)} (`ctx inbox held` lists what is); "
                                  "nothing confirmed")
        waiting = [h for h in waiting if h.doc_id in args.keys or h.path in args.keys]
    if args.expect is not None and args.expect != len(waiting):
        raise ContextualError(f"--expect {args.expect}, but {len(waiting)} removals are held unconfirmed for {inbox}; "
                              "nothing confirmed (`ctx inbox held` lists them)")
    if not waiting:
        print(f"no removals held for {inbox}")
        return EXIT_OK
    confirmed: list[HeldRemoval] = store.inbox_state.confirm_removals(inbox, time.time(),
                                                                      [h.path for h in waiting])
    for h in confirmed:
        print(f"confirmed: {h.doc_id}  {h.path}")
    print(f"{len(confirmed)} removals confirmed; the next tick of new_documents removes each whose file is still gone")
    return EXIT_OK


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch or 0, tz=timezone.utc).isoformat(timespec="seconds")
