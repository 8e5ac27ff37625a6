"""Follow a flow run on the Prefect API: its state changes and its progress lines, until it ends.

``calibflow trigger --wait`` uses it: a served run executes in the serve process, so the terminal that
triggered it only sees what the API stores. Shown: each new state, the progress lines the flow logs
(``N of M stages to run``, ``[k/N] stage ... done in s``, heartbeats), a stage's own ``error:`` line and
anything at WARNING or above. The rest (each stage's full output) stays in the run's logs in the UI.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any
from uuid import UUID

#: Log messages worth a line on the terminal while following.
SHOWN = re.compile(r"^(\[\d+/\d+\] |\d+ of \d+ stages to run|error: )")
#: Logs re-read from before the last seen one, for records that reach the API late (shipped in batches).
OVERLAP = 100
PAGE = 200


def worth_showing(level: int, message: str) -> bool:
    return level >= logging.WARNING or bool(SHOWN.match(message))


async def _new_logs(client: Any, run_id: UUID, seen: set[UUID]) -> list[Any]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]))
    offset, fresh = max(0, len(seen) - OVERLAP), []
    while True:
        page = await client.read_logs(log_filter=flt, limit=PAGE, offset=offset, sort=LogSort.TIMESTAMP_ASC)
        fresh += [log for log in page if log.id not in seen]
        if len(page) < PAGE:
            break
        offset += PAGE
    seen.update(log.id for log in fresh)
    return fresh


async def _new_states(client: Any, run_id: UUID, seen: set[UUID]) -> list[Any]:
    """States the run passed through since the last poll, however short: a poll can fall between two
    transitions (Running lasted less than the poll on a fast run), and the history still has them."""
    fresh = [s for s in await client.read_flow_run_states(run_id) if s.id not in seen]
    seen.update(s.id for s in fresh)
    return fresh


async def _follow(run_id: UUID, echo: Callable[[str], None], poll: float) -> Any:
    from prefect.client.orchestration import get_client

    seen_logs: set[UUID] = set()
    seen_states: set[UUID] = set()
    async with get_client() as client:
        run = await client.read_flow_run(run_id)
        while True:
            final = bool(run.state and run.state.is_final())
            if final:
                await asyncio.sleep(poll)  # the last logs reach the API a moment after the state
            lines = [
                (s.timestamp, f"flow run {run.name}: {s.name}")
                for s in await _new_states(client, run_id, seen_states)
            ]
            lines += [
                (log.timestamp, log.message.splitlines()[0] if log.message else "")
                for log in await _new_logs(client, run_id, seen_logs)
                if worth_showing(log.level, log.message)
            ]
            for _, line in sorted(lines, key=lambda pair: pair[0]):  # one story: states and logs by time
                echo(line)
            if final:
                return run
            await asyncio.sleep(poll)
            run = await client.read_flow_run(run_id)


def follow(run_id: UUID, echo: Callable[[str], None], poll: float = 2.0) -> Any:
    """Print the run's states and progress lines with ``echo`` until it is final; return the flow run."""
    return asyncio.run(_follow(run_id, echo, poll))
