"""``tidelog serve``: the web inspector on a store, until Ctrl-C.

The store is opened read-only (no lease, no write, no file created: a writer in another
process is never blocked), unless ``--writes`` enables the write routes (fork), which need
a writable open. The agent projections are registered so the page shows them.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TextIO

import trio

from runtime import open_runtime
from runtime.agents import agent_projections

from ._errors import CliError
from ._opening import open_reader, open_writer
from ._opening import shown as address_shown

__all__ = ["cmd_serve"]


def cmd_serve(args: argparse.Namespace) -> int:
    """``tidelog serve``."""
    from runtime.inspector import missing_extra

    hint = missing_extra()
    if hint is not None:
        raise CliError(f"tidelog: serve: {hint}")
    return trio.run(_serve, args, sys.stdout)


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from runtime.inspector import serve_inspector

    opener = open_writer if args.writes else open_reader
    store = await trio.to_thread.run_sync(opener, args.db)
    try:
        async with open_runtime(store) as rt:
            for projection in agent_projections():
                rt.register_projection(projection)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    try:
                        server = await nursery.start(
                            lambda task_status: serve_inspector(
                                rt,
                                host=args.host,
                                port=args.port,
                                token=args.token,
                                writes=args.writes,
                                store=store,
                                task_status=task_status,
                            )
                        )
                    except OSError as exc:
                        raise CliError(
                            f"tidelog: serve: cannot listen on {args.host}:{args.port}: "
                            f"{exc.strerror or exc}"
                        ) from None
                    mode = "writes enabled" if args.writes else "read-only"
                    print(
                        f"tidelog: inspecting {address_shown(args.db)} ({mode}) at "
                        f"{server.page_url}",
                        file=out,
                    )
                    if server.token is not None and args.token is None:
                        print(f"tidelog: token: {server.token}", file=out)
                    print("tidelog: Ctrl-C stops", file=out)
                    out.flush()
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        break
    finally:
        store.close()
    return 0
