"""The event loop runs with the cyclic garbage collector paused (``metrics.progress.gc_paused``)."""

from __future__ import annotations


def test_gc_paused_moves_the_loops_survivors_to_the_oldest_generation() -> None:
    """The collector is off inside, back on after; what the loop left alive is in the oldest
    generation (no first pass over it), and a process's own frozen objects stay frozen."""
    import gc

    from servesim.metrics.progress import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in kept)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            more = [[i] for i in range(10)]
        assert gc.get_freeze_count() == frozen and more
    finally:
        gc.unfreeze()
