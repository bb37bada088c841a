"""The tiered row store (gmp/train/tiers.py): a cached run equals a plain table bit for bit,
eviction follows the documented order, pinned rows are never evicted, disk rows round-trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gmp.errors import TrainingError
from gmp.train.tiers import DiskRows, HostRows, LookaheadPrefetcher, RowCache

ROW_DIM = 4
LR = 0.05
EPS = 1e-10


def make_steps(num_rows: int, num_steps: int, per_step: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # skewed: hot rows recur, the tail forces misses
    p = 1.0 / np.arange(1, num_rows + 1) ** 0.8
    p /= p.sum()
    return [np.unique(rng.choice(num_rows, size=per_step, p=p)) for _ in range(num_steps)]


def grads_of(step: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(n, ROW_DIM, generator=g)


def update(values: torch.Tensor, g: torch.Tensor, optimizer: str) -> torch.Tensor:
    """One row-wise optimizer step on [k, width] rows (value | Adagrad state), float32."""
    x = values[:, :ROW_DIM]
    if optimizer == "sgd":
        return x - LR * g
    h = values[:, ROW_DIM:] + g * g
    return torch.cat([x - LR * g / (h.sqrt() + EPS), h], dim=1)


def initial(num_rows: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    out = np.zeros((num_rows, width), dtype=np.float32)
    out[:, :ROW_DIM] = rng.uniform(-0.05, 0.05, size=(num_rows, ROW_DIM))
    return out


def reference(init: np.ndarray, steps, optimizer: str) -> np.ndarray:
    table = torch.from_numpy(init.copy())
    for t, rows in enumerate(steps):
        idx = torch.as_tensor(rows)
        table[idx] = update(table.index_select(0, idx), grads_of(t, rows.size), optimizer)
    return table.cpu().numpy()


def run_cached(master, capacity: int, steps, optimizer: str, lookahead: int, depth: int = 2) -> RowCache:
    cache = RowCache(master, capacity)
    pf = LookaheadPrefetcher(cache, steps, lookahead=lookahead, prefetch_depth=depth)
    for step in pf:
        idx = torch.as_tensor(step.slots)
        cache.tensor[idx] = update(cache.tensor.index_select(0, idx), grads_of(step.index, step.rows.size), optimizer)
        cache.mark_dirty(step.slots)
        pf.done(step)
    cache.flush()
    return cache


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
@pytest.mark.parametrize("tier", ["host", "disk"])
@pytest.mark.parametrize("lookahead, depth", [(0, 1), (1, 1), (4, 2), (32, 3)])
def test_cached_run_equals_the_plain_table(tmp_path, optimizer, tier, lookahead, depth):
    num_rows, width = 400, ROW_DIM * (2 if optimizer == "adagrad" else 1)
    steps = make_steps(num_rows, 60, 40)
    init = initial(num_rows, width)
    want = reference(init, steps, optimizer)
    if tier == "host":
        master = HostRows(init)
    else:
        master = DiskRows.create(tmp_path / "rows.bin", num_rows, width, lambda a, b: init[a:b])
    # the smallest cache that can hold the steps in flight: evictions every step
    capacity = max(s.size for s in steps) * (depth + 2 if lookahead else 1)
    cache = run_cached(master, capacity, steps, optimizer, lookahead, depth)
    got = master.data if tier == "host" else master.read(np.arange(num_rows))
    np.testing.assert_array_equal(got, want)
    assert cache.stats.rows_written_back > 0 and cache.stats.misses > cache.capacity  # it did evict
    assert cache.stats.hits + cache.stats.misses == sum(s.size for s in steps)


def test_eviction_order_window_then_lru():
    cache = RowCache(HostRows(np.zeros((10, 1), np.float32)), 3)
    for rows in ([0], [1], [2]):  # last use: 0 < 1 < 2
        slots, _ = cache.admit(np.array(rows))
        cache.release(slots)
    cache.enter_window(np.array([0]))  # a coming step uses row 0
    slots, _ = cache.admit(np.array([5]))
    cache.release(slots)
    assert cache.resident(np.array([0, 1, 2, 5])).tolist() == [True, False, True, True]  # 1: LRU outside window
    slots, _ = cache.admit(np.array([6, 7]))  # only 0 (window) is left besides 2/5...
    assert cache.resident(np.array([0, 2, 5, 6, 7])).tolist() == [True, False, False, True, True]


def test_pinned_rows_are_never_evicted():
    cache = RowCache(HostRows(np.arange(10, dtype=np.float32)[:, None]), 3)
    cache.admit(np.array([0, 1]))  # a step in flight: pinned
    with pytest.raises(TrainingError, match="pinned by in-flight steps"):
        cache.admit(np.array([2, 3]), wait=False)
    assert cache.resident(np.array([0, 1])).all()


def test_a_step_larger_than_the_cache_is_refused_in_one_line():
    cache = RowCache(HostRows(np.zeros((10, 2), np.float32)), 4)
    with pytest.raises(TrainingError, match=r"uses 5 distinct rows but the cache holds 4; raise cache_rows"):
        cache.admit(np.arange(5))


def test_dirty_rows_are_written_back_on_eviction_and_clean_ones_are_not():
    master = HostRows(np.zeros((6, 1), np.float32))
    cache = RowCache(master, 2)
    s, _ = cache.admit(np.array([0, 1]))
    cache.tensor[torch.as_tensor(s)] = torch.tensor([[5.0], [6.0]])
    cache.mark_dirty(s[:1])  # only row 0 was updated
    cache.release(s)
    s2, _ = cache.admit(np.array([2, 3]))
    assert master.data[:2, 0].tolist() == [5.0, 0.0]
    assert cache.stats.rows_written_back == 1 and cache.stats.hits == 0 and cache.stats.misses == 4


def test_disk_rows_round_trip_unsorted_and_in_runs(tmp_path):
    init = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    d = DiskRows.create(tmp_path / "r.bin", 50, 3, lambda a, b: init[a:b])
    rows = np.array([7, 3, 4, 5, 49, 0, 8])
    np.testing.assert_array_equal(d.read(rows), init[rows])
    d.write(np.array([4, 3, 49]), -np.ones((3, 3), np.float32))
    init[[4, 3, 49]] = -1
    np.testing.assert_array_equal(d.read(np.arange(50)), init)
    d.close()
    with pytest.raises(TrainingError, match="expected 40 rows"):
        DiskRows(tmp_path / "r.bin", 40, 3)


def test_a_failure_in_the_prefetch_thread_reaches_the_step_loop():
    cache = RowCache(HostRows(np.zeros((10, 1), np.float32)), 2)
    pf = LookaheadPrefetcher(cache, [np.array([0]), np.arange(5)], lookahead=2)
    with pytest.raises(TrainingError, match="uses 5 distinct rows"):
        for step in pf:
            pf.done(step)


def test_the_prefetch_thread_ends_when_an_interrupt_lost_its_wake_up(monkeypatch):
    """An interrupt (Ctrl-C, SIGTERM) between the training thread taking a step off the queue and waking the
    prefetch thread left that thread waiting for room to put its end mark, and the training thread joining
    it, for ever (`gmp train` hung after a SIGTERM). The end mark is now put with a timeout."""
    import queue
    import threading
    import time

    from gmp.train.tiers import prefetch

    class LosingQueue(queue.Queue):
        def get(self, block=True, timeout=None):
            if not block:
                return super().get(block, timeout)
            time.sleep(0.3)  # the thread has put the only step and waits for room for its end mark
            with self.mutex:
                self._get()  # the step is taken; the interrupt comes before not_full.notify()
            raise KeyboardInterrupt

    monkeypatch.setattr(prefetch.queue, "Queue", LosingQueue)
    feeder = prefetch.StepFeeder([], [0], lambda item: [], lookahead=1, prefetch_depth=1)
    said = []

    def train():
        try:
            for _ in feeder:
                pass
        except KeyboardInterrupt:
            said.append("interrupted")

    training = threading.Thread(target=train, daemon=True)
    training.start()
    training.join(timeout=30)
    assert not training.is_alive() and said == ["interrupted"]


def test_held_rows_share_the_cache_and_are_never_evicted():
    """Herald's copies (hold/drop) live in the same tensor as master rows: the cache evicts only
    master rows, and grows so that ``capacity`` slots stay for them."""
    master = HostRows(np.arange(40, dtype=np.float32).reshape(20, 2))
    cache = RowCache(master, 4, policy="lru")
    slots, _ = cache.admit(np.array([0, 1, 2, 3]))
    cache.release(slots)
    held = cache.hold(3)  # no free slot: the tensor grows, no master row is evicted for a copy
    assert cache.num_slots >= 7 and np.all(cache.resident(np.arange(4)))
    cache.tensor[torch.as_tensor(held)] = torch.tensor([[100.0, 101.0]] * 3)
    for k in range(6):  # evictions among master rows only
        s, _ = cache.admit(np.array([4 + 2 * k, 5 + 2 * k]))
        cache.release(s)
        assert np.all(cache.held[held]) and np.count_nonzero(cache.row_of >= 0) <= 4
    assert torch.equal(cache.tensor[torch.as_tensor(held)], torch.tensor([[100.0, 101.0]] * 3))
    cache.drop(held)
    assert not cache.held.any()
    with pytest.raises(TrainingError, match="not held"):
        cache.drop(held[:1])


@pytest.mark.parametrize("policy, evicted", [("lru", 0), ("lookahead", 1)])
def test_cache_policy_orders_evictions(policy, evicted):
    """lru evicts the least recently used row; lookahead first evicts rows outside the window."""
    cache = RowCache(HostRows(np.zeros((6, 1), dtype=np.float32)), 2, policy=policy)
    for r in (0, 1):
        s, _ = cache.admit(np.array([r]))
        cache.release(s)
    cache.enter_window(np.array([0]))  # row 0 is used again soon
    s, _ = cache.admit(np.array([2]))
    assert not cache.resident(np.array([evicted]))[0] and cache.resident(np.array([1 - evicted]))[0]


def _evictable_keys(cache: RowCache) -> dict[int, tuple[int, int]]:
    """Brute force: every evictable slot (resident master row, unpinned) and its eviction key
    (in window, last use) -- the order the cache's lists must give."""
    out = {}
    for s in np.flatnonzero((cache.row_of >= 0) & (cache.pins == 0)):
        w = int(cache.window[cache.row_of[s]] > 0) if cache.policy == "lookahead" else 0
        out[int(s)] = (w, int(cache.last_use[s]))
    return out


