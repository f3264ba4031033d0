"""Adapters for ``bench_peers.py``: one module per system, all driving one workload.

Every adapter has the same shape (see :class:`_peers.base.Adapter`): ``open``,
``put_turn`` (persist one turn of the shared workload through the system's own public
API), ``load`` (rebuild the thread's full state from storage), ``footprint`` (bytes
on disk), ``close``, and a module-level ``child_load(spec)`` that the fresh-process
loader calls. A module imports its library at the top, so ``bench_peers.py`` imports
a peer only when that peer is selected, and the test environment (which has no peer
installed) can still run the agent-journal adapter.
"""
