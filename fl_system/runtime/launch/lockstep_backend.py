"""runtime.backend=vectorized: a round's train messages answered together in the engine's own
process, their clients' local steps taken in lockstep (`fl_system.learning.cohort`).

Flower's engine hands messages to a `Backend` from its worker threads, one message each and
at most min(32, CPUs + 4) threads at once, so a Backend never sees a round's clients
together. This backend runs a single engine worker instead (`gathering_worker`): it takes
every message the queue holds (the ServerApp stores a round's at once; the delivery pass puts
them on the queue together), answers the others one at a time and the train messages in
chunks of `runtime.vectorize_chunk`, each message of a chunk in a thread of its own through the
whole ClientApp, as Flower's worker answers one: the node's context retrieved and stored
again, a ClientApp that raises turned into the node's error reply. Messages are Python objects
here: nothing is serialised between the engine and its ClientApps.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from logging import ERROR, INFO
from queue import Empty, Queue
from uuid import uuid4

from flwr.app import Context, Message, MessageType
from flwr.app.error import Error
from flwr.clientapp.client_app import ClientApp, ClientAppException
from flwr.common.constant import ErrorCode
from flwr.server.superlink.fleet.vce.backend import Backend
from flwr.supercore import log

from fl_system.learning.cohort import Cohort, member

SETTLE_SECONDS = 0.02  # the queue stays empty this long: the delivery pass has put them all
WAIT_SECONDS = 1.0  # as Flower's worker waits on its queue (the engine cuts it at a stop)


@dataclass
class Chunking:
    """How many train messages train in one lockstep (the run's runtime.vectorize_chunk)."""

    size: int = 100


class InProcessBackend(Backend):
    """Flower's simulation `Backend` that runs the ClientApp in the engine's process.

    Parameters
    ----------
    app : ClientApp
        The ClientApp the engine loaded by the run's component reference.
    """

    def __init__(self, app: ClientApp) -> None:
        super().__init__({})
        self.app = app

    def build(self, app_fn: Callable[[], ClientApp]) -> None:
        if app_fn() is not self.app:
            raise ClientAppException("the engine runs another ClientApp than the run names")

    @property
    def num_workers(self) -> int:
        """One engine worker: it gathers the messages and starts a thread per message."""
        return 1

    def is_worker_idle(self) -> bool:
        return True

    def process_message(self, message: Message, context: Context) -> tuple[Message, Context]:
        try:
            return self.app(message=message, context=context), context
        except Exception as ex:  # the ClientApp's own failure: the node replies with it
            traceback.print_exc()  # into the run's log, as a SuperNode's ClientApp does
            raise ClientAppException(f"{type(ex).__name__}: {ex}") from ex

    def terminate(self) -> None:
        """Nothing outlives the run but the loaded ClientApp."""


def gathering_worker(chunking: Chunking) -> Callable[..., None]:
    """Flower's engine worker for the vectorised backend (same arguments as Flower's)."""

    def worker(
        messageins_queue: Queue[Message],
        messageres_queue: Queue[Message],
        node_info_store: dict,
        backend: Backend,
        f_stop: threading.Event,
        metrics: object,
    ) -> None:
        def answer(message: Message) -> None:
            _answer(message, messageres_queue, node_info_store, backend, metrics)

        # as many threads as a chunk's messages, kept for the run: each keeps its model
        with ThreadPoolExecutor(chunking.size, thread_name_prefix="client") as threads:
            while not f_stop.is_set():
                try:
                    first = messageins_queue.get(timeout=WAIT_SECONDS)
                except Empty:
                    continue
                messages = [first, *_settled(messageins_queue)]
                train = [m for m in messages if m.metadata.message_type == MessageType.TRAIN]
                for message in messages:
                    if message.metadata.message_type != MessageType.TRAIN:
                        answer(message)
                if train:
                    chunks = -(-len(train) // chunking.size)
                    log(INFO, "vectorized: %d train messages, %d chunk(s)", len(train), chunks)
                for start in range(0, len(train), chunking.size):
                    _answer_together(train[start : start + chunking.size], answer, threads)

    return worker


def _settled(queue: Queue[Message]) -> list[Message]:
    """What else the queue holds, until it stays empty for SETTLE_SECONDS."""
    more = []
    while True:
        try:
            more.append(queue.get(timeout=SETTLE_SECONDS))
        except Empty:
            return more


def _answer_together(
    messages: list[Message], answer: Callable[[Message], None], threads: ThreadPoolExecutor
) -> None:
    """The messages in threads of their own (no more than the pool holds: a thread that
    waits for the cohort keeps its thread), their training in one cohort."""
    cohort = Cohort(len(messages))

    def answer_in(message: Message) -> None:
        with member(cohort):
            answer(message)

    for done in [threads.submit(answer_in, m) for m in messages]:
        done.result()


def _answer(
    message: Message,
    replies: Queue[Message],
    node_info_store: dict,
    backend: Backend,
    metrics: object,
) -> None:
    """What Flower's engine worker does with one message: the node's context, the ClientApp,
    the context stored again, the reply (an error reply when the ClientApp raised)."""
    node_id, run_id = message.metadata.dst_node_id, message.metadata.run_id
    started = time.perf_counter()
    try:
        context = node_info_store[node_id].retrieve_context(run_id=run_id)
        reply, context = backend.process_message(message, context)
        node_info_store[node_id].update_context(run_id, context=context)
    except Exception as ex:
        log(ERROR, ex)
        code = (
            ErrorCode.CLIENT_APP_RAISED_EXCEPTION
            if isinstance(ex, ClientAppException)
            else ErrorCode.UNKNOWN
        )
        reply = Message(Error(code=code, reason=f"{type(ex)}:<'{ex}'>"), reply_to=message)
    finally:
        metrics.add_clientapp_runtime(time.perf_counter() - started)  # type: ignore[attr-defined]
    reply.metadata.__dict__["_message_id"] = str(uuid4())
    replies.put(reply)