@pytest.mark.parametrize("policy", ["lookahead", "lru"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eviction_lists_agree_with_a_brute_force_order(policy, seed):
    """Random admits, releases and finished steps (in and out of order) and window changes: every admission evicts
    exactly the evictable slots with the smallest keys (outside the window first, then least
    recently used), and the lists hold exactly the evictable slots."""
    rng = np.random.default_rng(seed)
    num_rows, capacity = 60, 12
    cache = RowCache(HostRows(np.zeros((num_rows, 1), np.float32)), capacity, policy=policy)
    in_flight, window_steps = [], []
    for _ in range(400):
        op = rng.integers(0, 4)
        if op == 0 and len(window_steps) < 6:
            rows = np.unique(rng.integers(0, num_rows, rng.integers(1, 5)))
            cache.enter_window(rows)
            window_steps.append(rows)
        elif op == 1 and window_steps:
            cache.leave_window(window_steps.pop(rng.integers(0, len(window_steps))))
        elif op == 2 and len(in_flight) < 2:
            rows = np.unique(rng.integers(0, num_rows, rng.integers(1, 5)))
            entered = bool(rng.integers(0, 2))  # as the prefetcher does: the step enters the window first
            if entered:
                cache.enter_window(rows)
            with cache.lock:
                cache._drain()  # what admit does first: apply the finished steps
            before = _evictable_keys(cache)
            resident = {int(s): int(cache.row_of[s]) for s in np.flatnonzero(cache.row_of >= 0)}
            slots, _ = cache.admit(rows, wait=False)
            evicted = [s for s, r in resident.items() if cache.row_of[s] != r]
            assert len(evicted) == max(0, len(resident) + int((~np.isin(rows, list(resident.values()))).sum())
                                       - capacity)
            if evicted:
                kept = [k for s, k in before.items() if s not in evicted and cache.row_of[s] == resident[s]
                        and not np.isin(resident[s], rows)]
                assert all(s in before for s in evicted)  # only evictable slots
                assert not kept or max(before[s] for s in evicted) <= min(kept)
            in_flight.append((rows, slots, entered))
        elif op == 3 and in_flight:
            rows, slots, entered = in_flight.pop(rng.integers(0, len(in_flight)))
            if entered:
                cache.finish(rows, slots)  # queued: leaves the window and unpins at the next admission
            else:
                cache.release(slots)
        listed = np.flatnonzero(cache._grp >= 0)
        assert sorted(listed.tolist()) == sorted(_evictable_keys(cache))
        assert int(cache._cnt.sum()) == listed.size
        if policy == "lookahead":
            assert all(cache._grp[s] == w for s, (w, _) in _evictable_keys(cache).items())


def test_swap_rows_writes_back_before_it_loads():
    """The host tier's compiled copy: dirty victims' rows go to the master first, then the loaded
    rows fill the slots (a victim's slot may be refilled in the same call)."""
    from gmp.train.tiers._kernels import swap_rows

    rng = np.random.default_rng(0)
    cache, master = rng.random((6, 3), dtype=np.float32), rng.random((20, 3), dtype=np.float32)
    want_cache, want_master = cache.copy(), master.copy()
    wb_slots, wb_rows = np.array([4, 1]), np.array([7, 12])
    load_slots, load_rows = np.array([1, 4, 5]), np.array([12, 3, 9])  # slot 1 refilled with the row it wrote back
    want_master[wb_rows] = want_cache[wb_slots]
    want_cache[load_slots] = want_master[load_rows]
    swap_rows(cache, master, wb_slots, wb_rows, load_slots, load_rows)
    np.testing.assert_array_equal(master, want_master)
    np.testing.assert_array_equal(cache, want_cache)


def test_finished_steps_are_applied_at_the_next_admission():
    """``finish`` (what the prefetcher's ``done`` calls) only queues: the rows stay pinned and in the
    window until the next admission (or ``clear``) applies it."""
    cache = RowCache(HostRows(np.zeros((10, 1), np.float32)), 2)
    cache.enter_window(np.array([0, 1]))
    slots, _ = cache.admit(np.array([0, 1]))
    cache.finish(np.array([0, 1]), slots)
    assert cache.pins[slots].tolist() == [1, 1] and cache.window[:2].tolist() == [1, 1]
    cache.admit(np.array([2]))  # applies the finished step, then evicts one of its rows
    assert cache.window[:2].tolist() == [0, 0] and np.count_nonzero(cache.resident(np.array([0, 1]))) == 1


@pytest.mark.parametrize("bound", [1, 2, 2047, 2049, 3_376_585, 2**40])
def test_radix_sort_equals_numpy_sort(bound):
    from gmp.train.tiers._kernels import radix_sort

    rng = np.random.default_rng(bound % 97)
    for size in (0, 1, 5, 10_000):
        a = rng.integers(0, bound, size)
        np.testing.assert_array_equal(radix_sort(a, bound), np.sort(a))


def test_empty_accesses_do_not_wait_for_an_admission_in_flight():
    """A step's read of no rows (e.g. no stale row to re-read) returns at once: it must not queue behind
    the prefetch thread, which holds the cache's lock while it admits the next step's rows."""
    import threading

    from gmp.train.tiers import TieredTable, TierOptions

    table = TieredTable(TierOptions(table_location="host", cache_rows=4), worker=0, num_rows=10, row_dim=2,
                        state=True, dtype=np.float32, device="cpu",
                        init=lambda a, b: np.ones((b - a, 4), np.float32))
    done = threading.Event()

    def empty_accesses():
        none = np.zeros(0, np.int64)
        assert table.read(none).shape == (0, 4)
        values, state, idx, commit = table.views(none)
        commit()
        assert idx.numel() == 0 and table.cache.gather(none).shape == (0, 4)
        table.cache.scatter(none, torch.zeros(0, 4))
        done.set()

    with table.cache.lock:  # what an admission in flight holds
        t = threading.Thread(target=empty_accesses, daemon=True)
        t.start()
        assert done.wait(timeout=10), "an empty read waited for the cache's lock"
    t.join()
    table.close()
