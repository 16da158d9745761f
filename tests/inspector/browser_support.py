"""A real browser for the inspector's tests: Debian's chromium driven by Playwright's
sync API on one thread of its own (Playwright's sync objects belong to the thread that
made them), which trio tests call through ``trio.to_thread``."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from playwright.sync_api import Browser, Page, sync_playwright

T = TypeVar("T")

#: A function to run on the browser's thread, and where its outcome goes.
_Job = tuple[Callable[[Browser], Any], concurrent.futures.Future[Any]]

CHROMIUM = "/usr/bin/chromium"
#: The flags that work on these machines (root: no sandbox; no network but 127.0.0.1).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Seconds any one browser step may take.
STEP_TIMEOUT = 60


class BrowserThread:
    """One chromium for a test module; :meth:`run` runs a function of the browser on
    the browser's thread and returns its result (or raises its exception)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[
            tuple[Callable[[Browser], Any], concurrent.futures.Future[Any]] | None
        ]
        self._jobs = queue.Queue()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._main, name="chromium", daemon=True)
        self._thread.start()
        self._ready.result(timeout=STEP_TIMEOUT)

    def _main(self) -> None:
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                self._ready.set_result(None)
                try:
                    while (job := self._jobs.get()) is not None:
                        fn, future = job
                        try:
                            future.set_result(fn(browser))
                        except BaseException as exc:  # handed to the caller
                            future.set_exception(exc)
                finally:
                    browser.close()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def call(self, fn: Callable[[Browser], T]) -> T:
        """Run ``fn(browser)`` on the browser's thread; wait for it (blocking)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future.result(timeout=STEP_TIMEOUT)

    async def run(self, fn: Callable[[Browser], T]) -> T:
        """:meth:`call` from trio (in a worker thread, so the trio loop keeps serving)."""
        return await trio.to_thread.run_sync(self.call, fn)

    def close(self) -> None:
        """Close the browser and end its thread."""
        self._jobs.put(None)
        self._thread.join(timeout=STEP_TIMEOUT)


class PageWatch:
    """What a page did that it must not: dialogs it opened, requests to other hosts."""

    def __init__(self, page: Page) -> None:
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.errors: list[str] = []

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        def on_route(route: Any) -> None:
            url: str = route.request.url
            if url.startswith(("http://127.0.0.1:", "data:")):
                route.continue_()
            else:
                self.foreign.append(url)
                route.abort()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.route("**/*", on_route)
